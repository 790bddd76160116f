-- A campaign's budget row is kept for every currency its rules and challenges award in, capped or
-- not (catalog/campaign-budgets.ts): every award is leased from it first, so `reserved` is a
-- transactional running total (at least what was awarded) even while the currency has no cap, and
-- a cap added later starts from it (the projected campaign_spend lags). amount null: no cap.
-- Removing a cap sets amount null and keeps the row. A cap set below what was already awarded
-- leaves reserved above amount: nothing more is leased.
alter table campaign_budgets alter column amount drop not null;
alter table campaign_budgets drop constraint if exists campaign_budgets_check;
alter table campaign_budgets add constraint campaign_budgets_reserved_check check (reserved >= 0);

-- What was awarded before this migration is what the projection counted: rows for the uncapped
-- currencies, and capped rows whose reserved was seeded below it (an added cap read the lagging
-- projection) raised to it.
insert into campaign_budgets (environment_id, campaign_id, currency, amount, reserved)
select s.environment_id, s.campaign_id, s.currency, null, s.spent
from campaign_spend s join campaigns c on c.environment_id = s.environment_id and c.id = s.campaign_id
on conflict (environment_id, campaign_id, currency) do update set reserved = greatest(campaign_budgets.reserved, excluded.reserved);
