-- The walk of the messages' (lane, target) pairs (served.rs): the lane's next target. Binds
-- lane, target.
SELECT lane, target FROM `outbox_messages` FORCE INDEX (pending)
WHERE lane = ? AND target > ? ORDER BY target LIMIT 1
