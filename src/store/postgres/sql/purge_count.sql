-- What purge would delete, all batches together (a dry run). $1 now, $2 age in ms,
-- $3 status, $4/$5 lane and target or NULL, $6 keep keyed rows.
SELECT count(*) FROM "public"."outbox_messages"
WHERE status IN ('delivered', 'dead_letter') AND status = $3
  AND updated_at < COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
                   - $2::int8 * interval '1 millisecond'
  AND ($4::text IS NULL OR (lane = $4 AND target = $5))
  AND (NOT $6::bool OR ordering_key IS NULL)
