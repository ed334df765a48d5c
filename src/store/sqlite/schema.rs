//! The table, its indexes and the embedded migrations that create them, and the text of
//! every fixed statement the store runs. The table prefix is a validated identifier, so it
//! is spliced into the SQL once, at open; values are always bound.

use std::sync::Arc;

use crate::message::ValidationError;
use crate::store::OrderingPolicy;

/// The longest table prefix accepted.
pub const MAX_TABLE_PREFIX_LEN: usize = 32;

/// The columns every query that reads messages selects, in the order `row::decode` reads.
pub(super) const COLUMNS: &str = "seq, outbox_id, lane, target, payload, headers, \
     ordering_key, dedupe_key, status, attempt_count, max_attempts, available_at, \
     claimed_by, claim_token, lease_expires_at, last_error, created_at, updated_at, \
     delivered_at";

/// Checks a table prefix: empty, or an SQL identifier start of at most
/// [`MAX_TABLE_PREFIX_LEN`] ASCII letters, digits and underscores, not starting with a digit.
pub(super) fn validate_table_prefix(prefix: &str) -> Result<(), ValidationError> {
    const FIELD: &str = "table_prefix";
    if prefix.len() > MAX_TABLE_PREFIX_LEN {
        return Err(ValidationError::new(
            FIELD,
            format!(
                "is {} characters, over the limit of {MAX_TABLE_PREFIX_LEN}",
                prefix.len()
            ),
        ));
    }
    if prefix.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(ValidationError::new(FIELD, "must not start with a digit"));
    }
    // SQLite refuses to create tables named sqlite_* (its own): say so before it does.
    if prefix.to_ascii_lowercase().starts_with("sqlite_") {
        return Err(ValidationError::new(
            FIELD,
            format!("{prefix:?} starts with \"sqlite_\", which SQLite reserves for its own tables"),
        ));
    }
    if let Some(bad) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(ValidationError::new(
            FIELD,
            format!("contains {bad:?}; use only ASCII letters, digits and '_'"),
        ));
    }
    Ok(())
}

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
];

/// Claims that cost what they return (issue 8). `key_head` marks the first live (pending
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

