-- The walk of the messages' (lane, target) pairs (served.rs): the first.
SELECT lane, target FROM `outbox_messages` FORCE INDEX (pending) ORDER BY lane, target LIMIT 1
