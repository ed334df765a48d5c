-- One message. Binds: ?1 outbox_id, ?2 lane, ?3 target, ?4 payload, ?5 headers,
-- ?6 ordering_key, ?7 dedupe_key, ?8 max_attempts, ?9 available_at, ?10 now.
INSERT INTO outbox (outbox_id, lane, target, payload, headers,
        ordering_key, dedupe_key, status, attempt_count, max_attempts,
        available_at, created_at, updated_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, ?8, ?9, ?10, ?10)
    RETURNING seq
