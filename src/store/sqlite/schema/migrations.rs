//! The embedded migrations, oldest first: the table, its indexes and the triggers that keep
//! its key heads and counts. Append, never edit: a file records the versions it has run.

use super::LIVE;

/// One schema change: a version and the statements that make it. A migration runs in one
/// transaction with the row that records it, so a crash leaves it wholly applied or not at
/// all; most statements are idempotent (`IF NOT EXISTS`) besides.
struct Migration {
    version: i64,
    statements: &'static [&'static str],
}

/// The schema, oldest change first. `{t}` is the table name. Append, never edit.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        statements: &[
            // seq is the strict total order of enqueues. AUTOINCREMENT keeps a purged tail's
            // numbers from being reused, so list cursors and per-key order never go backwards.
            // STRICT makes SQLite refuse a value of the wrong type instead of storing it.
            "CREATE TABLE IF NOT EXISTS {t} (
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
        ) STRICT",
            "CREATE UNIQUE INDEX IF NOT EXISTS {t}_dedupe
            ON {t} (lane, target, dedupe_key) WHERE dedupe_key IS NOT NULL",
            // Claimable rows only, so a long delivered or dead tail never slows a claim. SQLite
            // uses a partial index only when the query repeats its WHERE term word for word,
            // which is why the claim statements below carry `status IN ('pending', 'claimed')`.
            "CREATE INDEX IF NOT EXISTS {t}_claimable
            ON {t} (lane, target, status, available_at) WHERE status IN ('pending', 'claimed')",
            // The per-key head rule asks "is an earlier row of this key pending, claimed or
            // dead?": one range probe per status here (the rowid, seq, ends every entry).
            "CREATE INDEX IF NOT EXISTS {t}_key_order
            ON {t} (lane, target, ordering_key, status) WHERE ordering_key IS NOT NULL",
            // Purge finds finished rows by age without walking live ones.
            "CREATE INDEX IF NOT EXISTS {t}_finished
            ON {t} (updated_at) WHERE status IN ('delivered', 'dead_letter')",
        ],
    },
    Migration {
        version: 2,
        statements: MIGRATION_2,
    },
    Migration {
        version: 3,
        statements: MIGRATION_3,
    },
    Migration {
        version: 4,
        statements: MIGRATION_4,
    },
    Migration {
        version: 5,
        statements: &[LANE_CONTROL_TABLE],
    },
    Migration {
        version: 6,
        statements: MIGRATION_6,
    },
    Migration {
        version: 7,
        statements: &[SERVED_LANES_TABLE],
    },
];

/// Until when a running relay serves each (lane, target) (`store/served.rs`), in
/// milliseconds since the epoch on the store's clock.
const SERVED_LANES_TABLE: &str = "CREATE TABLE IF NOT EXISTS {t}_served_lanes (
            lane TEXT NOT NULL,
            target TEXT NOT NULL,
            served_until INTEGER NOT NULL,
            PRIMARY KEY (lane, target)
        ) STRICT";

/// The indexes the listing (`read.rs`'s `list_sql`) reads, so a page of a lane costs the
/// page and not the lane, whatever its status mix: the rowid, seq, ends every entry, so
/// each (lane, target, status) and each (lane, target, key, status) is a range in enqueue
/// order, and a page of every status merges the ranges. Their predicate `seq > 0` holds for
/// every row (AUTOINCREMENT counts from 1); SQLite uses a partial index only where a query
/// repeats its terms, and only the listing states it, so no claim or key probe of the relay
/// is planned on these instead of the narrow indexes it was built for. Each build reads the
/// table once under the write lock: enqueues wait for it.
const MIGRATION_6: &[&str] = &[
    "CREATE INDEX IF NOT EXISTS {t}_list ON {t} (lane, target, status) WHERE seq > 0",
    "CREATE INDEX IF NOT EXISTS {t}_list_key
        ON {t} (lane, target, ordering_key, status)
        WHERE seq > 0 AND ordering_key IS NOT NULL",
];

/// Fleet-wide lane control (`store/lane_control.rs`): one row per paused (lane, target),
/// with who paused it, why and when (milliseconds since the epoch, the store's clock).
const LANE_CONTROL_TABLE: &str = "CREATE TABLE IF NOT EXISTS {t}_lane_control (
            lane TEXT NOT NULL,
            target TEXT NOT NULL,
            paused_by TEXT NOT NULL,
            reason TEXT,
            paused_at INTEGER NOT NULL,
            PRIMARY KEY (lane, target)
        ) STRICT";

