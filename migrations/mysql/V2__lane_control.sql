-- outbox-relay MySQL schema migration 2: lane control.
-- Written for the table prefix `outbox` and run as it is: see V1's header.
SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'), 30);
CREATE TABLE IF NOT EXISTS `outbox_migrations` (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL) ENGINE = InnoDB;
-- One row per (lane, target) paused for every relay on the database.
CREATE TABLE IF NOT EXISTS `outbox_lane_control` (
    lane VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    target VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    paused_by VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    reason TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    paused_at BIGINT NOT NULL,
    PRIMARY KEY (lane, target)
) ENGINE = InnoDB;
INSERT INTO `outbox_migrations` (version, applied_at) VALUES (2, UNIX_TIMESTAMP() * 1000);
SELECT RELEASE_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'));
