//! The table, its indexes and the embedded migrations that create them, and the text of
//! every fixed statement the store runs. The table prefix is a validated identifier, so it
//! is spliced into the SQL once, at open; values are always bound.

use std::sync::Arc;

use crate::message::ValidationError;

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

/// One schema change: a version and the statements that make it. Every statement is
/// idempotent (`IF NOT EXISTS`), so a migration interrupted by a crash can simply run again.
struct Migration {
    version: i64,
    statements: &'static [&'static str],
}

/// The schema, oldest change first. `{t}` is the table name. Append, never edit.
const MIGRATIONS: &[Migration] = &[Migration {
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
}];

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
                .map(|s| s.replace("{t}", table))
                .collect();
            (m.version, statements)
        })
        .collect()
}

/// The newest schema version this build knows.
pub(super) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// "Is candidate `c`'s ordering key held?", with `?1` the clock's now and `?2` 1 under
/// `OrderingPolicy::Block`, 0 under `Skip`. It is held by an earlier pending row, an
/// earlier claimed row (under Skip, not one whose lease lapsed on its last attempt: this
/// same claim dead-letters it), under Block an earlier dead letter, and by any other row of
/// the key claimed under a lease that has not lapsed (a requeued dead head must not run
/// beside its successor). One probe per status keeps each an index range scan.
const KEY_HELD: &str = "(c.ordering_key IS NOT NULL AND (
        EXISTS (SELECT 1 FROM {t} e WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'claimed'
            AND e.seq <> c.seq AND e.lease_expires_at > ?1)
        OR EXISTS (SELECT 1 FROM {t} e WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'pending' AND e.seq < c.seq)
        OR EXISTS (SELECT 1 FROM {t} e WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'claimed' AND e.seq < c.seq
            AND (?2 OR NOT (COALESCE(e.lease_expires_at <= ?1, 0)
                            AND e.attempt_count >= e.max_attempts)))
        OR (?2 AND EXISTS (SELECT 1 FROM {t} e WHERE e.lane = c.lane AND e.target = c.target
            AND e.ordering_key = c.ordering_key AND e.status = 'dead_letter'
            AND e.seq < c.seq))))";

/// The fixed statements, with the table name filled in once at open.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) migrations_table: String,
    /// Messages by dedupe slot. Binds: lane, target, dedupe_key.
    pub(super) find_dedupe: Arc<str>,
    pub(super) insert: Arc<str>,
    /// Lapsed claims on their last attempt whose key is free. Binds: now, block, lane,
    /// target.
    pub(super) claim_doomed: Arc<str>,
    pub(super) dead_letter_lapsed: Arc<str>,
    /// Claimable rows whose key is free, in due order. Binds: now, block, lane, target,
    /// limit.
    pub(super) claim_candidates: Arc<str>,
    pub(super) mark_claimed: Arc<str>,
    pub(super) ack: Arc<str>,
    pub(super) nack: Arc<str>,
    pub(super) extend: Arc<str>,
    pub(super) release: Arc<str>,
    pub(super) next_due: Arc<str>,
    pub(super) get: Arc<str>,
    pub(super) purge_batch: Arc<str>,
}

