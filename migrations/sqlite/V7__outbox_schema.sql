-- outbox-relay SQLite schema migration 7, for the table outbox.
-- Generated from the code, which runs the same statements; do not edit.
-- Run in order, each once: a second run fails on the version it records.
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
