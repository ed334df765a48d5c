-- outbox-relay SQLite schema migration 8: listing indexes a status change leaves alone.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
--
-- Migration 6's listing indexes ended in status, so every claim and every ack moved an
-- entry in both: with them left out, no-op drains ran 1.06-1.62x as fast and keyed fills
-- 1.1-1.5x. These hold no status, so only an enqueue or a delete writes them. A listing
-- reads the lane's range (or the key's) in enqueue order, the rowid, seq, ending every
-- entry, and checks the status on the rows it reads, within the budget a scanning filter
-- has. The statuses a page would step over a lane for read an index of their own instead,
-- exact: pending rows outbox_pending (migration 2), dead letters outbox_list_dead (written
-- only when a row dead-letters, is requeued or purged), a key's live rows outbox_key_live
-- and its dead letters outbox_dead_keys. On a lane of 1 M rows, 0.5 % dead letters, a page
-- of 50 dead letters read 0.5 ms from outbox_list_dead; the bounded scan read 1.3 ms for
-- about 3 of them (a full page: 20 calls), and an unbounded scan for a status the lane's
-- second half lacks 400 ms. The predicate seq > 0 holds for every row (AUTOINCREMENT counts
-- from 1): SQLite uses a partial index only where a query repeats its terms, and only the
-- listing states it, so no claim or key probe of the relay is planned on these instead of
-- the narrow indexes it was built for. Each build reads the table once under the write
-- lock: enqueues wait for it.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (8, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
DROP INDEX IF EXISTS outbox_list;
DROP INDEX IF EXISTS outbox_list_key;
CREATE INDEX IF NOT EXISTS outbox_list ON outbox (lane, target) WHERE seq > 0;
CREATE INDEX IF NOT EXISTS outbox_list_key
        ON outbox (lane, target, ordering_key) WHERE seq > 0 AND ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS outbox_list_dead ON outbox (lane, target) WHERE status = 'dead_letter';
COMMIT;
