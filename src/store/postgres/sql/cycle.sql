
#variable_conflict use_column
DECLARE
    v_acked int8[] := '{}';
    v_lanes text[];
    v_targets text[];
    v_keys text[];
    v_lapsed boolean;
    v_claimed int8 := 0;
    v_due int8;
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF cardinality(p_ids) > 0 AND p_delete THEN
        WITH a AS ({{ack_delete}})
        {{acked}}
    ELSIF cardinality(p_ids) > 0 THEN
        WITH a AS ({{ack}})
        {{acked}}
    END IF;
    IF cardinality(p_ids) > 0 THEN
        IF cardinality(v_keys) > 0 THEN
            PERFORM pg_advisory_xact_lock(458410234, s.k)
    FROM (SELECT DISTINCT hashtext(u.lane || chr(31) || u.target || chr(31) || u.ordering_key) AS k
          FROM unnest(v_lanes, v_targets, v_keys) AS u(lane, target, ordering_key)
          WHERE u.ordering_key IS NOT NULL
          ORDER BY 1) s;
    UPDATE "public"."outbox_messages" m SET key_head = true
    FROM (SELECT DISTINCT u.lane, u.target, u.ordering_key
          FROM unnest(v_lanes, v_targets, v_keys) AS u(lane, target, ordering_key)
          WHERE u.ordering_key IS NOT NULL) u
    CROSS JOIN LATERAL (
        SELECT e.outbox_id, e.seq FROM "public"."outbox_messages" e
                  WHERE e.lane = u.lane AND e.target = u.target AND e.ordering_key = u.ordering_key AND e.status = 'pending'
                  ORDER BY e.seq LIMIT 1) h
    WHERE m.outbox_id = h.outbox_id AND NOT m.key_head;
        END IF;
    END IF;
    v_lapsed := {{lapsed_last}};
    IF NOT v_lapsed THEN
        IF p_block THEN
            RETURN QUERY WITH {{head_runs_block}}
             SELECT NULL::int8[], NULL::boolean, NULL::int8, c.*
             FROM claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id
             ORDER BY o.ord;
        ELSE
            RETURN QUERY WITH {{head_runs_skip}}
             SELECT NULL::int8[], NULL::boolean, NULL::int8, c.*
             FROM claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id
             ORDER BY o.ord;
        END IF;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        IF v_claimed = 0 THEN
            IF p_block THEN
                v_due := ({{next_due_block}});
            ELSE
                v_due := ({{next_due_skip}});
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT v_acked, v_lapsed, v_due, NULL::uuid, NULL::int8, NULL::text, NULL::text, NULL::json, NULL::jsonb, NULL::text, NULL::text, NULL::text, NULL::int8, NULL::int8, NULL::int8, NULL::text, NULL::uuid, NULL::int8, NULL::text, NULL::int8, NULL::int8, NULL::int8;
END
