-- Rules (catalog) and their immutable numbered versions. A rule's draft_definition is the edit not
-- yet published (null once published and untouched); active_version_id names the version the
-- engine evaluates while the rule is published. A version keeps the plan compiled at publish time.
create table rules (
  environment_id text not null,
  id text not null,
  name text not null,
  campaign_id text,
  status text not null check (status in ('draft', 'published', 'paused', 'archived')),
  priority int not null default 0,
  draft_definition jsonb,
  active_version_id text,
  version int not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id)
);
create index rules_status on rules (environment_id, status, id);
create index rules_campaign on rules (environment_id, campaign_id, id) where campaign_id is not null;

create table rule_versions (
  environment_id text not null,
  id text not null,
  rule_id text not null,
  number int not null,
  definition jsonb not null,
  plan jsonb not null,
  created_by text,
  created_at timestamptz not null default now(),
  primary key (environment_id, id),
  unique (rule_id, number)
);
