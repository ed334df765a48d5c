-- $1 now, $2 the most pairs, $3 the most messages counted per pair: the (lane, target)
-- pairs holding pending messages that no relay serves.
--
-- The pairs holding pending messages are found by a skip scan of `pending_idx`, one index
-- probe per pair (a recursive CTE: PostgreSQL has no loose index scan of its own), its
-- predicate (`status = 'pending' AND created_at IS NOT NULL`) repeated word for word so the
-- planner may read it; a pair some relay serves is one primary-key probe of the served
-- table (`OFFSET 0` keeps the `NOT EXISTS` a probe, not a hash of the table); only an
-- unserved pair's messages are counted, at most $3, in the index's order (which keeps the
-- count on the index: without an order, a count of up to $3 rows reads the table whole
-- before ANALYZE). `tests/postgres/plans.rs` pins its plan at 1,000,000 rows.
{{pairs}}
SELECT p.lane, p.target,
       (SELECT count(*) FROM (
           SELECT 1 FROM "public"."outbox_messages" AS m
           WHERE m.status = 'pending' AND m.created_at IS NOT NULL
             AND m.lane = p.lane AND m.target = p.target
           ORDER BY m.created_at LIMIT $3
        ) AS counted) AS pending
FROM pairs AS p
WHERE NOT EXISTS (
    SELECT 1 FROM "public"."outbox_served_lanes" AS s
    WHERE s.lane = p.lane AND s.target = p.target
      AND s.served_until > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
    OFFSET 0
)
ORDER BY p.lane, p.target
LIMIT $2
