-- Segments and campaigns (catalog). A segment's name is unique per environment: rules and campaign
-- audiences refer to it by name. condition (dynamic only) is a condition document of the rule
-- language over customer.attributes.*. segment_members is a READ table projected from the
-- customers' journaled membership facts (the actors are the source of truth).
create table segments (
  environment_id text not null,
  id text not null,
  name text not null,
  description text,
  kind text not null check (kind in ('static', 'dynamic')),
  condition jsonb,
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id),
  unique (environment_id, name)
);

create table segment_members (
  environment_id text not null,
  segment_id text not null,
  customer_id text not null,
  added_at timestamptz not null,
  primary key (environment_id, segment_id, customer_id)
);
create index segment_members_customer on segment_members (environment_id, customer_id);

create table campaigns (
  environment_id text not null,
  id text not null,
  name text not null,
  description text,
  status text not null check (status in ('draft', 'active', 'paused', 'ended')),
  audience_segment text,
  starts_at timestamptz,
  ends_at timestamptz,
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id)
);
create index campaigns_audience on campaigns (environment_id, audience_segment) where audience_segment is not null;

-- One cap per currency. reserved = what nodes have leased in chunks (never above amount: the lease
-- is one conditional UPDATE); unused chunks are given back. reserved >= what was awarded.
create table campaign_budgets (
  environment_id text not null,
  campaign_id text not null,
  currency text not null,
  amount bigint not null check (amount >= 0),
  reserved bigint not null default 0 check (reserved >= 0 and reserved <= amount),
  primary key (environment_id, campaign_id, currency)
);

-- What the campaign's rules awarded (projected from the customers' journaled campaign.spent facts).
create table campaign_spend (
  environment_id text not null,
  campaign_id text not null,
  currency text not null,
  spent bigint not null default 0,
  primary key (environment_id, campaign_id, currency)
);
