-- outbox-relay SQLite schema migration 5, for the table outbox.
-- Generated from the code, which runs the same statements; do not edit.
-- Run in order, each once: a second run fails on the version it records.
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
