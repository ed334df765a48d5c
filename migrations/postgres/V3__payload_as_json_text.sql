-- outbox-relay PostgreSQL schema migration 3: payload as json text: delivered byte for byte.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Rewrites the table (payload from jsonb to json) under an ACCESS EXCLUSIVE lock:
-- nothing reads or writes the outbox until it commits, about as long as a full copy of the
-- table and its indexes. There is no online form: run it in a window without enqueues,
-- with relays stopped, or on a table purged of delivered rows first.
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (3, 'payload as json text: delivered byte for byte');
ALTER TABLE "public"."outbox_messages" ALTER COLUMN payload TYPE json USING payload::text::json;
COMMIT;
