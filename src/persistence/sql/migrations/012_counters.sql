-- Historical counters (catalog): a per-customer count of one event name, optionally filtered on
-- event properties, within a window; status backfilling until the history is counted. name is
-- unique per environment (rules read customer.counters.<name>).
create table counter_definitions (
  environment_id text not null,
  id text collate "C" not null,
  name text not null,
  event text not null,
  time_window jsonb not null,
  filter jsonb,
  status text not null check (status in ('backfilling', 'ready')),
  -- Set while a backfill job runs (a second POST .../backfill answers with the running job).
  backfill_started_at timestamptz,
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id),
  unique (environment_id, name)
);

-- The counters that counted an event live (from the counter.counted fact journaled with it): a
-- backfill counts only events whose row does not name the counter, so no event counts twice.
alter table events add column counted text[];
create index events_name_customer on events (environment_id, name, customer_id);

-- Each customer's level per tier program (projected from tier.assigned / tier.changed), for the
-- tier program guard (holders per level) and the due-work scheduler (next downgrade check).
create table customer_tiers (
  environment_id text not null,
  customer_id text not null,
  program_id text not null,
  level text not null,
  since timestamptz not null,
  next_check_at timestamptz,
  primary key (environment_id, customer_id, program_id)
);
create index customer_tiers_level on customer_tiers (environment_id, program_id, level);
create index customer_tiers_check on customer_tiers (next_check_at) where next_check_at is not null;
