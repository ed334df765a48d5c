-- Messages by dedupe slot. Binds: ?1 lane, ?2 target, ?3 dedupe_key.
SELECT seq, outbox_id, lane, target, payload, headers, ordering_key, dedupe_key,
    status, attempt_count, max_attempts, available_at, claimed_by, claim_token,
    lease_expires_at, last_error, created_at, updated_at, delivered_at FROM outbox
    WHERE lane = ?1 AND target = ?2 AND dedupe_key = ?3
