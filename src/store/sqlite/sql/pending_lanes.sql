-- The (lane, target) pairs holding pending messages, in name order: a skip scan of the
-- outbox_pending index, one probe per pair, never their messages (as `unserved.sql`). The
-- relay keeps those its lane patterns match (`served.rs`).
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
SELECT lane, target FROM pairs ORDER BY lane, target
