-- The CTE `pairs`: the (lane, target) pairs holding pending messages, by a skip scan of
-- `pending_idx` (`unserved.sql` says how).
WITH RECURSIVE pairs (lane, target) AS (
    (SELECT lane, target FROM "public"."outbox_messages"
     WHERE status = 'pending' AND created_at IS NOT NULL ORDER BY lane, target LIMIT 1)
    UNION ALL
    SELECT next.lane, next.target
    FROM pairs, LATERAL (
        SELECT m.lane, m.target FROM "public"."outbox_messages" AS m
        WHERE m.status = 'pending' AND m.created_at IS NOT NULL
          AND (m.lane, m.target) > (pairs.lane, pairs.target)
        ORDER BY m.lane, m.target LIMIT 1
    ) AS next
)
