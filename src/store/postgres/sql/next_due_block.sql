-- `next_due` under `policy`: $1 now, $2 lane, $3 target.
-- Milliseconds to wait, rounded up so a relay that sleeps that long finds the message
-- due; negative when overdue (the caller clamps: GREATEST would turn "nothing to wait
-- for", NULL, into 0). A running lease always counts (its lapse frees the row or its
-- key); a row its key holds back does not, as in the claim, so an idle relay never spins
-- on rows it may not take. Each branch reads one index in order and stops at its first
-- row: the next lease by `lease_idx`, the next pending head by `head_idx` (rows behind a
-- head are not in it), a lapsed claim by `lease_idx`.
{{next_due}}
