-- outbox-relay SQLite schema migration 1: the outbox table and its indexes.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (1, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
-- seq is the strict total order of enqueues. AUTOINCREMENT keeps a purged tail's numbers
-- from being reused, so list cursors and per-key order never go backwards. STRICT makes
-- SQLite refuse a value of the wrong type instead of storing it.
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
-- Claimable rows only, so a long delivered or dead tail never slows a claim. SQLite uses a
-- partial index only when the query repeats its WHERE term word for word.
CREATE INDEX IF NOT EXISTS outbox_claimable
            ON outbox (lane, target, status, available_at) WHERE status IN ('pending', 'claimed');
-- The per-key head rule asks "is an earlier row of this key pending, claimed or dead?": one
-- range probe per status here (the rowid, seq, ends every entry).
CREATE INDEX IF NOT EXISTS outbox_key_order
            ON outbox (lane, target, ordering_key, status) WHERE ordering_key IS NOT NULL;
-- Purge finds finished rows by age without walking live ones.
CREATE INDEX IF NOT EXISTS outbox_finished
            ON outbox (updated_at) WHERE status IN ('delivered', 'dead_letter');
COMMIT;
