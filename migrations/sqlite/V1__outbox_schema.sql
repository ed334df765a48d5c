-- outbox-relay SQLite schema migration 1, for the table outbox.
-- Generated from the code, which runs the same statements; do not edit.
-- Run in order, each once: a second run fails on the version it records.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (1, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
CREATE TABLE IF NOT EXISTS outbox (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            outbox_id TEXT NOT NULL UNIQUE,
            lane TEXT NOT NULL,
            target TEXT NOT NULL,
            payload TEXT NOT NULL,
            headers TEXT NOT NULL,
            ordering_key TEXT,
            dedupe_key TEXT,
            status TEXT NOT NULL
                CHECK (status IN ('pending', 'claimed', 'delivered', 'dead_letter')),
            attempt_count INTEGER NOT NULL,
            max_attempts INTEGER NOT NULL,
            available_at INTEGER NOT NULL,
            claimed_by TEXT,
            claim_token TEXT,
            lease_expires_at INTEGER,
            last_error TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            delivered_at INTEGER
        ) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS outbox_dedupe
            ON outbox (lane, target, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS outbox_claimable
            ON outbox (lane, target, status, available_at) WHERE status IN ('pending', 'claimed');
CREATE INDEX IF NOT EXISTS outbox_key_order
            ON outbox (lane, target, ordering_key, status) WHERE ordering_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS outbox_finished
            ON outbox (updated_at) WHERE status IN ('delivered', 'dead_letter');
COMMIT;
