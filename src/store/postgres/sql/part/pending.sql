-- `key_runs` (`claim_block.sql`): the CTE `pending`, the heads of `{{heads}}`, each followed
-- by its key run, the rows of `{{run}}` (`key_runs.sql`, or `head_runs_run.sql`).
pending AS (
            SELECT r.outbox_id, 1 AS src, h.due_at, h.seq, r.pos
            FROM {{heads}} h
            CROSS JOIN LATERAL (
                SELECT h.outbox_id, 0::int8 AS pos
                UNION ALL
                SELECT n.outbox_id, n.pos FROM (
                    SELECT e.outbox_id, row_number() OVER w AS pos,
                           bool_and(e.status = 'pending' AND e.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))
                               OVER w AS ok
                    FROM (
                        SELECT e.outbox_id, e.seq, e.status, e.available_at FROM "public"."outbox_messages" e
                        WHERE {{run}}
                        ORDER BY e.seq
                        FOR UPDATE OF e
                    ) e
                    WINDOW w AS (ORDER BY e.seq)
                ) n
                WHERE n.ok
            ) r
            LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
         )
