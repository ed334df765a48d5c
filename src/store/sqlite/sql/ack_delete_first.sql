-- ack_delete for the rows an ack takes first, as ack_first.
-- Binds: ?1 [[outbox_id, claim_token], ...].
DELETE FROM outbox
    WHERE (outbox_id, claim_token) IN (SELECT json_extract(value, '$[0]'),
            json_extract(value, '$[1]') FROM json_each(?1))
        AND +status = 'claimed' AND (ordering_key IS NULL OR key_head IS NULL)
    RETURNING outbox_id
