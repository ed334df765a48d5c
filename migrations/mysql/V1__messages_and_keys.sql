-- outbox-relay MySQL schema migration 1: messages and keys, for the prefix outbox.
-- The relay embeds this file and runs these very statements.
-- MySQL commits each DDL statement on its own: every statement is idempotent
-- and the version is recorded last, so a run cut short can be run again.
SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'), 30);
CREATE TABLE IF NOT EXISTS `outbox_migrations` (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `outbox_messages` (
    seq BIGINT NOT NULL AUTO_INCREMENT,
    outbox_id BINARY(16) NOT NULL,
    lane VARBINARY(255) NOT NULL,
    target VARBINARY(255) NOT NULL,
    payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    headers LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    ordering_key VARBINARY(1024) NULL,
    dedupe_key VARBINARY(1024) NULL,
    status ENUM('pending', 'claimed', 'delivered', 'dead_letter') NOT NULL,
    attempt_count INT UNSIGNED NOT NULL DEFAULT 0,
    max_attempts INT UNSIGNED NOT NULL,
    available_at BIGINT NOT NULL,
    claimed_by VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    claim_token BINARY(16) NULL,
    lease_expires_at BIGINT NULL,
    last_error TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    delivered_at BIGINT NULL,
    key_head TINYINT NOT NULL DEFAULT 0,
    ready_at BIGINT GENERATED ALWAYS AS (IF(status = 'pending'
        AND (ordering_key IS NULL OR key_head = 1), available_at, NULL)) STORED,
    lapse_at BIGINT GENERATED ALWAYS AS (IF(status = 'claimed', lease_expires_at, NULL)) STORED,
    PRIMARY KEY (seq),
    UNIQUE KEY outbox_id (outbox_id),
    UNIQUE KEY dedupe (lane, target, dedupe_key),
    KEY ready (lane, target, ready_at),
    KEY lapse (lane, target, lapse_at),
    KEY by_key (lane, target, ordering_key, status),
    KEY pending (lane, target, status, available_at, created_at),
    KEY finished (status, updated_at)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS `outbox_keys` (
    lane VARBINARY(255) NOT NULL,
    target VARBINARY(255) NOT NULL,
    ordering_key VARBINARY(1024) NOT NULL,
    head_seq BIGINT NULL,
    PRIMARY KEY (lane, target, ordering_key)
) ENGINE = InnoDB;
INSERT INTO `outbox_migrations` (version, applied_at) VALUES (1, UNIX_TIMESTAMP() * 1000);
SELECT RELEASE_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'));
