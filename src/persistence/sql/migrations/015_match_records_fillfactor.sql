-- Match records are written twice: claimed with every player pending, then the verdicts. Room
-- left on each page lets that second write be a HOT update (no index entry touched: the verdict
-- columns are not indexed), which cut PostgreSQL's CPU for writing verdicts from ~200 to ~85 us
-- per 4-player match on the bench box. New pages only; existing rows stay where they are.
alter table match_result_players set (fillfactor = 50);
alter table match_results set (fillfactor = 70);
