-- outbox-relay PostgreSQL schema migration 5: key columns in the C collation: index comparisons are memcmp.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours); the relay's `migrate` runs the same file, with its configured timeouts.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Changes five columns' collation to "C" under an ACCESS EXCLUSIVE lock: the
-- rows stay as they are, every index over those columns is rebuilt, and nothing reads or
-- writes the outbox until it commits. There is no online form: run it in a window without
-- enqueues, with relays stopped.
--
-- Why: the columns every index compares, in the "C" collation.
--
-- Every index of the relay's statements starts with `lane` and `target`, and the key
-- indexes go on with `ordering_key`, so every descent compares text. In the database's
-- default collation PostgreSQL compares text with the C library's `strcoll` (after copying
-- both strings to terminate them) unless that collation is literally "C" or "POSIX":
-- `C.UTF-8` and `en_US.UTF-8` both take the slow way. The relay only ever asks whether two
-- keys are equal, never how they sort, and equality in any deterministic collation is
-- byte equality, so "C" changes no answer; it only makes the comparison a `memcmp`.
--
-- Measured with callgrind on PostgreSQL 15 (a `C.UTF-8` database, 100 calls of the cycle
-- function claiming 64 rows over 1,000 keys; `examples/benchmark/HISTORY.md`, "A keyed
-- cycle counted in instructions"): text comparison (`bttextcmp`) was 5.7 % of a keyed cycle's
-- instructions and 2 % of a keyless one's; this migration took 1.8 % off the keyed cycle
-- and 1.2 % off the keyless one (`strcoll` is cheap in `C.UTF-8`: a database in a
-- language's collation, such as `en_US.UTF-8`, should gain more; not measured).
--
-- A query's comparison of such a column with a parameter or a literal takes the column's
-- collation (the column's is implicit, theirs the default), so every statement, and
-- every index predicate and key probe, keeps matching its index without a `COLLATE` of
-- its own. The collation changes no row: PostgreSQL rebuilds the indexes, not the table.
-- The `check_head` trigger names `ordering_key` in its `WHEN`, which PostgreSQL will not
-- let a column change under, so it is dropped and made again, as migration 2 made it.
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
