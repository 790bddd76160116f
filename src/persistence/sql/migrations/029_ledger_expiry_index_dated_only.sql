-- The expiry sweep looks for posted entries with a remainder whose expires_at has passed
-- (`expires_at <= now`), which never matches an entry without an expiry date. Yet every award in
-- a currency without expiry_days (remaining > 0, expires_at null) paid an entry in this index. The
-- sweep's condition implies `expires_at is not null`, so PostgreSQL still uses the narrower index.
drop index if exists ledger_entries_expiry_due;
create index ledger_entries_expiry_due on ledger_entries (environment_id, expires_at)
  where status = 'posted' and remaining > 0 and expires_at is not null;
