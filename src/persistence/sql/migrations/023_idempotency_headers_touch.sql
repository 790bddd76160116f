-- Idempotency-Key answers keep the response headers a replay must repeat (headers: a JSON object
-- of lower-case names, e.g. {"etag":"\"1\""}; null for answers stored before this column, which
-- replay without them). A running request touches its claim (touched_at) every third of the
-- stale window, so only a claim whose process died goes stale and may be taken over; rows
-- claimed before this column count from created_at.
alter table idempotency_keys add column headers text, add column touched_at timestamptz;
