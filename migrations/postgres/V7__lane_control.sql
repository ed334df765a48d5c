-- outbox-relay PostgreSQL schema migration 7: lane control: fleet-wide pauses with who, when and why.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Creates one table: nothing is locked.
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (7, 'lane control: fleet-wide pauses with who, when and why');
CREATE TABLE IF NOT EXISTS "public"."outbox_lane_control" (
    lane       text COLLATE "C" NOT NULL,
    target     text COLLATE "C" NOT NULL,
    paused_by  text NOT NULL,
    reason     text,
    paused_at  timestamptz NOT NULL,
    PRIMARY KEY (lane, target)
);
COMMIT;
