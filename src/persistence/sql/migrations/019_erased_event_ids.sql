-- Events of erased customers in the register of client event ids (EventIds.erase, embedded mode):
-- hash53 of the client event id and the content fingerprint, as the customer's SeenEvents kept
-- them, with the service id the event was recorded as. A claim of an id bound before with the same
-- fingerprint reads it, so a resend answers as the duplicate it is. Rows are never deleted.
create table erased_event_ids (
  environment_id text not null,
  id_hash bigint not null,
  fp bigint not null,
  event_id text not null,
  primary key (environment_id, id_hash, fp)
);
