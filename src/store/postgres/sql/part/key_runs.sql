-- The full claim's `{{run}}` of `pending.sql`: the seqs of head `h`'s run, cut at the key's
-- next claimed row (`run_bound`) and under Block at its next dead letter
-- (`{{dead_letter}}`: `key_runs_dead_letter.sql`, else nothing).
e.seq = ANY (ARRAY(
            SELECT q.seq FROM "public"."outbox_messages" q
            WHERE h.ordering_key IS NOT NULL
              AND q.lane = $2 AND q.target = $3
              AND q.ordering_key = h.ordering_key
              AND q.status = 'pending' AND q.seq > h.seq
              AND q.seq < coalesce((SELECT c.seq FROM "public"."outbox_messages" c
                   WHERE c.lane = $2 AND c.target = $3 AND c.ordering_key = h.ordering_key AND c.status = 'claimed' AND c.seq > h.seq
                   ORDER BY c.seq LIMIT 1), 9223372036854775807){{dead_letter}}
            ORDER BY q.seq
            LIMIT $7::int8 - 1))
