-- The claim under Skip: `claim_block.sql` says what each part does and why it is written
-- so. Under Skip a dead letter holds no key, so `key_free` has no dead-letter clause and
-- a run is not cut at one; and the rows this claim dead-letters (`to_dead`) hold their
-- key no longer, so `successors` finds the next row of each such key.
WITH to_dead AS MATERIALIZED (
            SELECT m.outbox_id, m.seq, m.ordering_key, m.lease_expires_at AS lapsed_at
            FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.attempt_count >= m.max_attempts AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
              AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
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
                AND e.status = 'pending' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq AND NOT EXISTS (SELECT 1 FROM to_dead d WHERE d.outbox_id = e.outbox_id)) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
            ORDER BY m.lease_expires_at, m.seq
            LIMIT $4
            FOR UPDATE OF m SKIP LOCKED
         ),
         due AS MATERIALIZED (
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq AND NOT EXISTS (SELECT 1 FROM to_dead d WHERE d.outbox_id = e.outbox_id)) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
            ORDER BY m.available_at, m.seq
            LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
            FOR UPDATE OF m SKIP LOCKED
         ),
         successors AS MATERIALIZED (
                    SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key
                    FROM to_dead d
                    CROSS JOIN LATERAL (SELECT x.outbox_id FROM ((SELECT n.outbox_id, n.seq FROM "public"."outbox_messages" n
                  WHERE n.lane = $2 AND n.target = $3 AND n.ordering_key = d.ordering_key AND n.status = 'pending' AND n.seq > d.seq
                  ORDER BY n.seq LIMIT 1) UNION ALL (SELECT n.outbox_id, n.seq FROM "public"."outbox_messages" n
                  WHERE n.lane = $2 AND n.target = $3 AND n.ordering_key = d.ordering_key AND n.status = 'claimed' AND n.seq > d.seq
                  ORDER BY n.seq LIMIT 1)) x ORDER BY x.seq LIMIT 1) n
                    JOIN "public"."outbox_messages" m ON m.outbox_id = n.outbox_id
                    WHERE m.status = 'pending' AND NOT m.key_head
                      AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq AND NOT EXISTS (SELECT 1 FROM to_dead d WHERE d.outbox_id = e.outbox_id)) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
                    LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
                    FOR UPDATE OF m SKIP LOCKED
                 ),
         pending AS (
            SELECT r.outbox_id, 1 AS src, h.due_at, h.seq, r.pos
            FROM (SELECT * FROM (SELECT * FROM due UNION ALL SELECT * FROM successors) p
                  ORDER BY p.due_at, p.seq LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)) h
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
                   ORDER BY c.seq LIMIT 1), 9223372036854775807)
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
