-- `key_runs` under Block: the run stops before the key's first dead letter after the head.
 AND q.seq < coalesce((
                SELECT x.seq FROM "public"."outbox_messages" x
                WHERE x.lane = $2 AND x.target = $3 AND x.ordering_key = h.ordering_key
                  AND x.status = 'dead_letter' AND x.seq > h.seq
                ORDER BY x.seq LIMIT 1), 9223372036854775807)
