-- Match results (spec 2.11, 2.12, 4.8, 4.9): match profiles written through change sets, with every
-- revision kept (results name the revision they were checked against); change sets; and the match
-- record of each reported match_id with one row per player (verdict, reasons, review). The rate
-- windows live in the customers' actors (journal + snapshots), not here.

create table match_profiles (
  environment_id text not null,
  id text not null,
  key text not null,
  revision int not null,
  status text not null check (status in ('active', 'archived')),
  -- The domain profile (src/domain/match/profile.ts MatchProfile), camelCase.
  profile jsonb not null,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (environment_id, id),
  unique (environment_id, key)
);

create table match_profile_revisions (
  environment_id text not null,
  profile_id text not null,
  revision int not null,
  profile jsonb not null,
  change_set_id text not null,
  created_at timestamptz not null default now(),
  primary key (environment_id, profile_id, revision)
);

create table change_sets (
  environment_id text not null,
  id text not null,
  status text not null check (status in ('pending', 'awaiting_confirmation', 'applied')),
  commands jsonb not null,
  results jsonb,
  revision int not null default 1,
  created_by text not null,
  applied_by text,
  confirmed_by text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  applied_at timestamptz,
  primary key (environment_id, id)
);

create table match_results (
  environment_id text not null,
  id text not null,
  match_id text not null,
  profile_id text not null,
  profile_key text not null,
  profile_revision int not null,
  event text not null,
  -- Rule 4: the content fingerprint of the first report (reportFingerprint).
  fingerprint text not null,
  started_at timestamptz not null,
  ended_at timestamptz not null,
  duration_seconds double precision not null,
  reporting_key_id text not null,
  -- Derived from the players (pending players count as admitted, see the handler).
  status text not null check (status in ('held', 'admitted', 'rejected', 'partially_admitted')),
  admission_errors jsonb not null default '[]',
  revision int not null default 1,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (environment_id, id),
  unique (environment_id, match_id)
);
-- The review queue (status = held, oldest first) and filtered lists.
create index match_results_status_idx on match_results (environment_id, status, id);

create table match_result_players (
  environment_id text not null,
  id text not null,
  match_result_id text not null,
  position int not null,
  -- {by: 'external_id' | 'id', value}
  customer_ref jsonb not null,
  customer_id text,
  metrics jsonb not null,
  won boolean,
  -- pending: admission not finished (an interrupted request; a repeat of the report completes it).
  status text not null check (status in ('pending', 'admitted', 'held', 'rejected')),
  -- Verdict reserved before the group stage (admitted | held | rejected), for completion on retry.
  pending_verdict text not null,
  reasons jsonb not null default '[]',
  event_id text,
  client_event_id text,
  review jsonb,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (environment_id, id),
  unique (environment_id, match_result_id, position)
);
