-- The customers a stored Idempotency-Key answer is about (customer_ids: their cust_ ids, written
-- when the answer is completed; empty for an answer about none). Erasing a customer (its delete,
-- with those merged into it; a merge does not erase) deletes the answers naming it in every scope
-- of its environment (the environment's API keys, and each person's `env/user` scope), including
-- answers that do not show the id, such as a ledger entry's. Null: stored before this column (or still in progress); such answers are found
-- by the id in their body, as before. The GIN index serves the erasure's `customer_ids && ids`;
-- the partial index holds only the answers stored before this column, so it is empty once they
-- expire (24 hours).
alter table idempotency_keys add column customer_ids text[];
create index idempotency_keys_customer_ids on idempotency_keys using gin (customer_ids);
create index idempotency_keys_unlabelled_answers on idempotency_keys (scope) where customer_ids is null and state = 'done';
