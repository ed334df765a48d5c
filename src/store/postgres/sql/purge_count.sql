-- What purge would delete, all batches together (a dry run), per lane: rows
-- `(lane, target, n)`. $1 now, $2 age in ms, $3 status, $4 lanes and $5 their targets (both
-- empty for every lane), $6 keep keyed rows.
SELECT lane, target, count(*) AS n FROM "public"."outbox_messages"
WHERE status IN ('delivered', 'dead_letter') AND status = $3
  AND updated_at < COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
                   - $2::int8 * interval '1 millisecond'
  AND (cardinality($4::text[]) = 0
       OR (lane, target) IN (SELECT * FROM unnest($4::text[], $5::text[])))
  AND (NOT $6::bool OR ordering_key IS NULL)
GROUP BY lane, target
