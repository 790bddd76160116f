-- Tenancy and credentials: users, organizations, projects, environments, memberships, every
-- stored credential (API keys, PATs, sessions) and service-wide secrets. Owned by src/tenancy.
-- Secrets are stored only as sha256 hashes (token_hash); the token itself is never persisted.
-- Runs inside migrate()'s transaction with search_path set to the target schema: never name a schema.

create table users (
  id text primary key,
  -- Stored lower-cased so uniqueness is case-insensitive the way mail addresses are in practice.
  email text not null unique,
  name text,
  oidc_subject text unique,
  created_at timestamptz not null default now()
);

create table organizations (
  id text primary key,
  name text not null,
  slug text not null unique,
  timezone text not null,
  plan_id text not null default 'free',
  plan_version integer not null default 1,
  billing_mode text not null default 'none' check (billing_mode in ('card', 'invoice', 'none')),
  ai_drafting_disabled boolean not null default false,
  version integer not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create table projects (
  id text primary key,
  organization_id text not null references organizations (id) on delete cascade,
  name text not null,
  created_at timestamptz not null default now()
);
create index projects_organization_idx on projects (organization_id);

create table environments (
  id text primary key,
  project_id text not null references projects (id) on delete cascade,
  organization_id text not null references organizations (id) on delete cascade,
  name text not null,
  runtime_class text not null check (runtime_class in ('test', 'live')),
  timezone text not null,
  -- Live environments start under the limits policy; test environments apply change sets freely.
  autonomy text not null check (autonomy in ('auto', 'limits')),
  created_at timestamptz not null default now(),
  unique (project_id, name)
);
create index environments_organization_idx on environments (organization_id);

create table memberships (
  organization_id text not null references organizations (id) on delete cascade,
  user_id text not null references users (id) on delete cascade,
  role text not null check (role in ('owner', 'admin', 'editor', 'viewer')),
  created_at timestamptz not null default now(),
  primary key (organization_id, user_id)
);
create index memberships_user_idx on memberships (user_id);

create table credentials (
  id text primary key,
  kind text not null check (kind in ('secret', 'publishable', 'pat', 'session')),
  token_hash text not null unique,
  token_hint text not null,
  name text,
  -- API keys: their organization. PATs: the organization they were issued with (informational);
  -- sessions: null, because a first sign-in has no organization yet.
  organization_id text references organizations (id) on delete cascade,
  environment_id text references environments (id) on delete cascade,
  user_id text references users (id) on delete cascade,
  scopes text[] not null default '{}',
  allowed_events text[] not null default '{}',
  allowed_origins text[] not null default '{}',
  created_at timestamptz not null default now(),
  expires_at timestamptz,
  revoked_at timestamptz,
  check ((kind in ('secret', 'publishable')) = (environment_id is not null)),
  check ((kind in ('pat', 'session')) = (user_id is not null))
);
create index credentials_environment_idx on credentials (environment_id, id);
-- The revocation backstop poll reads recent revocations every second on every node.
create index credentials_revoked_idx on credentials (revoked_at) where revoked_at is not null;

create table service_secrets (
  name text primary key,
  value text not null,
  created_at timestamptz not null default now()
);
