-- The environment-wide register of client event ids (EventIds, embedded mode): each id bound to
-- the content fingerprint it was first received with. Rows are never deleted.
create table event_ids (
  environment_id text not null,
  client_event_id text not null,
  fp bigint not null,
  primary key (environment_id, client_event_id)
);
