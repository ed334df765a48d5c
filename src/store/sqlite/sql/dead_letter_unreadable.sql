-- Dead-letters claimed rows that cannot be read (store/unreadable.rs), fenced on their
-- claim tokens; by seq, not id: the id of an unreadable row may be what cannot be read.
-- Reads its rows from json_each(?1), a JSON array built by write.rs: one statement per
-- call, whatever its size, driven from the array and finding each row by a key (the rowid
-- or the outbox_id index), so its cost is the rows it names. The unary + on
-- status = 'claimed' keeps the planner off the partial index outbox_leases: with statistics
-- that show few claimed rows it would otherwise read every claim of every lane and probe the
-- array for each.
-- Binds: ?1 [[seq, claim_token, error], ...], ?2 now.
UPDATE outbox SET status = 'dead_letter',
        last_error = given.error, claimed_by = NULL, claim_token = NULL,
        lease_expires_at = NULL, updated_at = ?2
    FROM (SELECT json_extract(value, '$[0]') AS pick,
            json_extract(value, '$[1]') AS token,
            json_extract(value, '$[2]') AS error
        FROM json_each(?1)) AS given
    WHERE outbox.seq = given.pick AND +outbox.status = 'claimed'
        AND outbox.claim_token = given.token
    RETURNING seq
