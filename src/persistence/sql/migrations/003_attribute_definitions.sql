-- Typed customer attributes per environment. A definition's key is unique in its environment;
-- customer writes are checked against the definitions (gateway), values stay in the actor state.
create table attribute_definitions (
  environment_id text not null,
  id text not null,
  key text not null,
  type text not null check (type in ('string', 'number', 'integer', 'boolean', 'timestamp', 'json')),
  description text,
  pii boolean not null default false,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (environment_id, id),
  unique (environment_id, key)
);
