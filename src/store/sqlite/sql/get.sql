-- One message by id. Binds: ?1 outbox_id.
SELECT seq, outbox_id, lane, target, payload, headers, ordering_key, dedupe_key,
    status, attempt_count, max_attempts, available_at, claimed_by, claim_token,
    lease_expires_at, last_error, created_at, updated_at, delivered_at
FROM outbox WHERE outbox_id = ?1
