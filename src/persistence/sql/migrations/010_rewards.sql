-- Rewards (catalog), the stock reservations that keep `issued` <= `availability` across every
-- partition and node, and the reward_issuances read model (projected from reward facts).
create table rewards (
  environment_id text not null,
  id text not null,
  name text not null,
  cost bigint not null check (cost >= 0),
  currency text not null,
  availability int not null check (availability >= 0),
  issued int not null default 0 check (issued >= 0),
  expiry_after text,
  status text not null default 'active' check (status in ('active', 'archived')),
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id),
  -- Belt and braces: the reserving UPDATE already refuses to pass availability.
  check (issued <= availability)
);
create index rewards_status on rewards (environment_id, status, id);

-- One row per unit taken from a reward's stock, keyed by the issuance id it was taken for.
-- reserved: counted in rewards.issued, the actor has not been seen to journal it yet;
-- confirmed: the issuance is journaled; released: the unit went back (cancel, refusal, reconciler).
create table reward_reservations (
  environment_id text not null,
  issuance_id text not null,
  reward_id text not null,
  customer_id text not null,
  state text not null check (state in ('reserved', 'confirmed', 'released')),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, issuance_id)
);
create index reward_reservations_open on reward_reservations (state, created_at) where state <> 'released';

create table reward_issuances (
  environment_id text not null,
  id text not null,
  reward_id text not null,
  customer_id text not null,
  status text not null,
  source_type text not null,
  source_id text,
  cost_entry_id text,
  expires_at timestamptz,
  redeemed_at timestamptz,
  cancelled_at timestamptz,
  reason text,
  version int not null,
  created_at timestamptz not null,
  primary key (environment_id, id)
);
create index reward_issuances_list on reward_issuances (environment_id, status, id);
create index reward_issuances_customer on reward_issuances (environment_id, customer_id, id);
create index reward_issuances_due on reward_issuances (expires_at) where status = 'issued';
create index reward_issuances_pending on reward_issuances (environment_id) where status = 'pending';
