-- `head_runs` under Block: the probe of `dead_idx` for the key's first dead letter.
 CROSS JOIN (
                    SELECT (SELECT e.seq FROM "public"."outbox_messages" e
                            WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter'
                            ORDER BY e.seq LIMIT 1) AS first) d
