-- Deleted and merged customers hold no tier level: their placements are dropped on delete and
-- merge from now on (read-model.ts), and the ones projected before are dropped here.
delete from customer_tiers t
using customers c
where c.environment_id = t.environment_id and c.id = t.customer_id
  and (c.deleted_at is not null or c.merged_into is not null);
