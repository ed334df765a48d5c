-- The claim under Block (`claim_skip.sql`: under Skip): one statement. Run in a transaction with
-- `promote_heads` for the keys in `dead_keys` (schema/heads.rs).
--
-- `$1` now, `$2` lane, `$3` target, `$4` limit, `$5` lease in ms, `$6` consumer,
-- `$7` the longest key run, `$8` the lapsed-lease error text.
--
-- - `to_dead` locks claimed rows whose lease lapsed on their last attempt and that head
--   their key (`key_free`, as the reference store's `lapsed_heads`); the statement
--   dead-letters them and answers their ids in lapse order, as the reference store does. Of a lapsed run on its last attempts, one claim dead-letters the
--   head; under Skip the next claim finds the next one at the head, and so on.
-- - `lapsed` locks lapsed claims with attempts left, in lapse order: they come first,
--   because they became claimable earliest and their keys are blocked behind them.
-- - `due` locks due pending heads in (available_at, seq) order, up to what `lapsed` left
--   of the limit.
-- - `successors` (Skip): the next row of a key whose head `to_dead` dead-letters is not
--   marked a head yet (`promote_heads` runs after this statement), so it is found from
--   `to_dead` by one probe per dead row, and merged into `due`'s order (which reads and
--   locks all of `due`: this claim runs only when the lane has a lapsed last attempt).
-- - `pending` (`key_runs`): each of those heads followed by its key run, up to what
--   `lapsed` left of the limit.
--
-- The UPDATEs find their rows by `outbox_id = ANY (ARRAY(...))`: a join with the CTE let
-- the planner guess a thousand rows and hash-join them against a scan of the whole table.
--
-- Why two claimers never hold two rows of one key: a claimer locks only a key's head,
-- `FOR UPDATE SKIP LOCKED`, and re-checks the row once locked (READ COMMITTED re-evaluates
-- a row changed since the snapshot). A concurrent claimer skips that locked head or sees it
-- claimed; either way in its snapshot the head is still live, so no later row of the key
-- passes `key_free`. And `key_free` refuses a row while any other row of its key is claimed
-- under a live lease: the head rule alone allows that when an earlier row turns live
-- again after a later one was claimed (an enqueue that committed after a later-sequenced
-- one of its key, or a dead letter requeued while its successor is in flight). A lapsed
-- last attempt counts as gone only while this statement holds its lock and dead-letters it.
--
-- The claim and `next_due`: the statements whose cost must not grow with the lane.
--
-- Each reads in index order and stops at its limit:
-- - lapsed claims by `lease_idx` (lane, target, lease_expires_at, seq) over claimed rows;
-- - due pending rows by `head_idx` (lane, target, available_at, seq) over pending heads
--   only, so the rows queued behind a key's head are never read (schema/heads.rs);
-- - lapsed last attempts by `last_attempt_idx`;
-- - each due head's key run (`key_runs`) by `key_pending_idx`, right after the head's seq,
--   up to the key's next claimed row (`key_claimed_idx`).
--
-- Per-key order is checked on the rows met, by index probes (`key_free`), never by reading
-- a key's queue. The one-statement claim, which runs on nearly every cycle, asks the same
-- with one probe of each key index a head (`head_runs`). The ordering policy changes those
-- probes, so it is statement text: one statement per policy. As a bind parameter, PostgreSQL's generic plan (after five
-- executions) could not use the key indexes at all.
--
-- `key_free`, the key checks of each row:
-- Whether row `m`'s key lets it be claimed: no earlier row of the key holds it (pending or
-- claimed, or dead-lettered under Block), and no row of the key is claimed under a lease
-- that has not lapsed. Each clause is one descent of `key_pending_idx`, `key_claimed_idx`
-- or `dead_idx` (schema/heads.rs) and stops at its first row: the claimed rows are
-- asked once, "earlier, or under a running lease", over the key's few claimed rows.
-- (Asked apart, "an earlier claimed row" names neither the key's columns nor the lease
-- first, and PostgreSQL read it from `lease_idx`, every claimed row of the lane, dead
-- versions of the rows acked since the last vacuum included: 0.17 ms a head.)
--
-- The lease clause ends in `OFFSET 0` to keep it a probe. Its only correlation is equality
-- on (lane, target, key), so PostgreSQL may otherwise turn it into a hashed subplan: once
-- per statement, read every claimed row whose lease has not lapsed, in every lane (the
-- lease index has no better prefix for that), and hash them. Every row a relay acked
-- within the last lease length is still in that index range until vacuum, so a busy lane
-- paid for its own throughput on each claim (keyed claims cost about twice the keyless
-- ones). `OFFSET 0` stops the rewrite of an EXISTS into a hashable ANY.
--
-- `skip_to_dead`: under Skip, rows this very claim dead-letters (CTE `to_dead`) do not
-- hold their key.
--
-- `key_runs`:
-- The CTE `pending`: the heads of CTE or subquery `heads` (`outbox_id`, `due_at`, `seq`,
-- `ordering_key`, in claim order, locked), each followed by its key run, up to `rest` rows
-- in all; columns `outbox_id`, `src` (1), `due_at` and `seq` (the head's), `pos` (0 for the
-- head, then 1, 2.. along its run). `run` is the bind parameter of the longest run
-- (`crate::store::ClaimRequest::run_len`).
--
-- A run is the key's next live rows after the head by seq, cut before the first that is
-- not pending and due, and under Block before the first dead letter after the head (one
-- probe of `dead_idx`, which bounds the index range). As the memory store's `run_after`.
-- Pending rows are read from `key_pending_idx`, from the head's seq on, at most `run - 1`
-- of them and only up to the key's first claimed row after the head (`run_bound`, one
-- probe of `key_claimed_idx`): a claimed row is in the other index, and the run stops there.
--
-- Cost: `LIMIT rest` without ORDER BY is what keeps it lazy. The plan can only be a nested
-- loop over `heads` in their order (the LATERAL refers to the head), whose inner side is an
-- Append, head first, then its run in seq order; no parallel plan runs a statement that
-- writes. So the limit keeps exactly "heads in due order, each with its run, truncated",
-- and stops pulling there: heads past it are neither read (a CTE is evaluated as far as it
-- is read) nor locked, and with `run = 1` the run's `LIMIT 0` never starts its scan. An
-- ORDER BY here would sort, so read and lock every head and run first.
--
-- Locks: the run's rows are locked `FOR UPDATE`, without SKIP LOCKED. A skipped row would
-- leave a hole in the middle of a run (the limit reads on past it), handing out a message
-- before its predecessor. No claimer can hold them: they are behind a live head this claim
-- holds locked, and a row of a key is taken only after its earlier live rows (`key_free`).
-- Another writer (an ack of a row handed out oddly, a relay that nacks a run's head and
-- acks the next) holds one only for its own statement, so at worst this claim waits that
-- long; then PostgreSQL re-reads the row, and if it is no longer pending and due the run
-- ends there.
--
-- Why the rows are read by `key_pending_idx` first and locked by `seq` after: a locked row
-- that changed since the snapshot is checked again against the conditions of the scan that
-- read it. Read straight from the index, whose condition says `status = 'pending'`, a row
-- claimed meanwhile would drop out of the run (a hole, the message after it handed out
-- while it is in flight). Locked by `seq`, which never changes (an identity column no
-- UPDATE may set), it comes back as it is now, claimed, and the window (`ok`) ends the run
-- before it. By `seq` rather than `outbox_id`: `seq_idx` answers `seq = ANY (..)` in seq
-- order, the lock's ORDER BY, so a run is not sorted before it is locked (by `outbox_id`
-- its rows came in uuid order and were: 1.7 % of a keyed cycle's instructions, callgrind).
-- The window still sorts the few locked rows again: PostgreSQL does not take a lock's
-- output to be in any order.
--
-- `to_claim`:
-- The CTE `to_claim`: the lapsed claims, then the key runs, with `ord`, the claim's order
-- (`src`, `due_at`, `seq`, `pos`) as one number, which the answer is sorted by.
--
-- Why one number: the answer's rows are the claimed rows whole (payload, headers...) and
-- the order's columns come after them, so a sort on four columns extracted up to four
-- columns from each wide row per comparison, past every variable-length column before
-- them. A keyed claim's rows tie on the first three (a run shares its head's `due_at` and
-- `seq`), so that was every comparison: 140 M of a keyed cycle's 3,014 M instructions
-- (4.6 %, callgrind, 100 cycles of 64), against one cheap sort of these narrow rows here
-- (109 M saved net; a keyless cycle pays 1.5 % more for it).
WITH to_dead AS MATERIALIZED (
            SELECT m.outbox_id, m.seq, m.ordering_key, m.lease_expires_at AS lapsed_at
            FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.attempt_count >= m.max_attempts AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
              AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
            FOR UPDATE OF m SKIP LOCKED
         ),
         lapsed AS MATERIALIZED (
            SELECT m.outbox_id, 0 AS src, m.lease_expires_at AS due_at, m.seq FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND m.attempt_count < m.max_attempts
              AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
            ORDER BY m.lease_expires_at, m.seq
            LIMIT $4
            FOR UPDATE OF m SKIP LOCKED
         ),
         due AS MATERIALIZED (
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
            ORDER BY m.available_at, m.seq
            LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
            FOR UPDATE OF m SKIP LOCKED
         ),
         
         pending AS (
            SELECT r.outbox_id, 1 AS src, h.due_at, h.seq, r.pos
            FROM due h
            CROSS JOIN LATERAL (
                SELECT h.outbox_id, 0::int8 AS pos
                UNION ALL
                SELECT n.outbox_id, n.pos FROM (
                    SELECT e.outbox_id, row_number() OVER w AS pos,
                           bool_and(e.status = 'pending' AND e.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))
                               OVER w AS ok
                    FROM (
                        SELECT e.outbox_id, e.seq, e.status, e.available_at FROM "public"."outbox_messages" e
                        WHERE e.seq = ANY (ARRAY(
            SELECT q.seq FROM "public"."outbox_messages" q
            WHERE h.ordering_key IS NOT NULL
              AND q.lane = $2 AND q.target = $3
              AND q.ordering_key = h.ordering_key
              AND q.status = 'pending' AND q.seq > h.seq
              AND q.seq < coalesce((SELECT c.seq FROM "public"."outbox_messages" c
                   WHERE c.lane = $2 AND c.target = $3 AND c.ordering_key = h.ordering_key AND c.status = 'claimed' AND c.seq > h.seq
                   ORDER BY c.seq LIMIT 1), 9223372036854775807) AND q.seq < coalesce((
                SELECT x.seq FROM "public"."outbox_messages" x
                WHERE x.lane = $2 AND x.target = $3 AND x.ordering_key = h.ordering_key
                  AND x.status = 'dead_letter' AND x.seq > h.seq
                ORDER BY x.seq LIMIT 1), 9223372036854775807)
            ORDER BY q.seq
            LIMIT $7::int8 - 1))
                        ORDER BY e.seq
                        FOR UPDATE OF e
                    ) e
                    WINDOW w AS (ORDER BY e.seq)
                ) n
                WHERE n.ok
            ) r
            LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
         ),
         to_claim AS (
            SELECT u.*, row_number() OVER (ORDER BY u.src, u.due_at, u.seq, u.pos) AS ord
            FROM (
                SELECT l.outbox_id, l.src, l.due_at, l.seq, 0::int8 AS pos FROM lapsed l
                UNION ALL
                SELECT * FROM pending
            ) u
         ),
         dead AS (
            UPDATE "public"."outbox_messages" m SET status = 'dead_letter', last_error = $8, claimed_by = NULL,
                   claim_token = NULL, lease_expires_at = NULL, updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_dead))
            RETURNING m.outbox_id, m.seq, m.ordering_key
         ),
         claimed AS (
            UPDATE "public"."outbox_messages" m SET status = 'claimed', attempt_count = m.attempt_count + 1,
                   claimed_by = $6, claim_token = gen_random_uuid(),
                   lease_expires_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) + $5::int8 * interval '1 millisecond',
                   updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()), key_head = true
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_claim))
            RETURNING m.outbox_id, m.seq, m.lane, m.target, m.payload, m.headers, m.ordering_key, m.dedupe_key, m.status, m.attempt_count, m.max_attempts, floor(extract(epoch FROM m.available_at) * 1000)::int8 AS available_at, m.claimed_by, m.claim_token, floor(extract(epoch FROM m.lease_expires_at) * 1000)::int8 AS lease_expires_at, m.last_error, floor(extract(epoch FROM m.created_at) * 1000)::int8 AS created_at, floor(extract(epoch FROM m.updated_at) * 1000)::int8 AS updated_at, floor(extract(epoch FROM m.delivered_at) * 1000)::int8 AS delivered_at
         )
         SELECT dl.dead_ids, dl.dead_keys, c.*
         FROM (SELECT coalesce(array_agg(d.outbox_id ORDER BY x.lapsed_at, x.seq), '{}')
                          AS dead_ids,
                      coalesce(array_agg(DISTINCT d.ordering_key)
                               FILTER (WHERE d.ordering_key IS NOT NULL), '{}') AS dead_keys
               FROM dead d JOIN to_dead x ON x.outbox_id = d.outbox_id) dl
         LEFT JOIN (claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id) ON true
         ORDER BY o.ord
