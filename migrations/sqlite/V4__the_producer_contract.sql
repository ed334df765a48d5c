-- outbox-relay SQLite schema migration 4: the producer contract.
-- Written for the default table, outbox (no table prefix): `outbox-relay migrate --print-sql`
-- prints the statements for yours. Run in order, each once: the version is recorded first,
-- so a second run fails on it, changing nothing.
--
-- A service in any language enqueues with a plain INSERT into the view outbox_enqueue, in
-- its own transaction; the view's trigger validates the row as the Rust API does (same
-- fields, same rules and limits; SQLite 3.40's RAISE takes only a fixed message, so a
-- message names the field and the rule, not the value), drops a duplicate of a dedupe key
-- with the same content (RAISE(IGNORE): no row, no error), refuses one with other content,
-- and writes the row; the table's own triggers mark key heads and keep the counts. A relay
-- in another process picks it up at its next poll (max_poll_interval): SQLite has no
-- notifications between processes.
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
INSERT INTO outbox_migrations (version, applied_at) VALUES (4, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
CREATE VIEW IF NOT EXISTS outbox_enqueue
        (lane, target, payload, headers, ordering_key, dedupe_key, delay_ms, max_attempts)
        AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;
CREATE TRIGGER IF NOT EXISTS outbox_enqueue_insert INSTEAD OF INSERT ON outbox_enqueue
    BEGIN
        SELECT RAISE(ABORT, 'invalid lane: is required')
            WHERE trim(coalesce(new.lane, '')) = '';
        SELECT RAISE(ABORT, 'invalid lane: is over the limit of 64 characters')
            WHERE length(CAST(new.lane AS BLOB)) > 64;
        SELECT RAISE(ABORT, 'invalid lane: use only letters, digits, ''_'', ''-'', ''.'', '':''')
            WHERE new.lane GLOB '*[^A-Za-z0-9_.:-]*';
        SELECT RAISE(ABORT, 'invalid target: is required')
            WHERE trim(coalesce(new.target, '')) = '';
        SELECT RAISE(ABORT, 'invalid target: is over the limit of 64 characters')
            WHERE length(CAST(new.target AS BLOB)) > 64;
        SELECT RAISE(ABORT, 'invalid target: use only letters, digits, ''_'', ''-'', ''.'', '':''')
            WHERE new.target GLOB '*[^A-Za-z0-9_.:-]*';
        SELECT RAISE(ABORT, 'invalid ordering_key: must not be blank')
            WHERE new.ordering_key IS NOT NULL AND trim(new.ordering_key) = '';
        SELECT RAISE(ABORT, 'invalid ordering_key: is over the limit of 256 bytes')
            WHERE length(CAST(new.ordering_key AS BLOB)) > 256;
        SELECT RAISE(ABORT, 'invalid ordering_key: contains a control character')
            WHERE new.ordering_key GLOB ('*[' || char(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127) || ']*');
        SELECT RAISE(ABORT, 'invalid dedupe_key: must not be blank')
            WHERE new.dedupe_key IS NOT NULL AND trim(new.dedupe_key) = '';
        SELECT RAISE(ABORT, 'invalid dedupe_key: is over the limit of 256 bytes')
            WHERE length(CAST(new.dedupe_key AS BLOB)) > 256;
        SELECT RAISE(ABORT, 'invalid dedupe_key: contains a control character')
            WHERE new.dedupe_key GLOB ('*[' || char(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127) || ']*');
        SELECT RAISE(ABORT, 'invalid max_attempts: must be greater than zero')
            WHERE coalesce(new.max_attempts, 5) <= 0;
        SELECT RAISE(ABORT, 'invalid max_attempts: is over the limit of 4294967295')
            WHERE coalesce(new.max_attempts, 5) > 4294967295;
        SELECT RAISE(ABORT, 'invalid delay: must not be negative')
            WHERE coalesce(new.delay_ms, 0) < 0;
        SELECT RAISE(ABORT, 'invalid headers: must be a JSON object of strings')
            WHERE new.headers IS NOT NULL AND (NOT json_valid(new.headers)
                OR json_type(new.headers) <> 'object'
                OR EXISTS (SELECT 1 FROM json_each(new.headers) WHERE type <> 'text'));
        SELECT RAISE(ABORT, 'invalid headers: over the limit of 64')
            WHERE (SELECT count(*) FROM json_each(coalesce(new.headers, json_object()))) > 64;
        SELECT RAISE(ABORT, 'invalid headers: a header name is empty, over 128 characters or not an HTTP token')
            WHERE EXISTS (SELECT 1 FROM json_each(coalesce(new.headers, json_object()))
                WHERE key = '' OR length(CAST(key AS BLOB)) > 128
                    OR key GLOB '*[^A-Za-z0-9!#$%&''*+.^_`|~-]*');
        SELECT RAISE(ABORT, 'invalid headers: a header value is over 8192 bytes or contains a line break')
            WHERE EXISTS (SELECT 1 FROM json_each(coalesce(new.headers, json_object()))
                WHERE length(CAST(value AS BLOB)) > 8192
                    OR instr(value, char(10)) > 0 OR instr(value, char(13)) > 0);
        SELECT RAISE(ABORT, 'invalid payload: is required') WHERE new.payload IS NULL;
        SELECT RAISE(ABORT, 'invalid payload: is not JSON') WHERE NOT json_valid(new.payload);
        SELECT RAISE(ABORT, 'invalid payload: contains a NUL character (\u0000), which PostgreSQL cannot store; no store accepts it')
            WHERE instr(new.payload, '\u0000') > 0;
        SELECT RAISE(ABORT, 'invalid payload: is over the limit of 1048576 bytes')
            WHERE length(CAST(new.payload AS BLOB)) > 1048576;
        SELECT RAISE(ABORT, 'invalid headers: make the message over the limit of 1048576 bytes')
            WHERE length(CAST(new.payload AS BLOB)) + coalesce((SELECT sum(
                length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)))
                FROM json_each(coalesce(new.headers, json_object()))), 0) > 1048576;
        SELECT RAISE(IGNORE) WHERE new.dedupe_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM outbox m WHERE m.lane = new.lane AND m.target = new.target
                AND m.dedupe_key = new.dedupe_key AND m.payload = new.payload
                AND m.headers = json(coalesce(new.headers, json_object()))
                AND m.ordering_key IS new.ordering_key
                AND m.max_attempts = coalesce(new.max_attempts, 5));
        SELECT RAISE(ABORT, 'conflict: the dedupe_key in this lane and target is already used by a message with different content')
            WHERE new.dedupe_key IS NOT NULL AND EXISTS (
                SELECT 1 FROM outbox m WHERE m.lane = new.lane AND m.target = new.target
                    AND m.dedupe_key = new.dedupe_key);
        INSERT INTO outbox (outbox_id, lane, target, payload, headers, ordering_key, dedupe_key,
                status, attempt_count, max_attempts, available_at, created_at, updated_at)
            VALUES ((lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))), new.lane, new.target, new.payload,
                json(coalesce(new.headers, json_object())), new.ordering_key, new.dedupe_key,
                'pending', 0, coalesce(new.max_attempts, 5),
                CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + coalesce(new.delay_ms, 0), CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER), CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER));
    END;
COMMIT;
