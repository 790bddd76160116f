-- The index on (environment_id, name, customer_id) served only counter backfills, and it cost every
-- projected event about a quarter of its row (a wide key inserted at a random place: ~5 us of
-- PostgreSQL per event on the bench box, 20 -> 14 us per row). Backfills now page through the
-- environment's customers on events_customer_received and filter the counter's event by name.
drop index if exists events_name_customer;
