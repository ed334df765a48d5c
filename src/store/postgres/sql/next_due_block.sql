-- `next_due` under `policy`: $1 now, $2 lane, $3 target.
-- Milliseconds to wait, rounded up so a relay that sleeps that long finds the message
-- due; negative when overdue (the caller clamps: GREATEST would turn "nothing to wait
-- for", NULL, into 0). A running lease always counts (its lapse frees the row or its
-- key); a row its key holds back does not, as in the claim, so an idle relay never spins
-- on rows it may not take. Each branch reads one index in order and stops at its first
-- row: the next lease by `lease_idx`, the next pending head by `head_idx` (rows behind a
-- head are not in it), a lapsed claim by `lease_idx`.
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
         ) d