/// Claims that cost what they return, whatever the backlog. `key_head` marks the first live (pending
/// or claimed) row of each ordering key, and every row without a key while live; triggers
/// keep it true on every write, whoever makes it. The claim reads the two partial indexes
/// below in order and stops at its limit: a key's later rows are in neither, so a hot key
/// costs a claim one entry.
const MIGRATION_2: &[&str] = &[
    "ALTER TABLE {t} ADD COLUMN key_head INTEGER",
    // Backfill: one probe per live row (an earlier live row of its key?).
    "UPDATE {t} SET key_head = 1
        WHERE status IN ('pending', 'claimed') AND (ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = {t}.lane AND e.target = {t}.target
                AND e.ordering_key = {t}.ordering_key
                AND e.status IN ('pending', 'claimed') AND e.seq < {t}.seq))",
    // Due pending heads, in claim order (the rowid, seq, ends every entry).
    "CREATE INDEX IF NOT EXISTS {t}_ready
        ON {t} (lane, target, available_at) WHERE status = 'pending' AND key_head = 1",
    // Claims by lapse: lapsed ones first in a claim, the next lapse for next_due.
    "CREATE INDEX IF NOT EXISTS {t}_leases
        ON {t} (lane, target, lease_expires_at) WHERE status = 'claimed'",
    // Pending rows in enqueue order: the oldest due one for stats.
    "CREATE INDEX IF NOT EXISTS {t}_pending ON {t} (lane, target) WHERE status = 'pending'",
    // Keys with dead letters: the blocked keys for stats.
    "CREATE INDEX IF NOT EXISTS {t}_dead_keys
        ON {t} (lane, target, ordering_key)
        WHERE status = 'dead_letter' AND ordering_key IS NOT NULL",
    // The claim no longer reads it; one index fewer to write.
    "DROP INDEX IF EXISTS {t}_claimable",
    // A row becomes its key's head if no live row of the key came before it. Inserts and
    // requeues (a dead letter back to pending) both arrive here.
    "CREATE TRIGGER IF NOT EXISTS {t}_head_on_insert AFTER INSERT ON {t}
    BEGIN
        UPDATE {t} SET key_head = 1 WHERE seq = new.seq AND {no_live_before_new};
    END",
    "CREATE TRIGGER IF NOT EXISTS {t}_head_on_return AFTER UPDATE OF status ON {t}
        WHEN old.status NOT IN ('pending', 'claimed') AND new.status IN ('pending', 'claimed')
    BEGIN
        UPDATE {t} SET key_head = NULL
            WHERE new.ordering_key IS NOT NULL AND key_head = 1
                AND seq = {first_live_after_new} AND {no_live_before_new};
        UPDATE {t} SET key_head = 1 WHERE seq = new.seq AND {no_live_before_new};
    END",
    // A head that leaves (delivered, dead) hands the mark to its key's next live row.
    "CREATE TRIGGER IF NOT EXISTS {t}_head_on_leave AFTER UPDATE OF status ON {t}
        WHEN old.key_head = 1 AND new.status NOT IN ('pending', 'claimed')
    BEGIN
        UPDATE {t} SET key_head = NULL WHERE seq = new.seq;
        UPDATE {t} SET key_head = 1
            WHERE new.ordering_key IS NOT NULL AND seq = {first_live_after_new};
    END",
    "CREATE TRIGGER IF NOT EXISTS {t}_head_on_delete AFTER DELETE ON {t}
        WHEN old.key_head = 1 AND old.ordering_key IS NOT NULL
    BEGIN
        UPDATE {t} SET key_head = 1 WHERE seq = {first_live_after_old};
    END",
    // Counts per (lane, target, status), so stats read a few rows, not the lane.
    "CREATE TABLE IF NOT EXISTS {t}_counts (
        lane TEXT NOT NULL,
        target TEXT NOT NULL,
        status TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (lane, target, status)
    ) WITHOUT ROWID, STRICT",
    "INSERT INTO {t}_counts (lane, target, status, n)
        SELECT lane, target, status, COUNT(*) FROM {t} WHERE true GROUP BY lane, target, status
        ON CONFLICT (lane, target, status) DO UPDATE SET n = excluded.n",
    "CREATE TRIGGER IF NOT EXISTS {t}_count_insert AFTER INSERT ON {t}
    BEGIN
        INSERT INTO {t}_counts (lane, target, status, n) VALUES (new.lane, new.target, new.status, 1)
            ON CONFLICT (lane, target, status) DO UPDATE SET n = n + 1;
    END",
    "CREATE TRIGGER IF NOT EXISTS {t}_count_status AFTER UPDATE OF status ON {t}
        WHEN old.status <> new.status
    BEGIN
        UPDATE {t}_counts SET n = n - 1
            WHERE lane = old.lane AND target = old.target AND status = old.status;
        INSERT INTO {t}_counts (lane, target, status, n) VALUES (new.lane, new.target, new.status, 1)
            ON CONFLICT (lane, target, status) DO UPDATE SET n = n + 1;
    END",
    "CREATE TRIGGER IF NOT EXISTS {t}_count_delete AFTER DELETE ON {t}
    BEGIN
        UPDATE {t}_counts SET n = n - 1
            WHERE lane = old.lane AND target = old.target AND status = old.status;
    END",
];

