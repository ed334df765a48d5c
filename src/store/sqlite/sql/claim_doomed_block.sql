-- Lapsed claims on their last attempt that head their key, earliest lapse first.
-- Binds: ?1 now, ?2 lane, ?3 target.
-- Ordering policy Block: a dead letter holds its key back.
-- The key rule: head c is held back by another row of its key claimed under a lease that
-- has not lapsed (a requeued dead head must not run beside its successor) and, under Block,
-- by an earlier dead letter. Each is an index probe, on outbox_key_live and
-- outbox_dead_keys; whether c heads its key at all is its key_head mark. SQLite proves the
-- partial index outbox_key_live usable only from a WHERE term that repeats its own, so
-- every probe of it carries status IN ('pending', 'claimed').
SELECT c.seq, c.outbox_id FROM outbox c
WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
    AND c.lease_expires_at <= ?1 AND c.key_head = 1
    AND c.attempt_count >= c.max_attempts
    AND NOT (c.ordering_key IS NOT NULL AND (
        EXISTS (SELECT 1 FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = c.lane AND e.target = c.target
                AND e.ordering_key = c.ordering_key AND e.status = 'claimed'
                AND e.status IN ('pending', 'claimed')
                AND e.seq <> c.seq AND e.lease_expires_at > ?1)
        OR EXISTS (SELECT 1 FROM outbox e INDEXED BY outbox_dead_keys
            WHERE e.lane = c.lane AND e.target = c.target
                AND e.ordering_key = c.ordering_key AND e.status = 'dead_letter'
                AND e.seq < c.seq)))
ORDER BY c.lease_expires_at, c.seq
