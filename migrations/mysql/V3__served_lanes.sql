-- outbox-relay MySQL schema migration 3: served lanes, for the prefix outbox.
-- The relay embeds this file and runs these very statements.
-- MySQL commits each DDL statement on its own: every statement is idempotent
-- and the version is recorded last, so a run cut short can be run again.
SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'), 30);
CREATE TABLE IF NOT EXISTS `outbox_migrations` (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `outbox_served_lanes` (
    lane VARBINARY(255) NOT NULL,
    target VARBINARY(255) NOT NULL,
    served_until BIGINT NOT NULL,
    PRIMARY KEY (lane, target)
) ENGINE = InnoDB;
INSERT INTO `outbox_migrations` (version, applied_at) VALUES (3, UNIX_TIMESTAMP() * 1000);
SELECT RELEASE_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'));