impl Statements {
    pub(super) fn new(prefix: &str) -> Self {
        let table = format!("{prefix}outbox");
        let t = |sql: &str| -> Arc<str> {
            sql.replace("{key_held}", KEY_HELD)
                .replace("{cols}", COLUMNS)
                .replace("{t}", &table)
                .into()
        };
        Self {
            migrations_table: format!("{prefix}outbox_migrations"),
            find_dedupe: t("SELECT {cols} FROM {t}
                WHERE lane = ?1 AND target = ?2 AND dedupe_key = ?3"),
            insert: t("INSERT INTO {t} (outbox_id, lane, target, payload, headers,
                    ordering_key, dedupe_key, status, attempt_count, max_attempts,
                    available_at, created_at, updated_at)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', 0, ?8, ?9, ?10, ?10)
                RETURNING seq"),
            claim_doomed: t("SELECT c.seq, c.outbox_id FROM {t} c
                WHERE c.lane = ?3 AND c.target = ?4 AND c.status IN ('pending', 'claimed')
                    AND c.status = 'claimed' AND c.lease_expires_at <= ?1
                    AND c.attempt_count >= c.max_attempts AND NOT {key_held}
                ORDER BY c.seq"),
            dead_letter_lapsed: t("UPDATE {t} SET status = 'dead_letter', last_error = ?2,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?3
                WHERE seq = ?1"),
            // Two streams, each in its own due order (pending by available_at, lapsed
            // claims by lease expiry), merged by due time then seq.
            claim_candidates: t("SELECT c.seq, c.available_at AS due FROM {t} c
                WHERE c.lane = ?3 AND c.target = ?4 AND c.status IN ('pending', 'claimed')
                    AND c.status = 'pending' AND c.available_at <= ?1 AND NOT {key_held}
                UNION ALL
                SELECT c.seq, c.lease_expires_at AS due FROM {t} c
                WHERE c.lane = ?3 AND c.target = ?4 AND c.status IN ('pending', 'claimed')
                    AND c.status = 'claimed' AND c.lease_expires_at <= ?1
                    AND c.attempt_count < c.max_attempts AND NOT {key_held}
                ORDER BY due, seq
                LIMIT ?5"),
            mark_claimed: t("UPDATE {t} SET status = 'claimed',
                    attempt_count = attempt_count + 1, claimed_by = ?2, claim_token = ?3,
                    lease_expires_at = ?4, updated_at = ?5
                WHERE seq = ?1
                RETURNING {cols}"),
            ack: t("UPDATE {t} SET status = 'delivered', delivered_at = ?3,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?3
                WHERE outbox_id = ?1 AND status = 'claimed' AND claim_token = ?2"),
            // ?4 is 1 for a retry, 0 for permanent; ?5 is when a retry is due.
            nack: t("UPDATE {t} SET last_error = ?3,
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?6,
                    available_at = CASE WHEN ?4 AND attempt_count < max_attempts
                        THEN ?5 ELSE available_at END,
                    status = CASE WHEN ?4 AND attempt_count < max_attempts
                        THEN 'pending' ELSE 'dead_letter' END
                WHERE outbox_id = ?1 AND status = 'claimed' AND claim_token = ?2
                RETURNING status"),
            extend: t("UPDATE {t} SET lease_expires_at = ?3, updated_at = ?4
                WHERE outbox_id = ?1 AND status = 'claimed' AND claim_token = ?2"),
            release: t("UPDATE {t} SET status = 'pending', available_at = ?3,
                    attempt_count = MAX(attempt_count - 1, 0),
                    claimed_by = NULL, claim_token = NULL, lease_expires_at = NULL,
                    updated_at = ?3
                WHERE outbox_id = ?1 AND status = 'claimed' AND claim_token = ?2
                RETURNING lane, target"),
            // A running lease always counts (its lapse frees the row or its key); a row its
            // key holds back does not (its key's head is counted instead). Binds: now,
            // block, lane, target.
            next_due: t("SELECT MIN(due) FROM (
                SELECT c.lease_expires_at AS due FROM {t} c
                WHERE c.lane = ?3 AND c.target = ?4 AND c.status IN ('pending', 'claimed')
                    AND c.status = 'claimed' AND c.lease_expires_at > ?1
                UNION ALL
                SELECT c.available_at AS due FROM {t} c
                WHERE c.lane = ?3 AND c.target = ?4 AND c.status IN ('pending', 'claimed')
                    AND c.status = 'pending' AND NOT {key_held}
                UNION ALL
                SELECT c.lease_expires_at AS due FROM {t} c
                WHERE c.lane = ?3 AND c.target = ?4 AND c.status IN ('pending', 'claimed')
                    AND c.status = 'claimed' AND c.lease_expires_at <= ?1 AND NOT {key_held})"),
            get: t("SELECT {cols} FROM {t} WHERE outbox_id = ?1"),
            purge_batch: t("DELETE FROM {t} WHERE seq IN (
                SELECT seq FROM {t}
                WHERE status IN ('delivered', 'dead_letter') AND updated_at < ?1
                LIMIT ?2)"),
            table,
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
        assert!(sql.claim_candidates.contains("FROM app_outbox e"));
        assert!(!sql.claim_candidates.contains("{t}"));
        assert!(!sql.claim_candidates.contains("{key_held}"));
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
