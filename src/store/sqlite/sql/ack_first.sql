-- ack for the rows an ack takes first: rows without a key, and keyed rows without the head
-- mark (queued behind their key's head). See write/fenced.rs, ack.
-- Binds: ?1 [[outbox_id, claim_token], ...], ?2 now.
UPDATE outbox SET status = 'delivered', delivered_at = ?2,
        claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
        updated_at = ?2
    FROM (SELECT json_extract(value, '$[0]') AS id,
            json_extract(value, '$[1]') AS token
        FROM json_each(?1)) AS given
    WHERE outbox.outbox_id = given.id AND +outbox.status = 'claimed'
        AND outbox.claim_token = given.token
        AND (outbox.ordering_key IS NULL OR outbox.key_head IS NULL)
    RETURNING outbox_id
