-- The ack, for the rows named in ?1 still claimed under their token.
-- Reads its rows from json_each(?1), a JSON array built by write.rs: one statement per
-- call, whatever its size, driven from the array and finding each row by a key (the rowid
-- or the outbox_id index), so its cost is the rows it names. The unary + on
-- status = 'claimed' keeps the planner off the partial index outbox_leases: with statistics
-- that show few claimed rows it would otherwise read every claim of every lane and probe the
-- array for each.
-- Binds: ?1 [[outbox_id, claim_token], ...], ?2 now.
UPDATE outbox SET status = 'delivered', delivered_at = ?2,
        claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
        updated_at = ?2
    FROM (SELECT json_extract(value, '$[0]') AS id,
            json_extract(value, '$[1]') AS token
        FROM json_each(?1)) AS given
    WHERE outbox.outbox_id = given.id AND +outbox.status = 'claimed'
        AND outbox.claim_token = given.token
    RETURNING outbox_id
