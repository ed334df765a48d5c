-- $1 now, $2 age in ms, $3 batch size, $4 status, $5 lanes and $6 their targets (pairs by
-- position; both empty for every lane), $7 keep keyed rows (dead letters of a Block lane,
-- each holding its key). Rows `(lane, target, n)`: how many each lane lost.
-- The batch is read from purge's index (updated_at), oldest first, the lanes a filter on
-- it: one statement serves any number of lanes, and reads the old finished rows, not a
-- lane's whole history. `ORDER BY updated_at` keeps the generic plan on that index, and
-- `= ANY (ARRAY(..))` deletes the batch by its ids (a plain `IN` let the generic plan hash
-- the batch against a scan of the whole table).
-- SKIP LOCKED: a row someone is touching is left for the next purge rather than waited for.
WITH gone AS (
    DELETE FROM "public"."outbox_messages" WHERE outbox_id = ANY (ARRAY(
        SELECT outbox_id FROM "public"."outbox_messages"
        WHERE status IN ('delivered', 'dead_letter') AND status = $4
          AND updated_at < COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
                           - $2::int8 * interval '1 millisecond'
          AND (cardinality($5::text[]) = 0
               OR (lane, target) IN (SELECT * FROM unnest($5::text[], $6::text[])))
          AND (NOT $7::bool OR ordering_key IS NULL)
        ORDER BY updated_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED))
    RETURNING lane, target)
SELECT lane, target, count(*) AS n FROM gone GROUP BY lane, target
