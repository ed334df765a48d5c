-- The CTE `claimed`: claims the rows of `to_claim` and answers them as `row::message` reads
-- them (`MESSAGE_COLUMNS`).
claimed AS (
            UPDATE "public"."outbox_messages" m SET status = 'claimed', attempt_count = m.attempt_count + 1,
                   claimed_by = $6, claim_token = gen_random_uuid(),
                   lease_expires_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()) + $5::int8 * interval '1 millisecond',
                   updated_at = COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()), key_head = true
            WHERE m.outbox_id = ANY (ARRAY(SELECT outbox_id FROM to_claim))
            RETURNING m.outbox_id, m.seq, m.lane, m.target, m.payload, m.headers, m.ordering_key, m.dedupe_key, m.status, m.attempt_count, m.max_attempts, floor(extract(epoch FROM m.available_at) * 1000)::int8 AS available_at, m.claimed_by, m.claim_token, floor(extract(epoch FROM m.lease_expires_at) * 1000)::int8 AS lease_expires_at, m.last_error, floor(extract(epoch FROM m.created_at) * 1000)::int8 AS created_at, floor(extract(epoch FROM m.updated_at) * 1000)::int8 AS updated_at, floor(extract(epoch FROM m.delivered_at) * 1000)::int8 AS delivered_at
         )
