-- Rule limits shared by every customer of an environment (SharedLimits, both modes): the count
-- of slots taken per (rule, limit, scope key), and the slot each client event id holds. A slot is
-- taken and counted in one statement; `cap` is the max the last reservation was checked against.
-- Scope keys longer than 256 characters are stored as their sha256 (the adapter does it).
create table rule_limit_counts (
  environment_id text not null,
  rule_id text not null,
  limit_id text not null,
  scope_key text not null,
  taken bigint not null,
  cap bigint not null,
  primary key (environment_id, rule_id, limit_id, scope_key)
);

create table rule_limit_slots (
  environment_id text not null,
  client_event_id text not null,
  rule_id text not null,
  limit_id text not null,
  scope_key text not null,
  primary key (environment_id, client_event_id, rule_id, limit_id, scope_key)
);
