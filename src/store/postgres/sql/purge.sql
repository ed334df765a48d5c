-- $1 now, $2 age in ms, $3 batch size, $4 status, $5/$6 lane and target or NULL for
-- every lane, $7 keep keyed rows (dead letters of a Block lane, each holding its key).
-- SKIP LOCKED: a row someone is touching is left for the next purge rather than waited for.
DELETE FROM "public"."outbox_messages" WHERE outbox_id IN (
    SELECT outbox_id FROM "public"."outbox_messages"
    WHERE status IN ('delivered', 'dead_letter') AND status = $4
      AND updated_at < COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
                       - $2::int8 * interval '1 millisecond'
      AND ($5::text IS NULL OR (lane = $5 AND target = $6))
      AND (NOT $7::bool OR ordering_key IS NULL)
    LIMIT $3
    FOR UPDATE SKIP LOCKED)
