-- Dead-letters lapsed claims on their last attempt.
-- Reads its rows from json_each(?1), a JSON array built by write.rs: one statement per
-- call, whatever its size, driven from the array and finding each row by a key (the rowid
-- or the outbox_id index), so its cost is the rows it names. The unary + on
-- status = 'claimed' keeps the planner off the partial index outbox_leases: with statistics
-- that show few claimed rows it would otherwise read every claim of every lane and probe the
-- array for each.
-- Binds: ?1 [seq, ...], ?2 error, ?3 now.
UPDATE outbox SET status = 'dead_letter', last_error = ?2,
        claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
        updated_at = ?3
    WHERE seq IN (SELECT value FROM json_each(?1))
