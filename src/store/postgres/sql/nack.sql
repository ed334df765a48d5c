-- $1 now, $2 ids, $3 tokens, $4 errors, $5 retry delays (NULL: permanent).
-- The CASEs read the row before the update: attempts left decide the outcome.
WITH input AS (
    SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::int8[])
    WITH ORDINALITY AS i(outbox_id, claim_token, error, retry_ms, ord)
)
UPDATE "public"."outbox_messages" m SET
    status = CASE WHEN i.retry_ms IS NOT NULL
                   AND m.attempt_count < m.max_attempts
             THEN 'pending' ELSE 'dead_letter' END,
    available_at = CASE WHEN i.retry_ms IS NOT NULL
                         AND m.attempt_count < m.max_attempts
                   THEN COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
                        + i.retry_ms * interval '1 millisecond'
                   ELSE m.available_at END,
    last_error = i.error, claimed_by = NULL, claim_token = NULL,
    lease_expires_at = NULL,
    updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
FROM input i
WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
  AND m.claim_token = i.claim_token
RETURNING i.ord, m.status, m.lane, m.target, m.ordering_key
