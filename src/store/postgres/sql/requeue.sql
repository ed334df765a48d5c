-- $1 now, $2..$8 filter (as `discard.sql`'s $1..$7), $9 channel: dead letters back to
-- pending, one notification per (lane, target). A requeued row is marked a head: it may be
-- earlier than its key's head; if not, the mark costs a claim one skipped row.
WITH upd AS (
    UPDATE "public"."outbox_messages" m
    SET status = 'pending', attempt_count = 0,
        available_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()),
        updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()),
        key_head = true
    WHERE m.status = 'dead_letter'
      AND ($2::text IS NULL OR m.lane = $2)
      AND ($3::text IS NULL OR m.target = $3)
      AND ($4::text IS NULL OR m.ordering_key = $4)
      AND (cardinality($5::uuid[]) = 0 OR m.outbox_id = ANY($5))
      AND ($6::int8 IS NULL OR m.created_at >= (timestamptz 'epoch' + $6::int8 * interval '1 millisecond'))
      AND ($7::int8 IS NULL OR m.created_at < (timestamptz 'epoch' + $7::int8 * interval '1 millisecond'))
      AND ($8::text IS NULL OR strpos(m.last_error, $8) > 0)
    RETURNING m.lane, m.target
),
-- PostgreSQL folds identical notifications of one transaction into one.
wake AS (
    SELECT pg_notify($9, w.lane || E'\t' || w.target)
    FROM (SELECT DISTINCT lane, target FROM upd) w
)
SELECT upd.lane, upd.target, count(*) AS requeued,
       (SELECT count(*) FROM wake) AS woken
FROM upd
GROUP BY upd.lane, upd.target
