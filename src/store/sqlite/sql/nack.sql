-- Returns claims to pending for a retry or dead-letters them.
-- Reads its rows from json_each(?1), a JSON array built by write.rs: one statement per
-- call, whatever its size, driven from the array and finding each row by a key (the rowid
-- or the outbox_id index), so its cost is the rows it names. The unary + on
-- status = 'claimed' keeps the planner off the partial index outbox_leases: with statistics
-- that show few claimed rows it would otherwise read every claim of every lane and probe the
-- array for each.
-- Binds: ?1 [[outbox_id, claim_token, error, retry, due], ...], where retry is 1 for a
-- retry and 0 for permanent and due is when a retry is due; ?2 now.
UPDATE outbox SET last_error = given.error,
        claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
        updated_at = ?2,
        available_at = CASE WHEN given.retry AND attempt_count < max_attempts
            THEN given.due ELSE available_at END,
        status = CASE WHEN given.retry AND attempt_count < max_attempts
            THEN 'pending' ELSE 'dead_letter' END
    FROM (SELECT json_extract(value, '$[0]') AS id,
            json_extract(value, '$[1]') AS token,
            json_extract(value, '$[2]') AS error,
            json_extract(value, '$[3]') AS retry,
            json_extract(value, '$[4]') AS due
        FROM json_each(?1)) AS given
    WHERE outbox.outbox_id = given.id AND +outbox.status = 'claimed'
        AND outbox.claim_token = given.token
    RETURNING outbox_id, status
