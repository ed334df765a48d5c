-- The ack that deletes (keep_delivered = false), for the rows named in ?1 still claimed
-- under their token. SQLite's DELETE takes no FROM: the (id, token) pairs are a row-value
-- IN, which probes the id's unique index per pair. The triggers outbox_head_on_delete and
-- outbox_count_delete keep the key heads and counts.
-- Binds: ?1 [[outbox_id, claim_token], ...].
DELETE FROM outbox
    WHERE (outbox_id, claim_token) IN (SELECT json_extract(value, '$[0]'),
            json_extract(value, '$[1]') FROM json_each(?1))
        AND +status = 'claimed'
    RETURNING outbox_id
