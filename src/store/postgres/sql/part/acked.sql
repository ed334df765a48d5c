-- The cycle's answer of its ack (`a`, `ack.sql` or `ack_delete.sql`): the ordinals of the
-- acks applied, and the keys they left, for the head promotion that follows.
SELECT coalesce(array_agg(a.ord), '{}'),
               array_agg(a.lane) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.target) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.ordering_key) FILTER (WHERE a.ordering_key IS NOT NULL)
        INTO v_acked, v_lanes, v_targets, v_keys
        FROM a;
