-- $1 now, $2 channel, $3.. one array per draft field. Rows are inserted in draft order, so
-- `seq` follows it.
--
-- `key_head`: the first row of a key that has no live row is its head; the deferred
-- `check_head` trigger looks again at commit for the others (schema/heads.rs), but for
-- `key_in_batch` rows: those behind an earlier row of their key that this INSERT writes
-- for certain (`behind_sure`), which is live at commit. The probe of each key index ends
-- in `OFFSET 0` to stay a probe (schema/heads.rs).
--
-- A dedupe key already taken inserts nothing (the caller then reads the holder); ON
-- CONFLICT waits for a concurrent inserter of the same key to finish first, so racing
-- enqueues never error.
--
-- $12 claimed_by, $13 claim_token, $14 lease in ms: NULL for a pending row; set for a
-- draft handed off to a lane of this process (`store::hand_off`), written claimed at its
-- first attempt, as a claim would, and not notified.
WITH draft AS (
    SELECT * FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[],
                         $7::jsonb[], $8::text[], $9::text[], $10::int8[],
                         $11::int8[], $12::text[], $13::uuid[], $14::int8[])
    WITH ORDINALITY AS d(outbox_id, lane, target, payload, headers,
                         ordering_key, dedupe_key, delay_ms, max_attempts,
                         claimed_by, claim_token, lease_ms, ord)
),
-- `behind_sure`: an earlier draft of the key has no dedupe key, so this INSERT writes it
-- for certain (one with a dedupe key may be a duplicate, not written). Counted over `w`,
-- the frame `nth` is numbered over, so one pass of the window computes both.
ranked AS (
    SELECT d.*, row_number() OVER w AS nth,
           count(*) FILTER (WHERE d.dedupe_key IS NULL) OVER w
               > (d.dedupe_key IS NULL)::int AS behind_sure
    FROM draft d
    WINDOW w AS (PARTITION BY d.lane, d.target, d.ordering_key ORDER BY d.ord)
),
ins AS (
    INSERT INTO "public"."outbox_messages" AS m (outbox_id, lane, target, payload, headers,
        ordering_key, dedupe_key, status, attempt_count, max_attempts,
        available_at, created_at, updated_at, key_head, key_in_batch,
        claimed_by, claim_token, lease_expires_at)
    SELECT d.outbox_id, d.lane, d.target, d.payload::json, d.headers, d.ordering_key,
           d.dedupe_key,
           CASE WHEN d.claim_token IS NULL THEN 'pending' ELSE 'claimed' END,
           CASE WHEN d.claim_token IS NULL THEN 0 ELSE 1 END, d.max_attempts,
           COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
               + d.delay_ms * interval '1 millisecond',
           COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()),
           COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()),
           d.ordering_key IS NULL OR (d.nth = 1 AND NOT (
               EXISTS (SELECT 1 FROM "public"."outbox_messages" e
                       WHERE e.lane = d.lane AND e.target = d.target
                         AND e.ordering_key = d.ordering_key AND e.status = 'pending' OFFSET 0)
               OR EXISTS (SELECT 1 FROM "public"."outbox_messages" e
                          WHERE e.lane = d.lane AND e.target = d.target
                            AND e.ordering_key = d.ordering_key AND e.status = 'claimed' OFFSET 0))),
           d.ordering_key IS NOT NULL AND d.behind_sure,
           d.claimed_by, d.claim_token,
           COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
               + d.lease_ms * interval '1 millisecond'
    FROM ranked d ORDER BY d.ord
    ON CONFLICT (lane, target, dedupe_key) WHERE dedupe_key IS NOT NULL
    DO NOTHING
    RETURNING m.outbox_id, m.seq, m.lane, m.target, m.payload, m.headers, m.ordering_key,
        m.dedupe_key, m.status, m.attempt_count, m.max_attempts,
        floor(extract(epoch FROM m.available_at) * 1000)::int8 AS available_at,
        m.claimed_by, m.claim_token,
        floor(extract(epoch FROM m.lease_expires_at) * 1000)::int8 AS lease_expires_at,
        m.last_error,
        floor(extract(epoch FROM m.created_at) * 1000)::int8 AS created_at,
        floor(extract(epoch FROM m.updated_at) * 1000)::int8 AS updated_at,
        floor(extract(epoch FROM m.delivered_at) * 1000)::int8 AS delivered_at
),
-- One notification per (lane, target) of the pending rows: PostgreSQL folds identical
-- notifications of one transaction into one, so a transaction that enqueues many rows wakes
-- each lane once.
wake AS (
    SELECT pg_notify($2, w.lane || E'\t' || w.target)
    FROM (SELECT DISTINCT lane, target FROM ins WHERE ins.status = 'pending') w
)
SELECT ins.*, (SELECT count(*) FROM wake) AS woken FROM ins
