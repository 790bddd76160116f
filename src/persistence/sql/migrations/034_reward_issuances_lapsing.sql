-- Issued rewards of an environment by expiry: the ones past expires_at that the sweep has not
-- expired yet are read as expired (GET /v1/reward_issuances?status=expired, read-model.ts
-- listIssuances) and expired by the sweep of one environment (reward-due-work.ts). Without it
-- both walked every issued row of the environment (reward_issuances_due holds expires_at alone,
-- across environments: a test clock far ahead would take in every other environment's rows too).
create index reward_issuances_lapsing on reward_issuances (environment_id, expires_at) where status = 'issued';
