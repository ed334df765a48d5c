-- `next_due` under Skip: as `next_due_block.sql`, but a dead letter holds no key.
SELECT ceil(extract(epoch FROM (min(due) - COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))) * 1000)::int8
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
         ) d
