-- The CTE `successors` of Skip's full claim (`claim_block.sql`): the next row of each key
-- whose head this claim dead-letters.
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
                      AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND {{key_free}}
                    LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
                    FOR UPDATE OF m SKIP LOCKED
                 ),
