-- An ack: binds now twice, then the sequences. The head mark goes with the claim.
UPDATE `outbox_messages` SET status = 'delivered', delivered_at = ?, updated_at = ?,
    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL, key_head = 0
WHERE seq IN (?)
