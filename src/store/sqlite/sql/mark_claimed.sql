-- Claims the picked rows.
-- Reads its rows from json_each(?1), a JSON array built by write.rs: one statement per
-- call, whatever its size, driven from the array and finding each row by a key (the rowid
-- or the outbox_id index), so its cost is the rows it names. The unary + on
-- status = 'claimed' keeps the planner off the partial index outbox_leases: with statistics
-- that show few claimed rows it would otherwise read every claim of every lane and probe the
-- array for each.
-- Binds: ?1 [[seq, claim_token], ...], ?2 consumer, ?3 lease end, ?4 now.
UPDATE outbox SET status = 'claimed',
        attempt_count = attempt_count + 1, claimed_by = ?2,
        claim_token = given.token, lease_expires_at = ?3, updated_at = ?4
    FROM (SELECT json_extract(value, '$[0]') AS pick,
            json_extract(value, '$[1]') AS token
        FROM json_each(?1)) AS given
    WHERE outbox.seq = given.pick
    RETURNING seq, outbox_id, lane, target, payload, headers, ordering_key, dedupe_key,
        status, attempt_count, max_attempts, available_at, claimed_by, claim_token,
        lease_expires_at, last_error, created_at, updated_at, delivered_at
