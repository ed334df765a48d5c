-- Pauses a (lane, target) for every relay: binds lane, target, paused_by, reason,
-- paused_at, then paused_by, reason, paused_at again. The new values are bound twice, not
-- read back with VALUES(col): MySQL deprecated that and MariaDB has no row alias, so this
-- is the text both servers accept.
INSERT INTO `outbox_lane_control` (lane, target, paused_by, reason, paused_at)
VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE paused_by = ?, reason = ?, paused_at = ?
