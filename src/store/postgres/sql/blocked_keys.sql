-- $1 lane, $2 target, $3 after (seq), $4 limit: the keys a dead letter holds. A key is held
-- when its earliest dead letter comes before its earliest live row.
--
-- The earliest dead letter of each key, read from the dead letters' index alone (its id is
-- read for the page's rows only; the CTE is materialized so the planner does not walk the
-- seq index for the ORDER BY instead, reading the lane's whole history), then each key's
-- head: the earlier of its first pending and its first claimed row, each from its status's
-- key index.
WITH heads AS MATERIALIZED (
    SELECT d.seq, d.ordering_key FROM "public"."outbox_messages" d
    WHERE d.lane = $1 AND d.target = $2 AND d.status = 'dead_letter'
      AND d.ordering_key IS NOT NULL
      AND ($3::int8 IS NULL OR d.seq > $3)
      AND NOT EXISTS (
        SELECT 1 FROM "public"."outbox_messages" e
        WHERE e.lane = d.lane AND e.target = d.target
          AND e.ordering_key = d.ordering_key AND e.status = 'dead_letter'
          AND e.seq < d.seq)
)
SELECT h.seq,
       (SELECT m.outbox_id FROM "public"."outbox_messages" m WHERE m.seq = h.seq) AS dead_id,
       held.outbox_id AS held_id
FROM heads h
CROSS JOIN LATERAL (
    SELECT x.outbox_id, x.seq FROM (
        (SELECT l.outbox_id, l.seq FROM "public"."outbox_messages" l
         WHERE l.lane = $1 AND l.target = $2 AND l.ordering_key = h.ordering_key
           AND l.status = 'pending'
         ORDER BY l.seq LIMIT 1)
        UNION ALL
        (SELECT l.outbox_id, l.seq FROM "public"."outbox_messages" l
         WHERE l.lane = $1 AND l.target = $2 AND l.ordering_key = h.ordering_key
           AND l.status = 'claimed'
         ORDER BY l.seq LIMIT 1)
    ) x
    ORDER BY x.seq LIMIT 1
) held
WHERE held.seq > h.seq
ORDER BY h.seq LIMIT $4