/// The first live row of `{row}`'s key after it: two index probes, one per live status
/// (a `MIN` over `status IN (...)` would read the key's whole queue).
const FIRST_LIVE_AFTER: &str = "(SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = {row}.lane AND e.target = {row}.target
            AND e.ordering_key = {row}.ordering_key AND e.status = 'pending'
            AND e.seq > {row}.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = {row}.lane AND e.target = {row}.target
            AND e.ordering_key = {row}.ordering_key AND e.status = 'claimed'
            AND e.seq > {row}.seq ORDER BY e.seq LIMIT 1)))";

/// `new` has no key, or no live row of its key comes before it.
const NO_LIVE_BEFORE_NEW: &str = "(new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.status IN ('pending', 'claimed')
            AND e.seq < new.seq))";

/// A key index of live rows only, so that it stays the size of the backlog. `{t}_key_order` held every keyed row, delivered
/// ones too: each ack moved an entry inside it and it grew with history. `{t}_key_live`
/// holds only pending and claimed rows, so an ack removes its entry and the index stays
/// the size of the backlog; the dead-letter probes read `{t}_dead_keys` instead. The
/// migration-2 triggers name `{t}_key_order`, so they are re-created over the new index
/// before it is dropped.
const MIGRATION_3: &[&str] = &[
    // SQLite uses it only where a query repeats `status IN ('pending', 'claimed')` word for
    // word (see `LIVE`): every probe below does.
    "CREATE INDEX IF NOT EXISTS {t}_key_live
        ON {t} (lane, target, ordering_key, status)
        WHERE ordering_key IS NOT NULL AND status IN ('pending', 'claimed')",
    "DROP TRIGGER IF EXISTS {t}_head_on_insert",
    "DROP TRIGGER IF EXISTS {t}_head_on_return",
    "DROP TRIGGER IF EXISTS {t}_head_on_leave",
    "DROP TRIGGER IF EXISTS {t}_head_on_delete",
    // The migration-2 triggers, word for word but for their probes.
    "CREATE TRIGGER {t}_head_on_insert AFTER INSERT ON {t}
    BEGIN
        UPDATE {t} SET key_head = 1 WHERE seq = new.seq AND {no_live_before_new_3};
    END",
    "CREATE TRIGGER {t}_head_on_return AFTER UPDATE OF status ON {t}
        WHEN old.status NOT IN ('pending', 'claimed') AND new.status IN ('pending', 'claimed')
    BEGIN
        UPDATE {t} SET key_head = NULL
            WHERE new.ordering_key IS NOT NULL AND key_head = 1
                AND seq = {first_live_after_new_3} AND {no_live_before_new_3};
        UPDATE {t} SET key_head = 1 WHERE seq = new.seq AND {no_live_before_new_3};
    END",
    "CREATE TRIGGER {t}_head_on_leave AFTER UPDATE OF status ON {t}
        WHEN old.key_head = 1 AND new.status NOT IN ('pending', 'claimed')
    BEGIN
        UPDATE {t} SET key_head = NULL WHERE seq = new.seq;
        UPDATE {t} SET key_head = 1
            WHERE new.ordering_key IS NOT NULL AND seq = {first_live_after_new_3};
    END",
    "CREATE TRIGGER {t}_head_on_delete AFTER DELETE ON {t}
        WHEN old.key_head = 1 AND old.ordering_key IS NOT NULL
    BEGIN
        UPDATE {t} SET key_head = 1 WHERE seq = {first_live_after_old_3};
    END",
    "DROP INDEX IF EXISTS {t}_key_order",
];

