-- The one-statement claim's CTEs, `lapsed` to `claimed` (`claim_fast_block.sql` says what
-- each does), which the cycle function runs too. `{{gate}}`: `lapsed_last_gate.sql` in
-- the statement, nothing in the cycle; `{{run}}`: the parameter of the longest key run
-- (`$7`, the cycle's `$11`); `{{dead_*}}`: `head_runs_dead_*.sql` under Block, else nothing.
lapsed AS MATERIALIZED (
            SELECT m.outbox_id, 0 AS src, m.lease_expires_at AS due_at, m.seq FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND m.attempt_count < m.max_attempts
              {{gate}} AND {{key_free}}
            ORDER BY m.lease_expires_at, m.seq
            LIMIT $4
            FOR UPDATE OF m SKIP LOCKED
         ),
         due AS MATERIALIZED (
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key, k.seqs
            FROM "public"."outbox_messages" m
            LEFT JOIN LATERAL (
                SELECT c.busy,{{dead_column}} ARRAY(
                    SELECT q.seq FROM "public"."outbox_messages" q
                    WHERE q.lane = m.lane AND q.target = m.target AND q.ordering_key = m.ordering_key AND q.status = 'pending'
                      AND q.seq < coalesce(c.first, 9223372036854775807){{dead_bound}}
                    ORDER BY q.seq
                    LIMIT {{run}}::int8) AS seqs
                FROM (
                    SELECT bool_or(e.seq < m.seq OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) AS busy,
                           min(e.seq) AS first
                    FROM "public"."outbox_messages" e
                    WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed') c{{dead_probe}}
                WHERE m.ordering_key IS NOT NULL
                OFFSET 0) k ON true
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) {{gate}}
              AND CASE WHEN m.ordering_key IS NULL THEN true
                       ELSE NOT k.busy IS TRUE AND k.seqs[1] = m.seq{{dead_check}} END
            ORDER BY m.available_at, m.seq
            LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
            FOR UPDATE OF m SKIP LOCKED
         ),
         {{pending}},
         {{to_claim}},
         {{claimed}}
