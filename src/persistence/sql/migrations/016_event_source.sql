-- Who sent each event: the sender's trust (merchant_asserted or client_reported) and its
-- credential (type and id; a match player's event names the reporting secret key). Null for
-- events recorded before these were kept.
alter table events add column trust text, add column source_type text, add column source_id text;
