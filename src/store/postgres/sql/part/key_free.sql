-- `key_free`: whether row `m`'s key lets it be claimed (`claim_block.sql` says how and
-- why). `{{dead_letter}}`: Block's clause (`key_free_dead_letter.sql`), else nothing;
-- `{{skip_to_dead}}`: Skip's full claim's (`skip_to_dead.sql`), else nothing.
(m.ordering_key IS NULL OR (
            NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key
                AND e.status = 'pending' AND e.seq < m.seq){{dead_letter}}
            AND NOT EXISTS (SELECT 1 FROM "public"."outbox_messages" e WHERE e.lane = m.lane AND e.target = m.target AND e.ordering_key = m.ordering_key AND e.status = 'claimed'
                AND ((e.seq < m.seq{{skip_to_dead}}) OR e.lease_expires_at > COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())) OFFSET 0)))
