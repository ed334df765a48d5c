-- Claims a claim took and holds back, put back as they were: binds now twice, then the
-- ids.
UPDATE `outbox_messages` SET status = 'pending', attempt_count = attempt_count - 1,
    available_at = ?, claimed_by = NULL, claim_token = NULL,
    lease_expires_at = NULL, updated_at = ?
WHERE outbox_id IN (?)
