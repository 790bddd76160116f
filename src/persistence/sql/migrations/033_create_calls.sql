-- What each creating request made, by its call id (a hash of its Idempotency-Key's scope, the key
-- and the request's fingerprint): written in the transaction that inserts the resource, so a run
-- again of a request whose answer was never stored (the claim went stale, or a 5xx released it)
-- finds the first run's resource instead of creating a second (persistence/sql/create-calls.ts).
-- used_at is the last run: a row answers runs within 24 hours of it (the same key and body later
-- are a new request, which takes the row over); rows unused for longer are purged, by the index.
create table create_calls (
  call_id text primary key,
  resource_id text not null,
  used_at timestamptz not null default now()
);
create index create_calls_used_at on create_calls (used_at);
