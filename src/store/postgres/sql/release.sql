-- $1 now, $2 ids, $3 tokens, $4 channel: claims handed back unattempted, due now, their
-- attempt not counted; one notification per (lane, target).
WITH input AS (
    SELECT * FROM unnest($2::uuid[], $3::uuid[])
    WITH ORDINALITY AS i(outbox_id, claim_token, ord)
),
upd AS (
    UPDATE "public"."outbox_messages" m
    SET status = 'pending',
        available_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()),
        attempt_count = GREATEST(m.attempt_count - 1, 0),
        claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
        updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
    FROM input i
    WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
      AND m.claim_token = i.claim_token
    RETURNING i.ord, m.lane, m.target
),
-- PostgreSQL folds identical notifications of one transaction into one.
wake AS (
    SELECT pg_notify($4, w.lane || E'\t' || w.target)
    FROM (SELECT DISTINCT lane, target FROM upd) w
)
SELECT upd.ord, (SELECT count(*) FROM wake) AS woken FROM upd
