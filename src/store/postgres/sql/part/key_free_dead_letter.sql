-- `key_free` under Block: an earlier dead letter holds the key.
 AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'dead_letter' AND e.seq < m.seq)
