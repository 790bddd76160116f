-- Core tables: actor snapshots and routing keys (SnapshotStore), partition checkpoints,
-- idempotency records, and the read models the projector fills from the journal.
-- Runs inside migrate()'s transaction with search_path set to the target schema: never qualify
-- a table with a schema here, and never edit this file once shipped (add 00N_*.sql instead).

create table actor_snapshots (
  environment_id text not null,
  customer_id text not null,
  partition int not null,
  payload bytea not null,
  updated_at timestamptz not null default now(),
  primary key (environment_id, customer_id)
);
create index actor_snapshots_partition on actor_snapshots (partition);

create table customer_keys (
  environment_id text not null,
  key text not null,
  customer_id text not null,
  partition int not null,
  primary key (environment_id, key)
);

-- checkpoint is a journal offset ('<ms>-<seq>' or '0'); it only moves forward (compared as numbers).
create table partition_checkpoints (
  partition int primary key,
  checkpoint text not null,
  updated_at timestamptz not null default now()
);

-- state: 'in_progress' (status/body null) or 'done'. A row whose expires_at has passed is absent.
create table idempotency_keys (
  scope text not null,
  key text not null,
  fingerprint text not null,
  state text not null check (state in ('in_progress', 'done')),
  status int,
  body text,
  created_at timestamptz not null,
  expires_at timestamptz not null,
  primary key (scope, key)
);
create index idempotency_keys_expires_at on idempotency_keys (expires_at);

-- Read models: rebuilt from the journal, so they hold no fact the journal lacks.
-- Keyset-paged ids use collate "C" (byte order), so pages are identical on PostgreSQL and PGlite
-- whatever the database's default collation, and the primary key index serves the keyset.
create table customers (
  environment_id text not null,
  id text collate "C" not null,
  external_id text, -- null once the customer is erased
  attributes jsonb not null default '{}',
  version int not null,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  deleted_at timestamptz,
  primary key (environment_id, id)
);
create index customers_external_id on customers (environment_id, external_id);

create table customer_aliases (
  environment_id text not null,
  alias text not null,
  customer_id text not null,
  kind text not null,
  created_at timestamptz not null,
  primary key (environment_id, alias)
);
create index customer_aliases_customer on customer_aliases (environment_id, customer_id);

create table events (
  environment_id text not null,
  id text collate "C" not null,
  client_event_id text not null,
  customer_id text not null,
  name text not null,
  occurred_at timestamptz not null,
  received_at timestamptz not null,
  properties jsonb, -- null once the customer is erased
  status text not null,
  primary key (environment_id, id)
);
create index events_customer_received on events (environment_id, customer_id, received_at desc, id desc);

create table projection_offsets (
  partition int primary key,
  "offset" text not null
);
