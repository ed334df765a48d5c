-- Dead-letters rows: binds the error and now, then the sequences. The head mark goes with
-- the claim.
UPDATE `outbox_messages` SET status = 'dead_letter', last_error = ?, claimed_by = NULL,
    claim_token = NULL, lease_expires_at = NULL, key_head = 0, updated_at = ?
WHERE seq IN (?)
