-- outbox-relay SQLite schema migration 6: listing indexes.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
--
-- The indexes the listing reads, so a page of a lane costs the page and not the lane,
-- whatever its status mix: the rowid, seq, ends every entry, so each (lane, target, status)
-- and each (lane, target, key, status) is a range in enqueue order, and a page of every
-- status merges the ranges. Their predicate seq > 0 holds for every row (AUTOINCREMENT
-- counts from 1); SQLite uses a partial index only where a query repeats its terms, and only
-- the listing states it, so no claim or key probe of the relay is planned on these instead
-- of the narrow indexes it was built for. Each build reads the table once under the write
-- lock: enqueues wait for it.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (6, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
CREATE INDEX IF NOT EXISTS outbox_list ON outbox (lane, target, status) WHERE seq > 0;
CREATE INDEX IF NOT EXISTS outbox_list_key
        ON outbox (lane, target, ordering_key, status)
        WHERE seq > 0 AND ordering_key IS NOT NULL;
COMMIT;
