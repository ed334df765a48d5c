-- The stats of many (lane, target) at once (admin.rs): a relay samples all its lanes with
-- this one statement. Binds now, then the lanes as one JSON array of [lane, target] pairs,
-- read by JSON_TABLE (MariaDB 10.6+, MySQL 8.0+); a lane asked for answers one row, even
-- without messages.
--
-- Every figure is a dependent subquery over an index under the asked lane, never a scan of
-- the table: each count reads its status's range of `pending` (lane, target, status lead
-- it) and the oldest due message that range up to now; the blocked keys are read from the
-- lane's live keys, one dive into `by_key` each (a dead letter before the key's head).
SELECT q.lane, q.target,
    (SELECT COUNT(*) FROM `outbox_messages` m FORCE INDEX (pending)
     WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'pending') AS pending,
    (SELECT COUNT(*) FROM `outbox_messages` m FORCE INDEX (pending)
     WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'claimed') AS claimed,
    (SELECT COUNT(*) FROM `outbox_messages` m FORCE INDEX (pending)
     WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'delivered') AS delivered,
    (SELECT COUNT(*) FROM `outbox_messages` m FORCE INDEX (pending)
     WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'dead_letter') AS dead_letter,
    (SELECT MIN(m.created_at) FROM `outbox_messages` m FORCE INDEX (pending)
     WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'pending'
         AND m.available_at <= ?) AS oldest_created_at,
    (SELECT COUNT(*) FROM `outbox_keys` h
     WHERE h.lane = q.lane AND h.target = q.target AND h.head_seq IS NOT NULL
         AND EXISTS (SELECT 1 FROM `outbox_messages` d FORCE INDEX (by_key)
             WHERE d.lane = h.lane AND d.target = h.target AND d.ordering_key = h.ordering_key
                 AND d.status = 'dead_letter' AND d.seq < h.head_seq)) AS blocked_keys
FROM JSON_TABLE(?, '$[*]' COLUMNS (
    lane VARBINARY(255) PATH '$[0]',
    target VARBINARY(255) PATH '$[1]'
)) AS q