/// The producer contract: a service in any language enqueues with a plain INSERT into the
/// view `{t}_enqueue`, in its own transaction; the view's trigger validates the row as the
/// Rust API does (same fields, same rules and limits; SQLite 3.40's `RAISE` takes only a
/// fixed message, so a message names the field and the rule, not the value), drops a
/// duplicate of a dedupe key with the same content (`RAISE(IGNORE)`: no row, no error),
/// refuses one with other content, and writes the row; the table's own triggers mark key
/// heads and keep the counts. A relay in another process picks it up at its next poll
/// (`max_poll_interval`): SQLite has no notifications between processes.
const MIGRATION_4: &[&str] = &[
    "CREATE VIEW IF NOT EXISTS {t}_enqueue
        (lane, target, payload, headers, ordering_key, dedupe_key, delay_ms, max_attempts)
        AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0",
    "CREATE TRIGGER IF NOT EXISTS {t}_enqueue_insert INSTEAD OF INSERT ON {t}_enqueue
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
            WHERE new.ordering_key GLOB {control};
        SELECT RAISE(ABORT, 'invalid dedupe_key: must not be blank')
            WHERE new.dedupe_key IS NOT NULL AND trim(new.dedupe_key) = '';
        SELECT RAISE(ABORT, 'invalid dedupe_key: is over the limit of 256 bytes')
            WHERE length(CAST(new.dedupe_key AS BLOB)) > 256;
        SELECT RAISE(ABORT, 'invalid dedupe_key: contains a control character')
            WHERE new.dedupe_key GLOB {control};
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
        SELECT RAISE(ABORT, 'invalid payload: contains a NUL character (\\u0000), which PostgreSQL cannot store; no store accepts it')
            WHERE instr(new.payload, '\\u0000') > 0;
        SELECT RAISE(ABORT, 'invalid payload: is over the limit of 1048576 bytes')
            WHERE length(CAST(new.payload AS BLOB)) > 1048576;
        SELECT RAISE(ABORT, 'invalid headers: make the message over the limit of 1048576 bytes')
            WHERE length(CAST(new.payload AS BLOB)) + coalesce((SELECT sum(
                length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)))
                FROM json_each(coalesce(new.headers, json_object()))), 0) > 1048576;
        SELECT RAISE(IGNORE) WHERE new.dedupe_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM {t} m WHERE m.lane = new.lane AND m.target = new.target
                AND m.dedupe_key = new.dedupe_key AND m.payload = new.payload
                AND m.headers = json(coalesce(new.headers, json_object()))
                AND m.ordering_key IS new.ordering_key
                AND m.max_attempts = coalesce(new.max_attempts, 5));
        SELECT RAISE(ABORT, 'conflict: the dedupe_key in this lane and target is already used by a message with different content')
            WHERE new.dedupe_key IS NOT NULL AND EXISTS (
                SELECT 1 FROM {t} m WHERE m.lane = new.lane AND m.target = new.target
                    AND m.dedupe_key = new.dedupe_key);
        INSERT INTO {t} (outbox_id, lane, target, payload, headers, ordering_key, dedupe_key,
                status, attempt_count, max_attempts, available_at, created_at, updated_at)
            VALUES ({uuid}, new.lane, new.target, new.payload,
                json(coalesce(new.headers, json_object())), new.ordering_key, new.dedupe_key,
                'pending', 0, coalesce(new.max_attempts, 5),
                {now} + coalesce(new.delay_ms, 0), {now}, {now});
    END",
];

/// `GLOB` pattern: the value holds a control character (U+0001 to U+001F, U+007F).
const CONTROL_GLOB: &str = "('*[' || char(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, \
     16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127) || ']*')";

/// A random (version 4) UUID in its hyphenated lowercase text, as `outbox_id` is stored.
const UUID_V4: &str = "(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' \
     || substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) \
     || substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))))";

