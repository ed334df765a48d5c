-- $1 lane, $2 target, $3 channel, $4 the lane-control payload: lifts the lane's pause, if
-- any, and notifies the store's channel (as `pause_lane.sql`).
WITH lifted AS (
    DELETE FROM "public"."outbox_lane_control" WHERE lane = $1 AND target = $2
    RETURNING lane, target, paused_by, reason,
              floor(extract(epoch FROM paused_at) * 1000)::int8 AS paused_at
)
SELECT lifted.*, pg_notify($3, $4) IS NULL AS notified FROM lifted
