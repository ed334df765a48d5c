-- The walk of the messages' (lane, target) pairs (served.rs): the next lane's first pair.
-- Binds lane.
SELECT lane, target FROM `outbox_messages` FORCE INDEX (pending)
WHERE lane > ? ORDER BY lane, target LIMIT 1
