-- outbox-relay SQLite schema migration 2: key heads and counts.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
--
-- Claims that cost what they return, whatever the backlog. key_head marks the first live
-- (pending or claimed) row of each ordering key, and every row without a key while live;
-- triggers keep it true on every write, whoever makes it. The claim reads the partial
-- indexes outbox_ready and outbox_leases in order and stops at its limit: a key's later rows
-- are in neither, so a hot key costs a claim one entry. outbox_counts keeps the rows per
-- (lane, target, status), so stats read a few rows, not the lane.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (2, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
ALTER TABLE outbox ADD COLUMN key_head INTEGER;
-- Backfill: one probe per live row (an earlier live row of its key?).
UPDATE outbox SET key_head = 1
        WHERE status IN ('pending', 'claimed') AND (ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = outbox.lane AND e.target = outbox.target
                AND e.ordering_key = outbox.ordering_key
                AND e.status IN ('pending', 'claimed') AND e.seq < outbox.seq));
-- Due pending heads, in claim order (the rowid, seq, ends every entry).
CREATE INDEX IF NOT EXISTS outbox_ready
        ON outbox (lane, target, available_at) WHERE status = 'pending' AND key_head = 1;
-- Claims by lapse: lapsed ones first in a claim, the next lapse for next_due.
CREATE INDEX IF NOT EXISTS outbox_leases
        ON outbox (lane, target, lease_expires_at) WHERE status = 'claimed';
-- Pending rows in enqueue order: the oldest due one for stats.
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (lane, target) WHERE status = 'pending';
-- Keys with dead letters: the blocked keys for stats.
CREATE INDEX IF NOT EXISTS outbox_dead_keys
        ON outbox (lane, target, ordering_key)
        WHERE status = 'dead_letter' AND ordering_key IS NOT NULL;
-- The claim no longer reads it; one index fewer to write.
DROP INDEX IF EXISTS outbox_claimable;
-- A row becomes its key's head if no live row of the key came before it. Inserts and
-- requeues (a dead letter back to pending) both arrive here. The first live row of a key
-- after a row is two index probes, one per live status (a MIN over status IN (...) would
-- read the key's whole queue).
CREATE TRIGGER IF NOT EXISTS outbox_head_on_insert AFTER INSERT ON outbox
    BEGIN
        UPDATE outbox SET key_head = 1 WHERE seq = new.seq AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
    END;
CREATE TRIGGER IF NOT EXISTS outbox_head_on_return AFTER UPDATE OF status ON outbox
        WHEN old.status NOT IN ('pending', 'claimed') AND new.status IN ('pending', 'claimed')
    BEGIN
        UPDATE outbox SET key_head = NULL
            WHERE new.ordering_key IS NOT NULL AND key_head = 1
                AND seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'pending'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'claimed'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1))) AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
        UPDATE outbox SET key_head = 1 WHERE seq = new.seq AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
    END;
-- A head that leaves (delivered, dead) hands the mark to its key's next live row.
CREATE TRIGGER IF NOT EXISTS outbox_head_on_leave AFTER UPDATE OF status ON outbox
        WHEN old.key_head = 1 AND new.status NOT IN ('pending', 'claimed')
    BEGIN
        UPDATE outbox SET key_head = NULL WHERE seq = new.seq;
        UPDATE outbox SET key_head = 1
            WHERE new.ordering_key IS NOT NULL AND seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'pending'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'claimed'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1)));
    END;
CREATE TRIGGER IF NOT EXISTS outbox_head_on_delete AFTER DELETE ON outbox
        WHEN old.key_head = 1 AND old.ordering_key IS NOT NULL
    BEGIN
        UPDATE outbox SET key_head = 1 WHERE seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = old.lane AND e.target = old.target
            AND e.ordering_key = old.ordering_key AND e.status = 'pending'
            AND e.seq > old.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = old.lane AND e.target = old.target
            AND e.ordering_key = old.ordering_key AND e.status = 'claimed'
            AND e.seq > old.seq ORDER BY e.seq LIMIT 1)));
    END;
-- Counts per (lane, target, status), so stats read a few rows, not the lane.
CREATE TABLE IF NOT EXISTS outbox_counts (
        lane TEXT NOT NULL,
        target TEXT NOT NULL,
        status TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (lane, target, status)
    ) WITHOUT ROWID, STRICT;
INSERT INTO outbox_counts (lane, target, status, n)
        SELECT lane, target, status, COUNT(*) FROM outbox WHERE true GROUP BY lane, target, status
        ON CONFLICT (lane, target, status) DO UPDATE SET n = excluded.n;
CREATE TRIGGER IF NOT EXISTS outbox_count_insert AFTER INSERT ON outbox
    BEGIN
        INSERT INTO outbox_counts (lane, target, status, n) VALUES (new.lane, new.target, new.status, 1)
            ON CONFLICT (lane, target, status) DO UPDATE SET n = n + 1;
    END;
CREATE TRIGGER IF NOT EXISTS outbox_count_status AFTER UPDATE OF status ON outbox
        WHEN old.status <> new.status
    BEGIN
        UPDATE outbox_counts SET n = n - 1
            WHERE lane = old.lane AND target = old.target AND status = old.status;
        INSERT INTO outbox_counts (lane, target, status, n) VALUES (new.lane, new.target, new.status, 1)
            ON CONFLICT (lane, target, status) DO UPDATE SET n = n + 1;
    END;
CREATE TRIGGER IF NOT EXISTS outbox_count_delete AFTER DELETE ON outbox
    BEGIN
        UPDATE outbox_counts SET n = n - 1
            WHERE lane = old.lane AND target = old.target AND status = old.status;
    END;
COMMIT;
