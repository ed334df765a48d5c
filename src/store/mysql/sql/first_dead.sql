-- The claim's gate under Block: each key's first dead letter. Binds lane, target, the keys.
SELECT ordering_key, MIN(seq) AS first FROM `outbox_messages` FORCE INDEX (by_key)
WHERE lane = ? AND target = ? AND ordering_key IN (?) AND status = 'dead_letter'
GROUP BY ordering_key
