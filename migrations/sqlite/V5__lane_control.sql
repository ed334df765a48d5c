-- outbox-relay SQLite schema migration 5: lane control.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
--
-- Fleet-wide lane control: one row per paused (lane, target), with who paused it, why and
-- when (milliseconds since the epoch, the store's clock).
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (5, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
CREATE TABLE IF NOT EXISTS outbox_lane_control (
            lane TEXT NOT NULL,
            target TEXT NOT NULL,
            paused_by TEXT NOT NULL,
            reason TEXT,
            paused_at INTEGER NOT NULL,
            PRIMARY KEY (lane, target)
        ) STRICT;
COMMIT;
