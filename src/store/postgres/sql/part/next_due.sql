-- `next_due` of both policies (`next_due_block.sql`), of lane `{{lane}}` and target
-- `{{target}}` (`$2`, `$3`; `q.lane`, `q.target` in `lanes_next_due.sql`).
SELECT ceil(extract(epoch FROM (min(due) - COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))) * 1000)::int8
         FROM (
            (SELECT m.lease_expires_at AS due FROM "public"."outbox_messages" m
             WHERE m.lane = {{lane}} AND m.target = {{target}} AND m.status = 'claimed'
               AND m.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
             ORDER BY m.lease_expires_at LIMIT 1)
            UNION ALL
            (SELECT m.available_at FROM "public"."outbox_messages" m
             WHERE m.lane = {{lane}} AND m.target = {{target}} AND m.status = 'pending' AND m.key_head
               AND {{key_free}}
             ORDER BY m.available_at, m.seq LIMIT 1)
            UNION ALL
            (SELECT m.lease_expires_at FROM "public"."outbox_messages" m
             WHERE m.lane = {{lane}} AND m.target = {{target}} AND m.status = 'claimed'
               AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND {{key_free}}
             ORDER BY m.lease_expires_at, m.seq LIMIT 1)
         ) d
