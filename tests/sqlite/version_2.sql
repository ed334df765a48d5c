CREATE TABLE outbox (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            outbox_id TEXT NOT NULL UNIQUE,
            lane TEXT NOT NULL,
            target TEXT NOT NULL,
            payload TEXT NOT NULL,
            headers TEXT NOT NULL,
            ordering_key TEXT,
            dedupe_key TEXT,
            status TEXT NOT NULL
                CHECK (status IN ('pending', 'claimed', 'delivered', 'dead_letter')),
            attempt_count INTEGER NOT NULL,
            max_attempts INTEGER NOT NULL,
            available_at INTEGER NOT NULL,
            claimed_by TEXT,
            claim_token TEXT,
            lease_expires_at INTEGER,
            last_error TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            delivered_at INTEGER
        , key_head INTEGER) STRICT;
CREATE UNIQUE INDEX outbox_dedupe
            ON outbox (lane, target, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX outbox_key_order
            ON outbox (lane, target, ordering_key, status) WHERE ordering_key IS NOT NULL;
CREATE INDEX outbox_finished
            ON outbox (updated_at) WHERE status IN ('delivered', 'dead_letter');
CREATE INDEX outbox_ready
        ON outbox (lane, target, available_at) WHERE status = 'pending' AND key_head = 1;
CREATE INDEX outbox_leases
        ON outbox (lane, target, lease_expires_at) WHERE status = 'claimed';
CREATE INDEX outbox_pending ON outbox (lane, target) WHERE status = 'pending';
CREATE INDEX outbox_dead_keys
        ON outbox (lane, target, ordering_key)
        WHERE status = 'dead_letter' AND ordering_key IS NOT NULL;
CREATE TRIGGER outbox_head_on_insert AFTER INSERT ON outbox
    BEGIN
        UPDATE outbox SET key_head = 1 WHERE seq = new.seq AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
    END;
CREATE TRIGGER outbox_head_on_return AFTER UPDATE OF status ON outbox
        WHEN old.status NOT IN ('pending', 'claimed') AND new.status IN ('pending', 'claimed')
    BEGIN
        UPDATE outbox SET key_head = NULL
            WHERE new.ordering_key IS NOT NULL AND key_head = 1
                AND seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'pending'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'claimed'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1))) AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
        UPDATE outbox SET key_head = 1 WHERE seq = new.seq AND (new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq));
    END;
CREATE TRIGGER outbox_head_on_leave AFTER UPDATE OF status ON outbox
        WHEN old.key_head = 1 AND new.status NOT IN ('pending', 'claimed')
    BEGIN
        UPDATE outbox SET key_head = NULL WHERE seq = new.seq;
        UPDATE outbox SET key_head = 1
            WHERE new.ordering_key IS NOT NULL AND seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'pending'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status = 'claimed'
            AND e.seq > new.seq ORDER BY e.seq LIMIT 1)));
    END;
CREATE TRIGGER outbox_head_on_delete AFTER DELETE ON outbox
        WHEN old.key_head = 1 AND old.ordering_key IS NOT NULL
    BEGIN
        UPDATE outbox SET key_head = 1 WHERE seq = (SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = old.lane AND e.target = old.target
            AND e.ordering_key = old.ordering_key AND e.status = 'pending'
            AND e.seq > old.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM outbox e INDEXED BY outbox_key_order
            WHERE e.lane = old.lane AND e.target = old.target
            AND e.ordering_key = old.ordering_key AND e.status = 'claimed'
            AND e.seq > old.seq ORDER BY e.seq LIMIT 1)));
    END;
CREATE TABLE outbox_counts (
        lane TEXT NOT NULL,
        target TEXT NOT NULL,
        status TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (lane, target, status)
    ) WITHOUT ROWID, STRICT;
CREATE TRIGGER outbox_count_insert AFTER INSERT ON outbox
    BEGIN
        INSERT INTO outbox_counts (lane, target, status, n) VALUES (new.lane, new.target, new.status, 1)
            ON CONFLICT (lane, target, status) DO UPDATE SET n = n + 1;
    END;
CREATE TRIGGER outbox_count_status AFTER UPDATE OF status ON outbox
        WHEN old.status <> new.status
    BEGIN
        UPDATE outbox_counts SET n = n - 1
            WHERE lane = old.lane AND target = old.target AND status = old.status;
        INSERT INTO outbox_counts (lane, target, status, n) VALUES (new.lane, new.target, new.status, 1)
            ON CONFLICT (lane, target, status) DO UPDATE SET n = n + 1;
    END;
CREATE TRIGGER outbox_count_delete AFTER DELETE ON outbox
    BEGIN
        UPDATE outbox_counts SET n = n - 1
            WHERE lane = old.lane AND target = old.target AND status = old.status;
    END;
