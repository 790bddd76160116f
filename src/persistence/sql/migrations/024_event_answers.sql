-- The effects a sync event was answered with (null for an event answered 202): a repeat of the
-- event after its customer's in-memory answers moved on is answered from here, as the first was.
alter table events add column effects jsonb;
