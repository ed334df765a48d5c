-- outbox-relay PostgreSQL schema migration 2: key heads: a claim reads only heads, in index order.
-- For schema "public", table prefix "outbox" (`outbox-relay migrate --print-sql` prints
-- it for yours). The relay embeds this file and runs these very statements.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
-- Adds key_head, a catalog change; marks the keyed pending rows queued behind
-- their key's head (row locks, one UPDATE over them); builds eight partial indexes under
-- a SHARE lock (enqueues, claims and acks wait for the builds, reads do not); drops three
-- indexes and makes the key-head functions and trigger (brief ACCESS EXCLUSIVE locks).
--
-- On a table with rows, build its new indexes first without blocking writes, one
-- statement at a time outside a transaction (a build that fails leaves an INVALID
-- index: DROP INDEX CONCURRENTLY it and build it again); this migration's
-- CREATE INDEX IF NOT EXISTS then finds them built:
-- ALTER TABLE "public"."outbox_messages" ADD COLUMN IF NOT EXISTS key_head boolean NOT NULL DEFAULT true;
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_head_idx" ON "public"."outbox_messages" (lane, target, available_at, seq)
--     WHERE status = 'pending' AND key_head;
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_lease_idx" ON "public"."outbox_messages" (lane, target, lease_expires_at, seq)
--     WHERE status = 'claimed';
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_last_attempt_idx" ON "public"."outbox_messages" (lane, target, lease_expires_at)
--     WHERE status = 'claimed' AND attempt_count >= max_attempts;
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_key_claimed_idx" ON "public"."outbox_messages" (lane, target, ordering_key)
--     WHERE status = 'claimed' AND ordering_key IS NOT NULL;
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_pending_idx" ON "public"."outbox_messages" (lane, target, created_at)
--     WHERE status = 'pending';
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_delivered_idx" ON "public"."outbox_messages" (lane, target)
--     WHERE status = 'delivered';
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_dead_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
--     WHERE status = 'dead_letter';
-- CREATE INDEX CONCURRENTLY IF NOT EXISTS "outbox_purge_idx" ON "public"."outbox_messages" (updated_at)
--     WHERE status IN ('delivered', 'dead_letter') AND updated_at IS NOT NULL;
BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
INSERT INTO "public"."outbox_migrations" (version, name) VALUES (2, 'key heads: a claim reads only heads, in index order');
ALTER TABLE "public"."outbox_messages" ADD COLUMN IF NOT EXISTS key_head boolean NOT NULL DEFAULT true;
-- Backfill: a pending row with an earlier live row of its key is not a head.
UPDATE "public"."outbox_messages" m SET key_head = false
WHERE m.ordering_key IS NOT NULL AND m.status = 'pending'
  AND EXISTS (SELECT 1 FROM "public"."outbox_messages" e
              WHERE e.lane = m.lane AND e.target = m.target
                AND e.ordering_key = m.ordering_key
                AND e.status IN ('pending', 'claimed') AND e.seq < m.seq);

-- The claim's pending scan: heads only, in due order.
CREATE INDEX IF NOT EXISTS "outbox_head_idx" ON "public"."outbox_messages" (lane, target, available_at, seq)
    WHERE status = 'pending' AND key_head;
-- Lapsed claims in lapse order (the claim), the next lease to lapse (next_due).
CREATE INDEX IF NOT EXISTS "outbox_lease_idx" ON "public"."outbox_messages" (lane, target, lease_expires_at, seq)
    WHERE status = 'claimed';
-- Claims on their last attempt: the ones a lapse dead-letters.
CREATE INDEX IF NOT EXISTS "outbox_last_attempt_idx" ON "public"."outbox_messages" (lane, target, lease_expires_at)
    WHERE status = 'claimed' AND attempt_count >= max_attempts;
-- Is a row of this key in flight?
CREATE INDEX IF NOT EXISTS "outbox_key_claimed_idx" ON "public"."outbox_messages" (lane, target, ordering_key)
    WHERE status = 'claimed' AND ordering_key IS NOT NULL;
-- Stats: the pending count (index only) and the oldest due pending row.
CREATE INDEX IF NOT EXISTS "outbox_pending_idx" ON "public"."outbox_messages" (lane, target, created_at)
    WHERE status = 'pending';
-- Stats: the delivered count (index only).
CREATE INDEX IF NOT EXISTS "outbox_delivered_idx" ON "public"."outbox_messages" (lane, target)
    WHERE status = 'delivered';
-- Every dead letter, keyed or not: under Block, does an earlier dead row hold this key?
-- And the dead-letter count (index only). Replaces key_dead_idx (keyed rows only).
CREATE INDEX IF NOT EXISTS "outbox_dead_idx" ON "public"."outbox_messages" (lane, target, ordering_key, seq)
    WHERE status = 'dead_letter';
DROP INDEX IF EXISTS "public"."outbox_key_dead_idx";
-- Purge's index, rebuilt so that no probe for dead letters can pick it: its predicate
-- names updated_at, which only purge's condition implies. (On a table whose statistics
-- said "no dead rows", the planner once probed a key's dead letters through the old one,
-- reading every finished row.)
CREATE INDEX IF NOT EXISTS "outbox_purge_idx" ON "public"."outbox_messages" (updated_at)
    WHERE status IN ('delivered', 'dead_letter') AND updated_at IS NOT NULL;
DROP INDEX IF EXISTS "public"."outbox_finished_idx";
-- Replaced by head_idx and lease_idx: no claim orders by it any more.
DROP INDEX IF EXISTS "public"."outbox_claimable_idx";

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
        SELECT e.outbox_id FROM "public"."outbox_messages" e
        WHERE e.lane = u.lane AND e.target = u.target AND e.ordering_key = u.ordering_key
          AND e.status IN ('pending', 'claimed')
        ORDER BY e.seq LIMIT 1) h
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
      AND NOT EXISTS (
          SELECT 1 FROM "public"."outbox_messages" e
          WHERE e.lane = NEW.lane AND e.target = NEW.target
            AND e.ordering_key = NEW.ordering_key
            AND e.status IN ('pending', 'claimed') AND e.seq < NEW.seq);
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS "outbox_check_head" ON "public"."outbox_messages";
CREATE CONSTRAINT TRIGGER "outbox_check_head" AFTER INSERT ON "public"."outbox_messages"
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.ordering_key IS NOT NULL AND NOT NEW.key_head)
    EXECUTE FUNCTION "public"."outbox_check_head"();
COMMIT;
