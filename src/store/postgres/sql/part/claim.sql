-- The full claim of both policies (`claim_block.sql` says what each part does and why).
-- Under Block `{{key_free_skip_to_dead}}` is `{{key_free}}` and `{{successors}}` is empty;
-- under Skip they are `key_free` with `skip_to_dead.sql` and `successors.sql`.
WITH to_dead AS MATERIALIZED (
            SELECT m.outbox_id, m.seq, m.ordering_key, m.lease_expires_at AS lapsed_at
            FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.attempt_count >= m.max_attempts AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
              AND {{key_free}}
            FOR UPDATE OF m SKIP LOCKED
         ),
         lapsed AS MATERIALIZED (
            SELECT m.outbox_id, 0 AS src, m.lease_expires_at AS due_at, m.seq FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'claimed'
              AND m.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND m.attempt_count < m.max_attempts
              AND {{key_free_skip_to_dead}}
            ORDER BY m.lease_expires_at, m.seq
            LIMIT $4
            FOR UPDATE OF m SKIP LOCKED
         ),
         due AS MATERIALIZED (
            SELECT m.outbox_id, m.available_at AS due_at, m.seq, m.ordering_key FROM "public"."outbox_messages" m
            WHERE m.lane = $2 AND m.target = $3 AND m.status = 'pending' AND m.key_head
              AND m.available_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) AND {{key_free_skip_to_dead}}
            ORDER BY m.available_at, m.seq
            LIMIT greatest($4 - (SELECT count(*) FROM lapsed), 0)
            FOR UPDATE OF m SKIP LOCKED
         ),
         {{successors}}
         {{pending}},
         {{to_claim}},
         dead AS (
            UPDATE "public"."outbox_messages" m SET status = 'dead_letter', last_error = $8, claimed_by = NULL,
                   claim_token = NULL, lease_expires_at = NULL, updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_dead))
            RETURNING m.outbox_id, m.seq, m.ordering_key
         ),
         {{claimed}}
         SELECT dl.dead_ids, dl.dead_keys, c.*
         FROM (SELECT coalesce(array_agg(d.outbox_id ORDER BY x.lapsed_at, x.seq), '{}')
                          AS dead_ids,
                      coalesce(array_agg(DISTINCT d.ordering_key)
                               FILTER (WHERE d.ordering_key IS NOT NULL), '{}') AS dead_keys
               FROM dead d JOIN to_dead x ON x.outbox_id = d.outbox_id) dl
         LEFT JOIN (claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id) ON true
         ORDER BY o.ord
