-- The claim's common case: `lapsed` and `due` as in `claim_block.sql`, without dead-lettering, as
-- one statement that commits on its own, so a claim is one round trip. `$1` now, `$2` lane,
-- `$3` target, `$4` limit, `$5` lease in ms, `$6` consumer, `$7` the longest key run.
--
-- A claim that dead-letters a lapsed last attempt must call `promote_heads` after it, in
-- its transaction (schema/heads.rs), so this one does not run when the lane has such a
-- row (`lapsed_last`, one descent of `last_attempt_idx`): it claims nothing and says so in
-- its first column, and the store runs `claim_block.sql` (or `_skip`) in a transaction instead, which claims
-- exactly what it always did.
--
-- `lapsed_last`: whether the lane `$2`/`$3` has a claim on its last attempt whose lease
-- lapsed (one descent of `last_attempt_idx`): such a row only the full claim dead-letters.
-- Both scans stop on it (`AND NOT (SELECT yes FROM lapsed_last)`). The CTEs after it, which
-- the cycle function (`cycle.sql`) runs as they are but for that condition and with the
-- key run at `$11`, end in `claimed` (the claimed rows) and `to_claim` (their order:
-- `src`, `due_at`, `seq`, `pos`). `due` and `pending`: the due heads in (available_at,
-- seq) order, each with its key run, up to what `lapsed` left of the limit.
--
-- Per keyed head, the key's checks and its run take one probe of each key index (and under
-- Block one of `dead_idx`), in one LATERAL subquery:
-- - `busy`, `first`: the key's claimed rows (`key_claimed_idx`). The head is refused if one
--   is earlier or under a running lease (`key_free`'s claimed clause); otherwise they are
--   all later, and the first bounds the run (`run_bound`).
-- - `dead` (Block): the key's first dead letter (`dead_idx`). Earlier than the head, it
--   holds the key; later, it bounds the run (as `key_runs`' cut).
-- - `seqs`: the key's first `run` pending rows by seq below those bounds
--   (`key_pending_idx`). The head may be claimed only if it is the first of them: no earlier
--   row of the key is pending (`key_free`'s pending clause). The rest is its run.
--
-- The full claim asks the same with four probes a head (`key_free`'s two in `due`, then
-- `run_bound` and the run's scan in `key_runs`): two more key-index descents a head, each
-- comparing three text columns. Measured by callgrind (`examples/benchmark/callgrind.sh`,
-- 100 cycles of 64 rows in runs of 8, 100 k rows over 1,000 keys): 2.0 % fewer
-- instructions a keyed cycle, 1.0 % fewer a keyless one.
--
-- The subquery runs only for keyed rows (`WHERE m.ordering_key IS NOT NULL`, a one-time
-- filter; a keyless row gets NULLs from the LEFT JOIN). `OFFSET 0` keeps it a subquery:
-- pulled up into `due`, its `ARRAY(..)` was planned twice, once for the filter and once
-- for the output, and ran twice a head. The run is locked in `pending` as `key_runs`
-- locks it, by `seq` and after its head, so the locks and their order are the same.
WITH lapsed_last AS MATERIALIZED (SELECT EXISTS (
            SELECT 1 FROM "public"."outbox_messages" l
            WHERE l.lane = $2 AND l.target = $3 AND l.status = 'claimed'
              AND l.attempt_count >= l.max_attempts AND l.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) AS yes),
         lapsed AS MATERIALIZED (
            SELECT m.outbox_id, 0 AS src, m.lease_expires_at AS due_at, m.seq FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND m.attempt_count < m.max_attempts
               AND NOT (SELECT yes FROM lapsed_last) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
            ORDER BY m.lease_expires_at, m.seq
            LIMIT $4
            FOR UPDATE OF m SKIP LOCKED
         ),
         due AS MATERIALIZED (
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key, k.seqs
            FROM "public"."outbox_messages" m
            LEFT JOIN LATERAL (
                SELECT c.busy, d.first AS dead, ARRAY(
                    SELECT q.seq FROM "public"."outbox_messages" q
                    WHERE q.lane = m.lane AND q.target = m.target AND q.ordering_key = m.ordering_key AND q.status = 'pending'
                      AND q.seq < coalesce(c.first, 9223372036854775807) AND q.seq < coalesce(d.first, 9223372036854775807)
                    ORDER BY q.seq
                    LIMIT $7::int8) AS seqs
                FROM (
                    SELECT bool_or(e.seq < m.seq OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) AS busy,
                           min(e.seq) AS first
                    FROM "public"."outbox_messages" e
                    WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed') c CROSS JOIN (
                    SELECT (SELECT e.seq FROM "public"."outbox_messages" e
                            WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter'
                            ORDER BY e.seq LIMIT 1) AS first) d
                WHERE m.ordering_key IS NOT NULL
                OFFSET 0) k ON true
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())  AND NOT (SELECT yes FROM lapsed_last)
              AND CASE WHEN m.ordering_key IS NULL THEN true
                       ELSE NOT k.busy IS TRUE AND k.seqs[1] = m.seq AND (k.dead IS NULL OR k.dead > m.seq) END
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
                        WHERE cardinality(h.seqs) > 1 AND e.seq = ANY (h.seqs[2:])
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
         claimed AS (
            UPDATE "public"."outbox_messages" m SET status = 'claimed', attempt_count = m.attempt_count + 1,
                   claimed_by = $6, claim_token = gen_random_uuid(),
                   lease_expires_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) + $5::int8 * interval '1 millisecond',
                   updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()), key_head = true
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_claim))
            RETURNING m.outbox_id, m.seq, m.lane, m.target, m.payload, m.headers, m.ordering_key, m.dedupe_key, m.status, m.attempt_count, m.max_attempts, floor(extract(epoch FROM m.available_at) * 1000)::int8 AS available_at, m.claimed_by, m.claim_token, floor(extract(epoch FROM m.lease_expires_at) * 1000)::int8 AS lease_expires_at, m.last_error, floor(extract(epoch FROM m.created_at) * 1000)::int8 AS created_at, floor(extract(epoch FROM m.updated_at) * 1000)::int8 AS updated_at, floor(extract(epoch FROM m.delivered_at) * 1000)::int8 AS delivered_at
         )
         SELECT (SELECT yes FROM lapsed_last) AS lapsed_last, c.*
         FROM (SELECT 1) one
         LEFT JOIN (claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id) ON true
         ORDER BY o.ord
