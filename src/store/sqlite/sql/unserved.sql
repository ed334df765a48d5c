-- The (lane, target) pairs holding pending messages that no running relay serves, with
-- their pending messages counted up to ?3. A skip scan of the outbox_pending index: one
-- probe per pair holding pending messages, and only the unserved pairs' messages counted.
-- Binds: ?1 now, ?2 limit, ?3 the count's cap.
WITH RECURSIVE pairs (lane, target) AS (
    SELECT lane, target FROM (
        SELECT lane, target FROM outbox WHERE status = 'pending'
        ORDER BY lane, target LIMIT 1)
    UNION ALL
    SELECT n.lane, n.target FROM pairs AS p
    JOIN outbox AS n ON n.seq = (
        SELECT m.seq FROM outbox AS m
        WHERE m.status = 'pending' AND (m.lane, m.target) > (p.lane, p.target)
        ORDER BY m.lane, m.target LIMIT 1)
)
SELECT p.lane, p.target,
    (SELECT count(*) FROM (
        SELECT 1 FROM outbox AS m
        WHERE m.status = 'pending' AND m.lane = p.lane AND m.target = p.target
        LIMIT ?3)) AS pending
FROM pairs AS p
WHERE NOT EXISTS (
    SELECT 1 FROM outbox_served_lanes AS s
    WHERE s.lane = p.lane AND s.target = p.target AND s.served_until > ?1)
ORDER BY p.lane, p.target
LIMIT ?2
