-- The move of holders a tier program edit owes (levels removed, a reevaluation, a downgrade check
-- added or shortened), stored in the same UPDATE as the edit and cleared once every holder has
-- moved: a move that stopped (a crash, a failed customer) is finished by the next PATCH or by the
-- scheduler's sweep. Null when nothing is owed.
alter table tier_programs add column pending_move jsonb;
create index tier_programs_pending_move on tier_programs (environment_id) where pending_move is not null;
