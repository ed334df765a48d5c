-- outbox-relay PostgreSQL schema migration 1: messages table and its indexes.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Creates the tables and their indexes: nothing that exists is locked.
--
-- On a table with rows, build its new indexes first without blocking writes, one
-- statement at a time outside a transaction (a build that fails leaves an INVALID
-- index: DROP INDEX CONCURRENTLY it and build it again); this migration's
-- CREATE INDEX IF NOT EXISTS then finds them built:
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_claimable_idx" ON "public"."outbox_messages" (lane, target, available_at, seq)
--     WHERE status IN ('pending', 'claimed');
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_key_live_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
--     WHERE status IN ('pending', 'claimed') AND ordering_key IS NOT NULL;
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_key_dead_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
--     WHERE status = 'dead_letter' AND ordering_key IS NOT NULL;
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_finished_idx" ON "public"."outbox_messages" (updated_at)
--     WHERE status IN ('delivered', 'dead_letter');
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
CREATE SCHEMA IF NOT EXISTS "public";
CREATE TABLE IF NOT EXISTS "public"."outbox_migrations" (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (1, 'messages table and its indexes');
CREATE TABLE IF NOT EXISTS "public"."outbox_messages" (
    outbox_id        uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The strict total order of messages: claims and lists order by it, never by id.
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    lane             text        NOT NULL,
    target           text        NOT NULL,
    payload          jsonb       NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}',
    ordering_key     text,
    dedupe_key       text,
    status           text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'claimed', 'delivered', 'dead_letter')),
    -- bigint: max_attempts is a u32, past int's range.
    attempt_count    bigint      NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    max_attempts     bigint      NOT NULL CHECK (max_attempts > 0),
    available_at     timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    claim_token      uuid,
    lease_expires_at timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    CHECK ((status = 'claimed') = (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_seq_idx" ON "public"."outbox_messages" (seq);
-- Claims scan only live rows: a long delivered or dead tail costs them nothing.
CREATE INDEX IF NOT EXISTS "outbox_claimable_idx" ON "public"."outbox_messages" (lane, target, available_at, seq)
    WHERE status IN ('pending', 'claimed');
-- Per-key head lookup: is an earlier row of this key still live?
CREATE INDEX IF NOT EXISTS "outbox_key_live_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
    WHERE status IN ('pending', 'claimed') AND ordering_key IS NOT NULL;
-- Under OrderingPolicy::Block a dead-lettered earlier row holds its key.
CREATE INDEX IF NOT EXISTS "outbox_key_dead_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
    WHERE status = 'dead_letter' AND ordering_key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_dedupe_idx" ON "public"."outbox_messages" (lane, target, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
-- Purge finds finished rows by age without reading live ones.
CREATE INDEX IF NOT EXISTS "outbox_finished_idx" ON "public"."outbox_messages" (updated_at)
    WHERE status IN ('delivered', 'dead_letter');
COMMIT;
