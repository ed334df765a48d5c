-- `next_due` of many lanes in one statement: $1 now; $2 lanes, $3 targets and $4 their
-- places in the asked list, of the lanes under `Skip`; $5, $6, $7 of those under `Block`
-- (the policy is statement text, so each has its own branch). Rows `(i, wait_ms)`: each
-- lane's answer is `next_due`'s statement over that lane, so it costs what one lane's does
-- (each branch one index descent per lane), and an idle relay asks for all its lanes with
-- one statement per pass instead of every lane polling.
SELECT q.i, (SELECT ceil(extract(epoch FROM (min(due) - COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))) * 1000)::int8
         FROM (
            (SELECT m.lease_expires_at AS due FROM "public"."outbox_messages" m
             WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'claimed'
               AND m.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
             ORDER BY m.lease_expires_at LIMIT 1)
            UNION ALL
            (SELECT m.available_at FROM "public"."outbox_messages" m
             WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'pending' AND m.key_head
               AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.available_at, m.seq LIMIT 1)
            UNION ALL
            (SELECT m.lease_expires_at FROM "public"."outbox_messages" m
             WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'claimed'
               AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.lease_expires_at, m.seq LIMIT 1)
         ) d) AS wait_ms
             FROM unnest($2::text[], $3::text[], $4::int4[]) AS q(lane, target, i)
UNION ALL
SELECT q.i, (SELECT ceil(extract(epoch FROM (min(due) - COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))) * 1000)::int8
         FROM (
            (SELECT m.lease_expires_at AS due FROM "public"."outbox_messages" m
             WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'claimed'
               AND m.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
             ORDER BY m.lease_expires_at LIMIT 1)
            UNION ALL
            (SELECT m.available_at FROM "public"."outbox_messages" m
             WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'pending' AND m.key_head
               AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.available_at, m.seq LIMIT 1)
            UNION ALL
            (SELECT m.lease_expires_at FROM "public"."outbox_messages" m
             WHERE m.lane = q.lane AND m.target = q.target AND m.status = 'claimed'
               AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND (m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq) AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
             ORDER BY m.lease_expires_at, m.seq LIMIT 1)
         ) d) AS wait_ms
             FROM unnest($5::text[], $6::text[], $7::int4[]) AS q(lane, target, i)
