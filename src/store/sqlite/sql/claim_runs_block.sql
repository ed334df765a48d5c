-- Due pending key heads as claim_ready picks them, each followed by its key run in seq
-- order; the limit counts every row. A row without a key joins nothing and stands alone
-- (r.seq NULL); a keyed head is the first row of its own run range. The order is the
-- heads' index order, then each run's key-index order, so no sort: the statement stops
-- reading heads once the limit is reached, runs included.
-- The run's last seq: the key's next pending rows by seq, at most ?5 - 1 of them, cut
-- before the first that is not due, before the key's next claimed row and, under Block,
-- before its next dead letter.
-- Each term is an index range that stops within the run's length (or one probe), so a hot
-- key's backlog behind the run is never read.
-- Binds: ?1 now, ?2 lane, ?3 target, ?4 limit, ?5 the run's length (at least 2).
-- Ordering policy Block: a dead letter holds its key back.
-- The key rule: head c is held back by another row of its key claimed under a lease that
-- has not lapsed (a requeued dead head must not run beside its successor) and, under Block,
-- by an earlier dead letter. Each is an index probe, on outbox_key_live and
-- outbox_dead_keys; whether c heads its key at all is its key_head mark. SQLite proves the
-- partial index outbox_key_live usable only from a WHERE term that repeats its own, so
-- every probe of it carries status IN ('pending', 'claimed').
SELECT COALESCE(r.seq, c.seq) FROM outbox c
LEFT JOIN outbox r INDEXED BY outbox_key_live
    ON r.lane = c.lane AND r.target = c.target
    AND r.ordering_key = c.ordering_key AND r.status = 'pending'
    AND r.status IN ('pending', 'claimed')
    AND r.seq >= c.seq AND r.seq <= MIN(
            COALESCE((SELECT COALESCE(MIN(CASE WHEN w.available_at > ?1 THEN w.seq END) - 1,
                    MAX(w.seq))
                FROM (SELECT e.seq, e.available_at FROM outbox e INDEXED BY outbox_key_live
                    WHERE e.lane = c.lane AND e.target = c.target
                        AND e.ordering_key = c.ordering_key AND e.status = 'pending'
                        AND e.status IN ('pending', 'claimed')
                        AND e.seq > c.seq ORDER BY e.seq LIMIT ?5 - 1) AS w), c.seq),
            COALESCE((SELECT e.seq FROM outbox e INDEXED BY outbox_key_live
                WHERE e.lane = c.lane AND e.target = c.target
                    AND e.ordering_key = c.ordering_key AND e.status = 'claimed'
                    AND e.status IN ('pending', 'claimed')
                    AND e.seq > c.seq ORDER BY e.seq LIMIT 1) - 1, 9223372036854775807),
            COALESCE((SELECT e.seq FROM outbox e INDEXED BY outbox_dead_keys
                WHERE e.lane = c.lane AND e.target = c.target
                    AND e.ordering_key = c.ordering_key AND e.status = 'dead_letter'
                    AND e.seq > c.seq ORDER BY e.seq LIMIT 1) - 1, 9223372036854775807))
WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
    AND c.key_head = 1 AND c.available_at <= ?1
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
ORDER BY c.available_at, c.seq, r.seq
LIMIT ?4
