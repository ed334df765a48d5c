-- The earliest of: the next lapse, a lapsed head, the first pending head. A running lease
-- always counts (its lapse frees the row or its key); a row its key holds back does not (its
-- key's head is counted instead). Each branch reads its index in order and stops at the
-- first row that counts.
-- Binds: ?1 now, ?2 lane, ?3 target.
-- Ordering policy Skip: a dead letter holds nothing back.
-- The key rule: head c is held back by another row of its key claimed under a lease that
-- has not lapsed (a requeued dead head must not run beside its successor). Each is an index
-- probe, on outbox_key_live; whether c heads its key at all is its key_head mark. SQLite
-- proves the partial index outbox_key_live usable only from a WHERE term that repeats its
-- own, so every probe of it carries status IN ('pending', 'claimed').
SELECT MIN(due) FROM (
    SELECT (SELECT c.lease_expires_at FROM outbox c
        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
            AND c.lease_expires_at > ?1
        ORDER BY c.lease_expires_at LIMIT 1) AS due
    UNION ALL
    SELECT (SELECT c.lease_expires_at FROM outbox c
        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
            AND c.lease_expires_at <= ?1 AND c.key_head = 1
            AND NOT (c.ordering_key IS NOT NULL AND (
                EXISTS (SELECT 1 FROM outbox e INDEXED BY outbox_key_live
                    WHERE e.lane = c.lane AND e.target = c.target
                        AND e.ordering_key = c.ordering_key AND e.status = 'claimed'
                        AND e.status IN ('pending', 'claimed')
                        AND e.seq <> c.seq AND e.lease_expires_at > ?1)))
        ORDER BY c.lease_expires_at, c.seq LIMIT 1)
    UNION ALL
    SELECT (SELECT c.available_at FROM outbox c
        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
            AND c.key_head = 1
            AND NOT (c.ordering_key IS NOT NULL AND (
                EXISTS (SELECT 1 FROM outbox e INDEXED BY outbox_key_live
                    WHERE e.lane = c.lane AND e.target = c.target
                        AND e.ordering_key = c.ordering_key AND e.status = 'claimed'
                        AND e.status IN ('pending', 'claimed')
                        AND e.seq <> c.seq AND e.lease_expires_at > ?1)))
        ORDER BY c.available_at, c.seq LIMIT 1))
