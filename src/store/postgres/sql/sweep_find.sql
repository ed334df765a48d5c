-- $1 now, $2 lane, $3 target, $4 limit: the ids of the stray heads among the first due
-- heads of the lane (`head_idx`, in claim order) whose key lock this transaction took
-- (`sweep.rs`). Stray: an earlier live row of its key exists, one probe of each key index.
-- The lock is `promote_heads`' (class and key as in schema/heads.rs), tried, never waited
-- for. MATERIALIZED: the stray test runs on the front only, and the lock function only on
-- stray rows, each once.
WITH front AS MATERIALIZED (
    SELECT m.outbox_id, m.lane, m.target, m.ordering_key, m.seq
    FROM "public"."outbox_messages" m
    WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
      AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
    ORDER BY m.available_at, m.seq
    LIMIT $4
),
stray AS MATERIALIZED (
    SELECT f.* FROM front f
    WHERE f.ordering_key IS NOT NULL
      AND (EXISTS (SELECT 1 FROM "public"."outbox_messages" e
                   WHERE e.lane = f.lane AND e.target = f.target
                     AND e.ordering_key = f.ordering_key AND e.status = 'pending'
                     AND e.seq < f.seq)
           OR EXISTS (SELECT 1 FROM "public"."outbox_messages" e
                      WHERE e.lane = f.lane AND e.target = f.target
                        AND e.ordering_key = f.ordering_key AND e.status = 'claimed'
                        AND e.seq < f.seq))
)
SELECT s.outbox_id FROM stray s
WHERE pg_try_advisory_xact_lock(458410234, hashtext(s.lane || chr(31) || s.target || chr(31) || s.ordering_key))
