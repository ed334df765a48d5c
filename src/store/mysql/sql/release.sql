-- A release: back to pending, due now, the attempt given back; binds now twice, then the
-- sequences.
UPDATE `outbox_messages` SET status = 'pending', available_at = ?,
    attempt_count = IF(attempt_count > 0, attempt_count - 1, 0), claimed_by = NULL,
    claim_token = NULL, lease_expires_at = NULL, updated_at = ?
WHERE seq IN (?)
