-- The pending messages of a (lane, target), counted up to a cap: binds lane, target, cap.
SELECT COUNT(*) FROM (
    SELECT 1 FROM `outbox_messages` FORCE INDEX (pending)
    WHERE lane = ? AND target = ? AND status = 'pending' LIMIT ?
) AS counted
