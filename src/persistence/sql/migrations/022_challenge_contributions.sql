-- Challenge progress records carry their contributions (spec 2.8: progress.contributions[]): the
-- distinct contribution_key values counted in the row's period and cycle, in the order counted (a
-- revoked value is removed). Empty for a challenge without contribution_key (no values are stored).
-- Rows projected before this migration start empty and gain the values counted from now on; the
-- customer's actor holds the full list of its current record (revoke and reevaluate answer it).
alter table challenge_progress add column contributions text[] not null default '{}';
