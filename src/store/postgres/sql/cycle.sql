
#variable_conflict use_column
DECLARE
    v_acked int8[] := '{}';
    v_lanes text[];
    v_targets text[];
    v_keys text[];
    v_lapsed boolean;
    v_claimed int8 := 0;
    v_due int8;
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF cardinality(p_ids) > 0 AND p_delete THEN
        WITH a AS (-- $1 ids, $2 tokens: the ack that deletes its rows (`keep_delivered = false`), under the
-- same fencing as `ack.sql`, answering the same columns (the keys it took out of live, for
-- `promote_heads`).
WITH input AS (
    SELECT * FROM unnest($7::uuid[], $8::uuid[])
    WITH ORDINALITY AS i(outbox_id, claim_token, ord)
)
DELETE FROM "public"."outbox_messages" m
USING input i
WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
  AND m.claim_token = i.claim_token
RETURNING i.ord, m.lane, m.target, m.ordering_key
)
        SELECT coalesce(array_agg(a.ord), '{}'),
               array_agg(a.lane) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.target) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.ordering_key) FILTER (WHERE a.ordering_key IS NOT NULL)
        INTO v_acked, v_lanes, v_targets, v_keys
        FROM a;
    ELSIF cardinality(p_ids) > 0 THEN
        WITH a AS (-- $1 now, $2 ids, $3 tokens: the claims to mark delivered. Answers the ordinals of the
-- claims applied, and the keys they leave for `promote_heads`.
WITH input AS (
    SELECT * FROM unnest($7::uuid[], $8::uuid[])
    WITH ORDINALITY AS i(outbox_id, claim_token, ord)
)
UPDATE "public"."outbox_messages" m
SET status = 'delivered',
    delivered_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()),
    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
    updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
FROM input i
WHERE m.outbox_id = i.outbox_id AND m.status = 'claimed'
  AND m.claim_token = i.claim_token
RETURNING i.ord, m.lane, m.target, m.ordering_key
)
        SELECT coalesce(array_agg(a.ord), '{}'),
               array_agg(a.lane) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.target) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.ordering_key) FILTER (WHERE a.ordering_key IS NOT NULL)
        INTO v_acked, v_lanes, v_targets, v_keys
        FROM a;
    END IF;
    IF cardinality(p_ids) > 0 THEN
        IF cardinality(v_keys) > 0 THEN
            PERFORM pg_advisory_xact_lock(458410234, s.k)
    FROM (SELECT DISTINCT hashtext(u.lane || chr(31) || u.target || chr(31) || u.ordering_key) AS k
          FROM unnest(v_lanes, v_targets, v_keys) AS u(lane, target, ordering_key)
          WHERE u.ordering_key IS NOT NULL
          ORDER BY 1) s;
    UPDATE "public"."outbox_messages" m SET key_head = true
    FROM (SELECT DISTINCT u.lane, u.target, u.ordering_key
          FROM unnest(v_lanes, v_targets, v_keys) AS u(lane, target, ordering_key)
          WHERE u.ordering_key IS NOT NULL) u
    CROSS JOIN LATERAL (
        SELECT e.outbox_id, e.seq FROM "public"."outbox_messages" e
                  WHERE e.lane = u.lane AND e.target = u.target AND e.ordering_key = u.ordering_key AND e.status = 'pending'
                  ORDER BY e.seq LIMIT 1) h
    WHERE m.outbox_id = h.outbox_id AND NOT m.key_head;
        END IF;
    END IF;
    v_lapsed := EXISTS (
            SELECT 1 FROM "public"."outbox_messages" l
            WHERE l.lane = $2 AND l.target = $3 AND l.status = 'claimed'
              AND l.attempt_count >= l.max_attempts AND l.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()));
    IF NOT v_lapsed THEN
        IF p_block THEN
            RETURN QUERY WITH lapsed AS MATERIALIZED (
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
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key, k.seqs
            FROM "public"."outbox_messages" m
            LEFT JOIN LATERAL (
                SELECT c.busy, d.first AS dead, ARRAY(
                    SELECT q.seq FROM "public"."outbox_messages" q
                    WHERE q.lane = m.lane AND q.target = m.target AND q.ordering_key = m.ordering_key AND q.status = 'pending'
                      AND q.seq < coalesce(c.first, 9223372036854775807) AND q.seq < coalesce(d.first, 9223372036854775807)
                    ORDER BY q.seq
                    LIMIT $11::int8) AS seqs
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
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) 
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
             SELECT NULL::int8[], NULL::boolean, NULL::int8, c.*
             FROM claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id
             ORDER BY o.ord;
        ELSE
            RETURN QUERY WITH lapsed AS MATERIALIZED (
            SELECT m.outbox_id, 0 AS src, m.lease_expires_at AS due_at, m.seq FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND m.attempt_count < m.max_attempts
               AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
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
                SELECT c.busy, ARRAY(
                    SELECT q.seq FROM "public"."outbox_messages" q
                    WHERE q.lane = m.lane AND q.target = m.target AND q.ordering_key = m.ordering_key AND q.status = 'pending'
                      AND q.seq < coalesce(c.first, 9223372036854775807)
                    ORDER BY q.seq
                    LIMIT $11::int8) AS seqs
                FROM (
                    SELECT bool_or(e.seq < m.seq OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) AS busy,
                           min(e.seq) AS first
                    FROM "public"."outbox_messages" e
                    WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed') c
                WHERE m.ordering_key IS NOT NULL
                OFFSET 0) k ON true
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) 
              AND CASE WHEN m.ordering_key IS NULL THEN true
                       ELSE NOT k.busy IS TRUE AND k.seqs[1] = m.seq END
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
             SELECT NULL::int8[], NULL::boolean, NULL::int8, c.*
             FROM claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id
             ORDER BY o.ord;
        END IF;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        IF v_claimed = 0 THEN
            IF p_block THEN
                v_due := (SELECT ceil(extract(epoch FROM (min(due) - COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))) * 1000)::int8
         FROM (
            (SELECT m.lease_expires_at AS due FROM "public"."outbox_messages" m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
               AND m.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
             ORDER BY m.lease_expires_at LIMIT 1)
            UNION ALL
            (SELECT m.available_at FROM "public"."outbox_messages" m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
               AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.available_at, m.seq LIMIT 1)
            UNION ALL
            (SELECT m.lease_expires_at FROM "public"."outbox_messages" m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
               AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.lease_expires_at, m.seq LIMIT 1)
         ) d);
            ELSE
                v_due := (SELECT ceil(extract(epoch FROM (min(due) - COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))) * 1000)::int8
         FROM (
            (SELECT m.lease_expires_at AS due FROM "public"."outbox_messages" m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
               AND m.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
             ORDER BY m.lease_expires_at LIMIT 1)
            UNION ALL
            (SELECT m.available_at FROM "public"."outbox_messages" m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
               AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.available_at, m.seq LIMIT 1)
            UNION ALL
            (SELECT m.lease_expires_at FROM "public"."outbox_messages" m
             WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
               AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.lease_expires_at, m.seq LIMIT 1)
         ) d);
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT v_acked, v_lapsed, v_due, NULL::uuid, NULL::int8, NULL::text, NULL::text, NULL::json, NULL::jsonb, NULL::text, NULL::text, NULL::text, NULL::int8, NULL::int8, NULL::int8, NULL::text, NULL::uuid, NULL::int8, NULL::text, NULL::int8, NULL::int8, NULL::int8;
END