/// The statements to bring a table from `applied` (the highest version recorded, 0 for
/// none) to the newest version, each with the version it belongs to.
pub(super) fn pending_migrations(table: &str, applied: i64) -> Vec<(i64, Vec<String>)> {
    MIGRATIONS
        .iter()
        .filter(|m| m.version > applied)
        .map(|m| {
            let statements = m
                .statements
                .iter()
                .map(|s| {
                    s.replace("{no_live_before_new}", NO_LIVE_BEFORE_NEW)
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
pub(super) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// "Does the per-key rule hold back head `c`?", with `?1` the clock's now. A head is held by
/// another row of its key claimed under a lease that has not lapsed (a requeued dead head
/// must not run beside its successor) and, under `Block` only (`{block}`), by an earlier
/// dead letter. Each is an index probe on `{t}_key_order`; whether `c` heads its key at all
/// is its `key_head` mark.
const KEY_HELD: &str = "(c.ordering_key IS NOT NULL AND (
        EXISTS (SELECT 1 FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'claimed'
            AND e.seq <> c.seq AND e.lease_expires_at > ?1){block}))";

/// The `Block` addition to [`KEY_HELD`].
const HELD_BY_DEAD: &str = "
        OR EXISTS (SELECT 1 FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'dead_letter'
            AND e.seq < c.seq)";

/// The last seq of the key run behind head `c` (`?5` the run's length, at least 2; `?1`
/// now): the key's next pending rows by seq, at most `?5 - 1` of them, cut before the first
/// that is not due, before the key's next claimed row and, under `Block` only
/// (`{run_block}`), before its next dead letter. `c.seq` itself when nothing follows. Each
/// term is an index range on `{t}_key_order` that stops within the run's length (or one
/// probe), so a hot key's backlog behind the run is never read.
const RUN_END: &str = "MIN(
        COALESCE((SELECT COALESCE(MIN(CASE WHEN w.available_at > ?1 THEN w.seq END) - 1,
                MAX(w.seq))
            FROM (SELECT e.seq, e.available_at FROM {t} e INDEXED BY {t}_key_order
                WHERE e.lane = c.lane AND e.target = c.target
                AND e.ordering_key = c.ordering_key AND e.status = 'pending'
                AND e.seq > c.seq ORDER BY e.seq LIMIT ?5 - 1) AS w), c.seq),
        COALESCE((SELECT e.seq FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'claimed'
            AND e.seq > c.seq ORDER BY e.seq LIMIT 1) - 1, 9223372036854775807){run_block})";

/// The `Block` addition to [`RUN_END`]: a dead letter behind the head ends the run.
const RUN_STOPS_AT_DEAD: &str = ",
        COALESCE((SELECT e.seq FROM {t} e INDEXED BY {t}_key_order
            WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'dead_letter'
            AND e.seq > c.seq ORDER BY e.seq LIMIT 1) - 1, 9223372036854775807)";

/// The (outbox_id, claim_token) pairs of a batch statement, from `json_each(?1)` over
/// `[[outbox_id, claim_token], ...]`.
const GIVEN_CLAIMS: &str = "(SELECT json_extract(value, '$[0]') AS id,
            json_extract(value, '$[1]') AS token
        FROM json_each(?1)) AS given";

/// The statements whose plan depends on the ordering policy: one text per policy, never a
/// bind parameter, so each gets the plan made for it. Binds: now, lane, target, limit.
#[derive(Debug)]
pub(super) struct PolicyStatements {
    /// Lapsed claims on their last attempt that head their key, earliest lapse first.
    pub(super) claim_doomed: Arc<str>,
    /// Lapsed claims with attempts left that head their key, earliest lapse first.
    pub(super) claim_lapsed: Arc<str>,
    /// Due pending key heads, in (available_at, seq) order.
    pub(super) claim_ready: Arc<str>,
    /// Due pending key heads as `claim_ready` picks them, each followed by its key run
    /// (see [`RUN_END`]) in seq order; the limit counts every row. One more bind: ?5 the
    /// run's length, at least 2 (a run of 1 is `claim_ready`).
    pub(super) claim_runs: Arc<str>,
    /// The earliest of: the next lapse, a lapsed head, the first pending head.
    pub(super) next_due: Arc<str>,
}

/// The fixed statements, with the table name filled in once at open.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) migrations_table: String,
    /// `{table}_counts`: rows per (lane, target, status), kept by triggers.
    pub(super) counts_table: String,
    /// Messages by dedupe slot. Binds: lane, target, dedupe_key.
    pub(super) find_dedupe: Arc<str>,
    pub(super) insert: Arc<str>,
    pub(super) skip: PolicyStatements,
    pub(super) block: PolicyStatements,
    pub(super) dead_letter_lapsed: Arc<str>,
    pub(super) mark_claimed: Arc<str>,
    pub(super) ack: Arc<str>,
    pub(super) nack: Arc<str>,
    pub(super) extend: Arc<str>,
    pub(super) release: Arc<str>,
    /// When the oldest due pending row of a lane was enqueued. Binds: now, lane, target.
    pub(super) oldest_due: Arc<str>,
    pub(super) get: Arc<str>,
    pub(super) purge_batch: Arc<str>,
    pub(super) purge_count: Arc<str>,
}

