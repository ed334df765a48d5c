-- The rows a fenced write names, locked: binds the ids.
SELECT seq, outbox_id, lane, target, ordering_key, status, claim_token, key_head,
    attempt_count, max_attempts
FROM `outbox_messages` WHERE outbox_id IN (?) ORDER BY seq FOR UPDATE
