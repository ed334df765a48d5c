-- The claim's gate: which keys have a running lease. Binds lane, target, the keys, now.
SELECT DISTINCT ordering_key FROM `outbox_messages` FORCE INDEX (by_key)
WHERE lane = ? AND target = ? AND ordering_key IN (?)
    AND status = 'claimed' AND lease_expires_at > ?
