-- Lifts the pause of a (lane, target), returning it. Binds: ?1 lane, ?2 target.
DELETE FROM outbox_lane_control WHERE lane = ?1 AND target = ?2
    RETURNING lane, target, paused_by, reason, paused_at
