-- outbox-relay PostgreSQL schema migration 8: listing indexes: every page of a lane reads an index in enqueue order.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Builds list_idx and list_key_idx, each under a SHARE lock (enqueues, claims
-- and acks wait for the builds, reads do not; each build reads the table once). Both can
-- be built ahead of it without blocking writes, as shown below.
--
-- On a table with rows, build its new indexes first without blocking writes, one
-- statement at a time outside a transaction (a build that fails leaves an INVALID
-- index: DROP INDEX CONCURRENTLY it and build it again); this migration's
-- CREATE INDEX IF NOT EXISTS then finds them built:
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_list_idx" ON "public"."outbox_messages" (lane, target, status, seq)
--     WHERE seq > 0;
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_list_key_idx" ON "public"."outbox_messages" (lane, target, ordering_key, status, seq)
--     WHERE seq > 0 AND ordering_key IS NOT NULL;
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (8, 'listing indexes: every page of a lane reads an index in enqueue order');
-- A lane's messages of each status in enqueue order: a page of one status is one range,
-- a page of every status the ranges merged in seq order. Its predicate holds for every
-- row (seq counts from 1) and is stated only by the listing, so no statement of the relay
-- (a claim, a key probe) can pick this index instead of the narrow ones it was planned on.
CREATE INDEX IF NOT EXISTS "outbox_list_idx" ON "public"."outbox_messages" (lane, target, status, seq)
    WHERE seq > 0;
-- A key's messages of each status in enqueue order: the listing by ordering key, a range
-- per status like list_idx's, with the same predicate for the same reason. A row without
-- a key has no entry.
CREATE INDEX IF NOT EXISTS "outbox_list_key_idx" ON "public"."outbox_messages" (lane, target, ordering_key, status, seq)
    WHERE seq > 0 AND ordering_key IS NOT NULL;
COMMIT;
