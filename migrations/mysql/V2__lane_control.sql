-- outbox-relay MySQL schema migration 2: lane control, for the prefix outbox.
-- The relay embeds this file and runs these very statements.
-- MySQL commits each DDL statement on its own: every statement is idempotent
-- and the version is recorded last, so a run cut short can be run again.
SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'), 30);
CREATE TABLE IF NOT EXISTS `outbox_migrations` (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL) ENGINE = InnoDB;
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
