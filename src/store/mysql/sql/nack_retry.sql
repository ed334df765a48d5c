-- A nack that retries: binds the next due time, the error, now and the sequence.
UPDATE `outbox_messages` SET status = 'pending', available_at = ?, last_error = ?,
    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL, updated_at = ?
WHERE seq = ?