/// Now, in milliseconds since the Unix epoch, as every timestamp column is stored.
const NOW_MILLIS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// [`FIRST_LIVE_AFTER`] over `{t}_key_live` (migration 3 on).
const FIRST_LIVE_AFTER_3: &str = "(SELECT MIN(s) FROM (
        SELECT (SELECT e.seq FROM {t} e INDEXED BY {t}_key_live
            WHERE e.lane = {row}.lane AND e.target = {row}.target
            AND e.ordering_key = {row}.ordering_key AND e.status = 'pending'
            AND e.{live} AND e.seq > {row}.seq ORDER BY e.seq LIMIT 1) AS s
        UNION ALL
        SELECT (SELECT e.seq FROM {t} e INDEXED BY {t}_key_live
            WHERE e.lane = {row}.lane AND e.target = {row}.target
            AND e.ordering_key = {row}.ordering_key AND e.status = 'claimed'
            AND e.{live} AND e.seq > {row}.seq ORDER BY e.seq LIMIT 1)))";

/// [`NO_LIVE_BEFORE_NEW`] over `{t}_key_live` (migration 3 on).
const NO_LIVE_BEFORE_NEW_3: &str = "(new.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {t} e INDEXED BY {t}_key_live
            WHERE e.lane = new.lane AND e.target = new.target
            AND e.ordering_key = new.ordering_key AND e.{live}
            AND e.seq < new.seq))";

/// The statements to bring a table from `applied` (the highest version recorded, 0 for
/// none) to the newest version, each with the version it belongs to.
pub(in crate::store::sqlite) fn pending_migrations(
    table: &str,
    applied: i64,
) -> Vec<(i64, Vec<String>)> {
    MIGRATIONS
        .iter()
        .filter(|m| m.version > applied)
        .map(|m| {
            let statements = m
                .statements
                .iter()
                .map(|s| {
                    s.replace("{control}", CONTROL_GLOB)
                        .replace("{uuid}", UUID_V4)
                        .replace("{now}", NOW_MILLIS)
                        .replace("{no_live_before_new_3}", NO_LIVE_BEFORE_NEW_3)
                        .replace(
                            "{first_live_after_new_3}",
                            &FIRST_LIVE_AFTER_3.replace("{row}", "new"),
                        )
                        .replace(
                            "{first_live_after_old_3}",
                            &FIRST_LIVE_AFTER_3.replace("{row}", "old"),
                        )
                        .replace("{live}", LIVE)
                        .replace("{no_live_before_new}", NO_LIVE_BEFORE_NEW)
                        .replace(
                            "{first_live_after_new}",
                            &FIRST_LIVE_AFTER.replace("{row}", "new"),
                        )
                        .replace(
                            "{first_live_after_old}",
                            &FIRST_LIVE_AFTER.replace("{row}", "old"),
                        )
                        .replace("{t}", table)
                })
                .collect();
            (m.version, statements)
        })
        .collect()
}

/// The newest schema version this build knows.
pub(in crate::store::sqlite) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The statement that creates the migrations table `migrations` (every file and every run
/// starts with it; it is idempotent).
pub(in crate::store::sqlite) fn migrations_table(migrations: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {migrations} (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"
    )
}

/// The statement that records `version` in `migrations`: first in its transaction, so a
/// second run of the same file fails at once on the primary key, changing nothing.
pub(in crate::store::sqlite) fn record_version(migrations: &str, version: i64) -> String {
    format!(
        "INSERT INTO {migrations} (version, applied_at) \
         VALUES ({version}, CAST(strftime('%s', 'now') AS INTEGER) * 1000)"
    )
}

/// The SQL of the migrations after `from` up to `to` for the table `table` and the
/// migrations table `migrations`: each a transaction of its own (`BEGIN IMMEDIATE`, the
/// write lock at once), with the statements the store runs at open.
pub(in crate::store::sqlite) fn script(
    table: &str,
    migrations: &str,
    from: i64,
    to: i64,
) -> String {
    pending_migrations(table, from)
        .into_iter()
        .filter(|(version, _)| *version <= to)
        .map(|(version, statements)| {
            let mut text = format!(
                "-- outbox-relay SQLite schema migration {version}, for the table {table}.\n\
                 -- Generated from the code, which runs the same statements; do not edit.\n\
                 -- Run in order, each once: a second run fails on the version it records.\n\
                 BEGIN IMMEDIATE;\n{};\n{};\n",
                migrations_table(migrations),
                record_version(migrations, version),
            );
            for statement in statements {
                text.push_str(&statement);
                text.push_str(";\n");
            }
            text.push_str("COMMIT;\n");
            text
        })
        .collect::<Vec<_>>()
        .join("\n")
}
