-- Tier programs (catalog): a currency key, a basis, ascending levels and an optional downgrade
-- check per program; key unique per environment; version is the ETag of safe edits (If-Match).
create table tier_programs (
  environment_id text not null,
  id text not null,
  key text not null,
  name text not null,
  currency text not null,
  basis text not null check (basis in ('lifetime_earned', 'earned_rolling_days', 'balance')),
  rolling_days int,
  levels jsonb not null,
  downgrade_check jsonb,
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id),
  unique (environment_id, key)
);
