-- outbox-relay PostgreSQL schema migration 5: key columns in the C collation: index comparisons are memcmp.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Changes five columns' collation to "C" under an ACCESS EXCLUSIVE lock: the
-- rows stay as they are, every index over those columns is rebuilt, and nothing reads or
-- writes the outbox until it commits. There is no online form: run it in a window without
-- enqueues, with relays stopped.
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (5, 'key columns in the C collation: index comparisons are memcmp');
DROP TRIGGER IF EXISTS "outbox_check_head" ON "public"."outbox_messages";
ALTER TABLE "public"."outbox_messages" ALTER COLUMN lane TYPE text COLLATE "C",
    ALTER COLUMN target TYPE text COLLATE "C",
    ALTER COLUMN ordering_key TYPE text COLLATE "C",
    ALTER COLUMN dedupe_key TYPE text COLLATE "C",
    ALTER COLUMN status TYPE text COLLATE "C";
CREATE CONSTRAINT TRIGGER "outbox_check_head" AFTER INSERT ON "public"."outbox_messages"
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.ordering_key IS NOT NULL AND NOT NEW.key_head)
    EXECUTE FUNCTION "public"."outbox_check_head"();
COMMIT;
