-- outbox-relay SQLite schema migration 7: served lanes.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
--
-- Until when a running relay serves each (lane, target), in milliseconds since the epoch
-- on the store's clock.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (7, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
CREATE TABLE IF NOT EXISTS outbox_served_lanes (
            lane TEXT NOT NULL,
            target TEXT NOT NULL,
            served_until INTEGER NOT NULL,
            PRIMARY KEY (lane, target)
        ) STRICT;
COMMIT;
