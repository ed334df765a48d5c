-- Every pause in force.
SELECT lane, target, paused_by, reason,
       floor(extract(epoch FROM paused_at) * 1000)::int8 AS paused_at
FROM "public"."outbox_lane_control"
ORDER BY lane, target
