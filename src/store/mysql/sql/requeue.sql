-- A requeue of dead letters: pending, due now, no attempt made; binds now twice, then the
-- sequences. The heads are set afterwards (heads.rs).
UPDATE `outbox_messages` SET status = 'pending', attempt_count = 0, available_at = ?,
    updated_at = ?, key_head = 0
WHERE seq IN (?)