impl Statements {
    pub(super) fn new(prefix: &str) -> Self {
        let table = format!("{prefix}outbox");
        let t = |sql: &str| -> Arc<str> {
            sql.replace("{given_claims}", GIVEN_CLAIMS)
                .replace("{cols}", COLUMNS)
                .replace("{t}", &table)
                .into()
        };
        let policy = |block: &str, run_block: &str| {
            let held = KEY_HELD.replace("{block}", block);
            let run_end = RUN_END.replace("{run_block}", run_block);
            let p = |sql: &str| {
                t(&sql
                    .replace("{key_held}", &held)
                    .replace("{run_end}", &run_end))
            };
            PolicyStatements {
                claim_doomed: p("SELECT c.seq, c.outbox_id FROM {t} c
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                        AND c.lease_expires_at <= ?1 AND c.key_head = 1
                        AND c.attempt_count >= c.max_attempts AND NOT {key_held}
                    ORDER BY c.lease_expires_at, c.seq"),
                claim_lapsed: p("SELECT c.seq FROM {t} c
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                        AND c.lease_expires_at <= ?1 AND c.key_head = 1
                        AND c.attempt_count < c.max_attempts AND NOT {key_held}
                    ORDER BY c.lease_expires_at, c.seq
                    LIMIT ?4"),
                claim_ready: p("SELECT c.seq FROM {t} c
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
                        AND c.key_head = 1 AND c.available_at <= ?1 AND NOT {key_held}
                    ORDER BY c.available_at, c.seq
                    LIMIT ?4"),
                // The heads of `claim_ready`, each joined to itself and its run: a row
                // without a key joins nothing and stands alone (`r.seq` NULL); a keyed head
                // is the first row of its own run range. The order is the heads' index
                // order, then each run's key-index order, so no sort: the statement stops
                // reading heads once the limit is reached, runs included.
                claim_runs: p("SELECT COALESCE(r.seq, c.seq) FROM {t} c
                    LEFT JOIN {t} r INDEXED BY {t}_key_order
                        ON r.lane = c.lane AND r.target = c.target
                        AND r.ordering_key = c.ordering_key AND r.status = 'pending'
                        AND r.seq >= c.seq AND r.seq <= {run_end}
                    WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
                        AND c.key_head = 1 AND c.available_at <= ?1 AND NOT {key_held}
                    ORDER BY c.available_at, c.seq, r.seq
                    LIMIT ?4"),
                // A running lease always counts (its lapse frees the row or its key); a row
                // its key holds back does not (its key's head is counted instead). Each
                // branch reads its index in order and stops at the first row that counts.
                next_due: p("SELECT MIN(due) FROM (
                    SELECT (SELECT c.lease_expires_at FROM {t} c
                        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                            AND c.lease_expires_at > ?1
                        ORDER BY c.lease_expires_at LIMIT 1) AS due
                    UNION ALL
                    SELECT (SELECT c.lease_expires_at FROM {t} c
                        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'claimed'
                            AND c.lease_expires_at <= ?1 AND c.key_head = 1
                            AND NOT {key_held}
                        ORDER BY c.lease_expires_at, c.seq LIMIT 1)
                    UNION ALL
                    SELECT (SELECT c.available_at FROM {t} c
                        WHERE c.lane = ?2 AND c.target = ?3 AND c.status = 'pending'
                            AND c.key_head = 1 AND NOT {key_held}
                        ORDER BY c.available_at, c.seq LIMIT 1))"),
            }
        };
        Self {
            migrations_table: format!("{prefix}outbox_migrations"),
            counts_table: format!("{table}_counts"),
            find_dedupe: t("SELECT {cols} FROM {t}
                WHERE lane = ?1 AND target = ?2 AND dedupe_key = ?3"),
            insert: t("INSERT INTO {t} (outbox_id, lane, target, payload, headers,
                    ordering_key, dedupe_key, status, attempt_count, max_attempts,
                    available_at, created_at, updated_at)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, ?8, ?9, ?10, ?10)
                RETURNING seq"),
            skip: policy("", ""),
            block: policy(HELD_BY_DEAD, RUN_STOPS_AT_DEAD),
            // The batch statements below read their rows from `json_each(?1)`, a JSON
            // array built by `write.rs`: one statement per call, whatever its size. Each
            // drives its loop from the array and finds the row by a key (the rowid or the
            // `outbox_id` index), so its cost is the rows it names. The unary `+` on
            // `status = 'claimed'` keeps the planner off the partial index `_leases`: with
            // statistics that show few claimed rows it would otherwise read every claim of
            // every lane and probe the array for each.
            //
            // ?1 `[seq, ...]`, ?2 error, ?3 now.
            dead_letter_lapsed: t("UPDATE {t} SET status = 'dead_letter', last_error = ?2,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?3
                WHERE seq IN (SELECT value FROM json_each(?1))"),
            // ?1 `[[seq, claim_token], ...]`, ?2 consumer, ?3 lease end, ?4 now.
            mark_claimed: t("UPDATE {t} SET status = 'claimed',
                    attempt_count = attempt_count + 1, claimed_by = ?2,
                    claim_token = given.token, lease_expires_at = ?3, updated_at = ?4
                FROM (SELECT json_extract(value, '$[0]') AS pick,
                        json_extract(value, '$[1]') AS token
                    FROM json_each(?1)) AS given
                WHERE {t}.seq = given.pick
                RETURNING {cols}"),
            // ?1 `[[outbox_id, claim_token], ...]`, ?2 now.
            ack: t("UPDATE {t} SET status = 'delivered', delivered_at = ?2,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?2
                FROM {given_claims}
                WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING outbox_id"),
            // ?1 `[[outbox_id, claim_token, error, retry, due], ...]`, where retry is 1 for
            // a retry and 0 for permanent, and due is when a retry is due; ?2 now.
            nack: t("UPDATE {t} SET last_error = given.error,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?2,
                    available_at = CASE WHEN given.retry AND attempt_count < max_attempts
                        THEN given.due ELSE available_at END,
                    status = CASE WHEN given.retry AND attempt_count < max_attempts
                        THEN 'pending' ELSE 'dead_letter' END
                FROM (SELECT json_extract(value, '$[0]') AS id,
                        json_extract(value, '$[1]') AS token,
                        json_extract(value, '$[2]') AS error,
                        json_extract(value, '$[3]') AS retry,
                        json_extract(value, '$[4]') AS due
                    FROM json_each(?1)) AS given
                WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING outbox_id, status"),
            // ?1 claims as for ack, ?2 lease end, ?3 now.
            extend: t("UPDATE {t} SET lease_expires_at = ?2, updated_at = ?3
                FROM {given_claims}
                WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING outbox_id"),
            // ?1 claims as for ack, ?2 now.
            release: t("UPDATE {t} SET status = 'pending', available_at = ?2,
                    attempt_count = MAX(attempt_count - 1, 0),
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?2
                FROM {given_claims}
                WHERE {t}.outbox_id = given.id AND +{t}.status = 'claimed'
                    AND {t}.claim_token = given.token
                RETURNING outbox_id, lane, target"),
            // Enqueue order stands for enqueue time (the clock only moves forward), so the
            // first due row in seq order is the oldest; the rows before it are delayed ones.
            oldest_due: t("SELECT created_at FROM {t}
                WHERE lane = ?2 AND target = ?3 AND status = 'pending' AND available_at <= ?1
                ORDER BY seq LIMIT 1"),
            get: t("SELECT {cols} FROM {t} WHERE outbox_id = ?1"),
            // ?3 status, ?4/?5 lane and target or NULL for every lane. The literal IN
            // repeats what ?3 can be, so the planner may use the partial index
            // `_finished` (it cannot prove a bound status matches the index's WHERE).
            purge_batch: t("DELETE FROM {t} WHERE seq IN (
                SELECT seq FROM {t}
                WHERE status IN ('delivered', 'dead_letter') AND status = ?3
                  AND updated_at < ?1
                  AND (?4 IS NULL OR (lane = ?4 AND target = ?5))
                LIMIT ?2)"),
            // What purge_batch would delete, all batches together (a dry run).
            purge_count: t("SELECT count(*) FROM {t}
                WHERE status IN ('delivered', 'dead_letter') AND status = ?2
                  AND updated_at < ?1
                  AND (?3 IS NULL OR (lane = ?3 AND target = ?4))"),
            table,
        }
    }

    /// The statements for one ordering policy.
    pub(super) fn policy(&self, ordering: OrderingPolicy) -> &PolicyStatements {
        match ordering {
            OrderingPolicy::Skip => &self.skip,
            OrderingPolicy::Block => &self.block,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_prefix_rules() {
        for ok in ["", "app_", "A1_", "_x"] {
            assert!(validate_table_prefix(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "1app",
            "app-",
            "a b",
            "x\"; DROP TABLE t; --",
            &"x".repeat(33),
        ] {
            let err = validate_table_prefix(bad).unwrap_err();
            assert_eq!(err.field, "table_prefix", "{bad:?}");
        }
    }

    #[test]
    fn statements_name_the_prefixed_table() {
        let sql = Statements::new("app_");
        assert_eq!(sql.table, "app_outbox");
        for statement in [&sql.skip.claim_ready, &sql.block.next_due] {
            assert!(statement.contains("FROM app_outbox c"), "{statement}");
            assert!(!statement.contains('{'), "{statement}");
        }
        assert!(sql.block.claim_ready.contains("'dead_letter'"));
        assert!(!sql.skip.claim_ready.contains("'dead_letter'"));
        for (_, statements) in pending_migrations("app_outbox", 0) {
            for statement in statements {
                assert!(!statement.contains('{'), "{statement}");
            }
        }
        assert!(pending_migrations("app_outbox", 0)[0].1[0].contains("app_outbox ("));
        assert!(pending_migrations("app_outbox", latest_version()).is_empty());
    }

    #[test]
    fn sqlite_reserved_prefixes_are_refused() {
        for bad in ["sqlite_", "SQLite_x", "sqlite_app_"] {
            let err = validate_table_prefix(bad).unwrap_err();
            assert_eq!(err.field, "table_prefix", "{bad:?}");
            assert!(err.reason.contains("reserves"), "{bad:?}: {err}");
        }
        assert!(validate_table_prefix("sqlite").is_ok());
    }
}
