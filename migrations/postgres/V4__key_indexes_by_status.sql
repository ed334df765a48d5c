-- outbox-relay PostgreSQL schema migration 4: key indexes by status: a claimed keyed row gets one key index entry.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Builds key_pending_idx, and rebuilds key_claimed_idx, pending_idx and lease_idx
-- under their names, each under a SHARE lock (enqueues, claims and acks wait for the
-- builds, reads do not; each build reads the table once). Only key_pending_idx can be
-- built ahead of it; for the others, run it when enqueues can wait that long.
--
-- On a table with rows, build its new indexes first without blocking writes, one
-- statement at a time outside a transaction (a build that fails leaves an INVALID
-- index: DROP INDEX CONCURRENTLY it and build it again); this migration's
-- CREATE INDEX IF NOT EXISTS then finds them built:
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_key_pending_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
--     WHERE status = 'pending' AND ordering_key IS NOT NULL;
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (4, 'key indexes by status: a claimed keyed row gets one key index entry');
-- A key's pending rows, by seq: heads, runs, "is an earlier row pending?".
CREATE INDEX IF NOT EXISTS "outbox_key_pending_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
    WHERE status = 'pending' AND ordering_key IS NOT NULL;
-- A key's claimed rows, by seq: "is a row of this key in flight, or earlier and claimed?".
DROP INDEX IF EXISTS "public"."outbox_key_claimed_idx";
CREATE INDEX IF NOT EXISTS "outbox_key_claimed_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
    WHERE status = 'claimed' AND ordering_key IS NOT NULL;
-- Both statuses in one index: a claim wrote a keyed row into it and into key_claimed_idx.
DROP INDEX IF EXISTS "public"."outbox_key_live_idx";
-- Stats' index of pending rows, rebuilt so that no key probe can pick it: its predicate
-- names created_at, which only the stats' conditions name. (Before ANALYZE, the planner
-- probed "an earlier pending row of this key" through the old one, reading every pending
-- row of the lane for each head.)
DROP INDEX IF EXISTS "public"."outbox_pending_idx";
CREATE INDEX IF NOT EXISTS "outbox_pending_idx" ON "public"."outbox_messages" (lane, target, created_at)
    WHERE status = 'pending' AND created_at IS NOT NULL;
-- The lease index, rebuilt for the same reason: "is an earlier row of this key claimed?"
-- was read from it (every claimed row of the lane) instead of key_claimed_idx. Every
-- statement that reads it compares lease_expires_at, which implies the predicate.
DROP INDEX IF EXISTS "public"."outbox_lease_idx";
CREATE INDEX IF NOT EXISTS "outbox_lease_idx" ON "public"."outbox_messages" (lane, target, lease_expires_at, seq)
    WHERE status = 'claimed' AND lease_expires_at IS NOT NULL;
-- Marks the lowest live row of each key given, after taking each key's lock: see
-- schema/heads.rs. Called in the transaction that took rows of those keys out of live,
-- after it did.
CREATE OR REPLACE FUNCTION "public"."outbox_promote_heads"(p_lanes text[], p_targets text[], p_keys text[])
RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_key int4;
BEGIN
    FOR v_key IN
        SELECT DISTINCT hashtext(u.lane || chr(31) || u.target || chr(31) || u.ordering_key)
        FROM unnest(p_lanes, p_targets, p_keys) AS u(lane, target, ordering_key)
        WHERE u.ordering_key IS NOT NULL
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(458410234, v_key);
    END LOOP;
    -- A statement of its own: its snapshot is taken after the locks.
    UPDATE "public"."outbox_messages" m SET key_head = true
    FROM (SELECT DISTINCT u.lane, u.target, u.ordering_key
          FROM unnest(p_lanes, p_targets, p_keys) AS u(lane, target, ordering_key)
          WHERE u.ordering_key IS NOT NULL) u
    CROSS JOIN LATERAL (
        SELECT x.outbox_id FROM ((SELECT e.outbox_id, e.seq FROM "public"."outbox_messages" e
                  WHERE e.lane = u.lane AND e.target = u.target AND e.ordering_key = u.ordering_key AND e.status = 'pending'
                  ORDER BY e.seq LIMIT 1) UNION ALL (SELECT e.outbox_id, e.seq FROM "public"."outbox_messages" e
                  WHERE e.lane = u.lane AND e.target = u.target AND e.ordering_key = u.ordering_key AND e.status = 'claimed'
                  ORDER BY e.seq LIMIT 1)) x ORDER BY x.seq LIMIT 1) h
    WHERE m.outbox_id = h.outbox_id AND NOT m.key_head;
END
$fn$;
-- At the commit of a transaction that enqueued a row behind a live row of its key: is it
-- the head now? See schema/heads.rs.
CREATE OR REPLACE FUNCTION "public"."outbox_check_head"() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        -- This snapshot cannot see a promotion that committed after it: mark (harmless).
        UPDATE "public"."outbox_messages" SET key_head = true WHERE outbox_id = NEW.outbox_id;
        RETURN NULL;
    END IF;
    IF NOT pg_try_advisory_xact_lock_shared(458410234, hashtext(NEW.lane || chr(31) || NEW.target || chr(31) || NEW.ordering_key)) THEN
        IF current_setting('outbox_relay.head_lock_held', true) = 'yes' THEN
            -- Waiting while holding another key's lock could deadlock with a promoter.
            UPDATE "public"."outbox_messages" SET key_head = true WHERE outbox_id = NEW.outbox_id;
            RETURN NULL;
        END IF;
        PERFORM pg_advisory_xact_lock_shared(458410234, hashtext(NEW.lane || chr(31) || NEW.target || chr(31) || NEW.ordering_key));
    END IF;
    PERFORM set_config('outbox_relay.head_lock_held', 'yes', true);
    UPDATE "public"."outbox_messages" m SET key_head = true
    WHERE m.outbox_id = NEW.outbox_id AND NOT m.key_head
      AND NOT (EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = NEW.lane AND e.target = NEW.target AND e.ordering_key = NEW.ordering_key AND e.status = 'pending' AND e.seq < NEW.seq) OR EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = NEW.lane AND e.target = NEW.target AND e.ordering_key = NEW.ordering_key AND e.status = 'claimed' AND e.seq < NEW.seq));
    RETURN NULL;
END
$fn$;
COMMIT;
