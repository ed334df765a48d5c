-- The lanes of one target holding pending messages whose name begins with a prefix (lane
-- patterns, served.rs): binds the prefix as a LIKE pattern (`!` escapes), the target, the
-- most lanes; in name order. Lanes are bytes, so the lanes a prefix begins are one range of
-- `pending`, walked as a loose index scan: per lane one dive to its next lane and one to its
-- (target, 'pending') rows, stopping at the first; no message row, delivered or pending, is
-- read.
SELECT lane FROM `outbox_messages` FORCE INDEX (pending)
WHERE lane LIKE ? ESCAPE '!' AND target = ? AND status = 'pending'
GROUP BY lane ORDER BY lane LIMIT ?
