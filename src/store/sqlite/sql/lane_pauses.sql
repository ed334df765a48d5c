-- Every paused (lane, target).
SELECT lane, target, paused_by, reason, paused_at FROM outbox_lane_control
    ORDER BY lane, target
