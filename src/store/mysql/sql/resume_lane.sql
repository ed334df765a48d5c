-- Lifts the pause of a (lane, target): binds lane, target.
DELETE FROM `outbox_lane_control` WHERE lane = ? AND target = ?
