-- outbox-relay SQLite schema migration 6, for the table outbox.
-- Generated from the code, which runs the same statements; do not edit.
-- Run in order, each once: a second run fails on the version it records.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (6, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
CREATE INDEX IF NOT EXISTS outbox_list ON outbox (lane, target, status) WHERE seq > 0;
CREATE INDEX IF NOT EXISTS outbox_list_key
        ON outbox (lane, target, ordering_key, status)
        WHERE seq > 0 AND ordering_key IS NOT NULL;
COMMIT;
