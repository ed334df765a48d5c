-- A running relay serves a (lane, target) until a time: binds lane, target, then the time
-- twice. A later time already recorded stays.
INSERT INTO `outbox_served_lanes` (lane, target, served_until) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE served_until = GREATEST(served_until, ?)
