-- outbox-relay SQLite schema migration 3: a key index of live rows.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
--
-- outbox_key_order held every keyed row, delivered ones too: each ack moved an entry
-- inside it and it grew with history. outbox_key_live holds only pending and claimed rows,
-- so an ack removes its entry and the index stays the size of the backlog; the dead-letter
-- probes read outbox_dead_keys instead. The migration-2 triggers name outbox_key_order, so
-- they are re-created over the new index before it is dropped.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (3, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
-- SQLite uses it only where a query repeats status IN ('pending', 'claimed') word for word:
-- every probe below does, and so do the store's.
CREATE INDEX IF NOT EXISTS outbox_key_live
        ON outbox (lane, target, ordering_key, status)
        WHERE ordering_key IS NOT NULL AND status IN ('pending', 'claimed');
DROP TRIGGER IF EXISTS outbox_head_on_insert;
DROP TRIGGER IF EXISTS outbox_head_on_return;
DROP TRIGGER IF EXISTS outbox_head_on_leave;
DROP TRIGGER IF EXISTS outbox_head_on_delete;
-- The migration-2 triggers, word for word but for their probes.
CREATE TRIGGER outbox_head_on_insert AFTER INSERT ON outbox
    BEGIN
        UPDATE outbox SET key_head = 1 WHERE seq = new.seq AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
    END;
CREATE TRIGGER outbox_head_on_return AFTER UPDATE OF status ON outbox
        WHEN old.status NOT IN ('pending', 'claimed') AND new.status IN ('pending', 'claimed')
    BEGIN
        UPDATE outbox SET key_head = NULL
            WHERE new.ordering_key IS NOT NULL AND key_head = 1
                AND seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'pending'
            AND e.status IN ('pending', 'claimed') AND e.seq > new.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'claimed'
            AND e.status IN ('pending', 'claimed') AND e.seq > new.seq ORDER BY e.seq LIMIT 1))) AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
        UPDATE outbox SET key_head = 1 WHERE seq = new.seq AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
    END;
CREATE TRIGGER outbox_head_on_leave AFTER UPDATE OF status ON outbox
        WHEN old.key_head = 1 AND new.status NOT IN ('pending', 'claimed')
    BEGIN
        UPDATE outbox SET key_head = NULL WHERE seq = new.seq;
        UPDATE outbox SET key_head = 1
            WHERE new.ordering_key IS NOT NULL AND seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'pending'
            AND e.status IN ('pending', 'claimed') AND e.seq > new.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'claimed'
            AND e.status IN ('pending', 'claimed') AND e.seq > new.seq ORDER BY e.seq LIMIT 1)));
    END;
CREATE TRIGGER outbox_head_on_delete AFTER DELETE ON outbox
        WHEN old.key_head = 1 AND old.ordering_key IS NOT NULL
    BEGIN
        UPDATE outbox SET key_head = 1 WHERE seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = old.lane AND e.target = old.target
            AND e.ordering_key = old.ordering_key AND e.status = 'pending'
            AND e.status IN ('pending', 'claimed') AND e.seq > old.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_live
            WHERE e.lane = old.lane AND e.target = old.target
            AND e.ordering_key = old.ordering_key AND e.status = 'claimed'
            AND e.status IN ('pending', 'claimed') AND e.seq > old.seq ORDER BY e.seq LIMIT 1)));
    END;
DROP INDEX IF EXISTS outbox_key_order;
COMMIT;
