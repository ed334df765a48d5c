-- $1 ids: clears the head mark of those rows still pending, marked and behind an earlier
-- live row of their key (in a snapshot taken after `sweep_find.sql` took the key locks);
-- answers how many.
UPDATE "public"."outbox_messages" m SET key_head = false
WHERE m.outbox_id = ANY($1::uuid[]) AND m.status = 'pending' AND m.key_head
  AND (EXISTS (SELECT 1 FROM "public"."outbox_messages" e
               WHERE e.lane = m.lane AND e.target = m.target
                 AND e.ordering_key = m.ordering_key AND e.status = 'pending'
                 AND e.seq < m.seq)
       OR EXISTS (SELECT 1 FROM "public"."outbox_messages" e
                  WHERE e.lane = m.lane AND e.target = m.target
                    AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                    AND e.seq < m.seq))
