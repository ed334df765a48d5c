-- Whether the lane `$2`/`$3` has a claim on its last attempt whose lease lapsed
-- (`claim_fast_block.sql`): the one-statement claim's `lapsed_last` and the cycle's
-- `v_lapsed`.
EXISTS (
            SELECT 1 FROM "public"."outbox_messages" l
            WHERE l.lane = $2 AND l.target = $3 AND l.status = 'claimed'
              AND l.attempt_count >= l.max_attempts AND l.lease_expires_at <= COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))
