-- $1 ids, $2 tokens: the ack that deletes its rows (`keep_delivered = false`), under the
-- same fencing as `ack.sql`, answering the same columns (the keys it took out of live, for
-- `promote_heads`).
WITH input AS (
    SELECT * FROM unnest({{ids}}::uuid[], {{tokens}}::uuid[])
    WITH ORDINALITY AS i(outbox_id, claim_token, ord)
)
DELETE FROM "public"."outbox_messages" m
USING input i
WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
  AND m.claim_token = i.claim_token
RETURNING i.ord, m.lane, m.target, m.ordering_key
