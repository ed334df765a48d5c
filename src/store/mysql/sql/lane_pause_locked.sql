-- The pause of a (lane, target), locked until it is lifted: binds lane, target.
SELECT lane, target, paused_by, reason, paused_at FROM `outbox_lane_control`
WHERE lane = ? AND target = ? FOR UPDATE
