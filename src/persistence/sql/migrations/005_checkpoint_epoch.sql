-- Snapshot writes are fenced like journal appends: a new owner claims the partition (raising the
-- stored epoch) before it reads the checkpoint, and a save under an older epoch is refused, so a
-- node that lost its lease can never overwrite the new owner's snapshots or move its checkpoint.
alter table partition_checkpoints add column epoch bigint not null default 0;
