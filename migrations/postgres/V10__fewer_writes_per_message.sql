-- outbox-relay PostgreSQL schema migration 10: fewer writes per message: no delivered_idx, no commit check behind a row of the same batch.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Adds key_in_batch, a catalog change; makes the check_head trigger again with a
-- WHEN that skips such rows; drops delivered_idx (brief ACCESS EXCLUSIVE locks, nothing is
-- read or rewritten).
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (10, 'fewer writes per message: no delivered_idx, no commit check behind a row of the same batch');
-- True for a keyed row written behind an earlier row of its key by the same INSERT: that
-- row is live when the transaction commits, so this one is not its key's head, and the
-- deferred check_head has nothing to look at.
ALTER TABLE "public"."outbox_messages" ADD COLUMN IF NOT EXISTS key_in_batch boolean NOT NULL DEFAULT false;
DROP TRIGGER IF EXISTS "outbox_check_head" ON "public"."outbox_messages";
CREATE CONSTRAINT TRIGGER "outbox_check_head" AFTER INSERT ON "public"."outbox_messages"
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.ordering_key IS NOT NULL AND NOT NEW.key_head AND NOT NEW.key_in_batch)
    EXECUTE FUNCTION "public"."outbox_check_head"();
-- The delivered count reads list_idx's delivered range instead: every ack wrote an entry
-- here beside the one it writes into list_idx.
DROP INDEX IF EXISTS "public"."outbox_delivered_idx";
COMMIT;
