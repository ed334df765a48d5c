-- outbox-relay MySQL schema migration 3: served lanes.
-- Written for the table prefix `outbox` and run as it is: see V1's header.
SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'), 30);
CREATE TABLE IF NOT EXISTS `outbox_migrations` (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL) ENGINE = InnoDB;
-- Until when a running relay serves each (lane, target) (src/store/served.rs), in
-- milliseconds on the store's clock; names as the messages table has them.
CREATE TABLE IF NOT EXISTS `outbox_served_lanes` (
    lane VARBINARY(255) NOT NULL,
    target VARBINARY(255) NOT NULL,
    served_until BIGINT NOT NULL,
    PRIMARY KEY (lane, target)
) ENGINE = InnoDB;
INSERT INTO `outbox_migrations` (version, applied_at) VALUES (3, UNIX_TIMESTAMP() * 1000);
SELECT RELEASE_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'));
