-- outbox-relay PostgreSQL schema migration 9: served lanes: which lanes a running relay serves, for the lanes nobody serves.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Creates one table: nothing is locked.
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (9, 'served lanes: which lanes a running relay serves, for the lanes nobody serves');
CREATE TABLE IF NOT EXISTS "public"."outbox_served_lanes" (
    lane          text COLLATE "C" NOT NULL,
    target        text COLLATE "C" NOT NULL,
    served_until  timestamptz NOT NULL,
    PRIMARY KEY (lane, target)
);
COMMIT;
