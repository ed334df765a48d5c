-- Message `m` as `row::message` reads it (`MESSAGE_COLUMNS`), for `get.sql` and
-- `find_dedupe.sql`.
SELECT m.outbox_id, m.seq, m.lane, m.target, m.payload, m.headers, m.ordering_key,
       m.dedupe_key, m.status, m.attempt_count, m.max_attempts,
       floor(extract(epoch FROM m.available_at) * 1000)::int8 AS available_at,
       m.claimed_by, m.claim_token,
       floor(extract(epoch FROM m.lease_expires_at) * 1000)::int8 AS lease_expires_at,
       m.last_error,
       floor(extract(epoch FROM m.created_at) * 1000)::int8 AS created_at,
       floor(extract(epoch FROM m.updated_at) * 1000)::int8 AS updated_at,
       floor(extract(epoch FROM m.delivered_at) * 1000)::int8 AS delivered_at
FROM "public"."outbox_messages" m
