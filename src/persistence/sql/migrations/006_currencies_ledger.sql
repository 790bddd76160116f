-- Currencies (catalog) and the ledger entries read model (projected from ledger facts).
create table currencies (
  environment_id text not null,
  id text not null,
  key text not null,
  name text not null,
  negative_balance text not null check (negative_balance in ('forbid', 'allow')),
  expiry_days int,
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id),
  unique (environment_id, key)
);

create table ledger_entries (
  environment_id text not null,
  id text not null,
  customer_id text not null,
  currency text not null,
  type text not null,
  status text not null,
  amount bigint not null,
  remaining bigint not null,
  expires_at timestamptz,
  confirm_after timestamptz,
  reason text,
  source_type text,
  source_id text,
  reverses_entry_id text,
  created_at timestamptz not null,
  primary key (environment_id, id)
);
create index ledger_entries_customer on ledger_entries (environment_id, customer_id, created_at desc, id desc);
