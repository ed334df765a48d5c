-- $1 now, $2 lane, $3 target, $4 paused by, $5 reason, $6 channel, $7 the lane-control
-- payload: pauses the lane (or renews its pause) and notifies the store's channel, which
-- goes out with the commit, so every relay listening reads the pauses at once instead of
-- at its next poll.
WITH paused AS (
    INSERT INTO "public"."outbox_lane_control" AS c (lane, target, paused_by, reason, paused_at)
    VALUES ($2, $3, $4, $5,
            COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp()))
    ON CONFLICT (lane, target) DO UPDATE SET paused_by = excluded.paused_by,
        reason = excluded.reason, paused_at = excluded.paused_at
    RETURNING lane, target, paused_by, reason,
              floor(extract(epoch FROM paused_at) * 1000)::int8 AS paused_at
)
SELECT paused.*, pg_notify($6, $7) IS NULL AS notified FROM paused
