-- Test clocks (decisions.md): a test environment's clock runs ahead of the real one by an offset
-- that only grows. Due ledger work is found through the ledger read model, so it is indexed.
alter table environments add column clock_offset_ms bigint not null default 0;
create index ledger_entries_pending_due on ledger_entries (environment_id, confirm_after) where status = 'pending';
create index ledger_entries_expiry_due on ledger_entries (environment_id, expires_at) where status = 'posted' and remaining > 0;
