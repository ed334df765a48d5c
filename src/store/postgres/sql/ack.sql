-- $1 now, $2 ids, $3 tokens: the claims to mark delivered. Answers the ordinals of the
-- claims applied, and the keys they leave for `promote_heads`.
WITH input AS (
    SELECT * FROM unnest({{ids}}::uuid[], {{tokens}}::uuid[])
    WITH ORDINALITY AS i(outbox_id, claim_token, ord)
)
UPDATE "public"."outbox_messages" m
SET status = 'delivered',
    delivered_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()),
    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
    updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
FROM input i
WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
  AND m.claim_token = i.claim_token
RETURNING i.ord, m.lane, m.target, m.ordering_key
