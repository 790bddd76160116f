-- Challenges (catalog): definitions per environment; status draft -> active <-> paused -> ended;
-- version is the ETag of safe edits (If-Match). Progress and enrollments are read tables the
-- projector writes from journal facts (the customer's actor is the only writer of the truth).
-- audit_entries records audited operator actions (revoke, reevaluate) with the acting credential.
create table challenges (
  environment_id text not null,
  id text not null,
  name text not null,
  qualifying jsonb not null,
  target int not null,
  period text not null check (period in ('none', 'daily', 'weekly', 'monthly')),
  contribution_key text,
  enrollment text not null check (enrollment in ('automatic', 'explicit')),
  repeatable boolean not null default false,
  completion_actions jsonb not null default '[]',
  campaign_id text,
  starts_at timestamptz,
  ends_at timestamptz,
  status text not null check (status in ('draft', 'active', 'paused', 'ended')),
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id)
);
create index challenges_status on challenges (environment_id, status, id);
create index challenges_ending on challenges (ends_at) where status <> 'ended' and ends_at is not null;

create table challenge_progress (
  environment_id text not null,
  challenge_id text not null,
  customer_id text not null,
  period_key text not null,
  cycle int not null,
  count int not null,
  target int not null,
  status text not null,
  completed_at timestamptz,
  updated_at timestamptz not null,
  primary key (environment_id, challenge_id, customer_id, period_key, cycle)
);
create index challenge_progress_customer on challenge_progress (environment_id, customer_id);

create table challenge_enrollments (
  environment_id text not null,
  challenge_id text not null,
  customer_id text not null,
  enrolled_at timestamptz not null,
  primary key (environment_id, challenge_id, customer_id)
);

create table audit_entries (
  environment_id text not null,
  id text not null,
  actor_credential_id text not null,
  actor_kind text not null,
  action text not null,
  target_type text not null,
  target_id text not null,
  customer_id text,
  reason text not null,
  details jsonb not null default '{}',
  created_at timestamptz not null default now(),
  primary key (environment_id, id)
);
create index audit_entries_target on audit_entries (environment_id, target_type, target_id, created_at);
