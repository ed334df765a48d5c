-- $1 now, $2 ids, $3 tokens, $4 lease in ms.
WITH input AS (
    SELECT * FROM unnest($2::uuid[], $3::uuid[])
    WITH ORDINALITY AS i(outbox_id, claim_token, ord)
)
UPDATE "public"."outbox_messages" m
SET lease_expires_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
        + $4::int8 * interval '1 millisecond',
    updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
FROM input i
WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
  AND m.claim_token = i.claim_token
RETURNING i.ord
