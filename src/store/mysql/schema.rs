//! The MySQL store's tables and their migrations.
//!
//! MySQL commits every DDL statement on its own, so a migration cannot be one transaction
//! as on PostgreSQL and SQLite. Instead every statement is idempotent (`CREATE TABLE IF NOT
//! EXISTS`, indexes declared inside it), the whole run holds a named server lock
//! (`GET_LOCK`, one per database and prefix) so two processes never interleave, and a
//! version is recorded only after all its statements succeeded: a run cut short is
//! completed by the next.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Executor, Row};

use crate::message::ValidationError;
use crate::store::{StoreError, StoreOp};

use super::dialect::Dialect;
use super::row::db_error;

/// The longest table prefix: MySQL names are at most 64 characters, and the longest table
/// adds `_lane_control` (or `_served_lanes`).
pub const MAX_TABLE_PREFIX_LEN: usize = 40;

/// The quoted names of one outbox's tables, and the dialect of the server they are on:
/// what the text of a statement depends on.
#[derive(Debug, Clone)]
pub(super) struct Names {
    /// The prefix, unquoted.
    pub(super) prefix: String,
    /// `{prefix}_messages`.
    pub(super) messages: String,
    /// `{prefix}_keys`: one row per ordering key with live messages, the key's lock and
    /// its head's sequence.
    pub(super) keys: String,
    /// `{prefix}_lane_control`.
    pub(super) lane_control: String,
    /// `{prefix}_served_lanes`.
    pub(super) served_lanes: String,
    /// `{prefix}_migrations`.
    pub(super) migrations: String,
    /// Set once, by the store's probe before its first transaction (`MysqlOutboxStore::dialect`).
    dialect: Arc<OnceLock<Dialect>>,
}

impl Names {
    pub(super) fn new(prefix: &str) -> Self {
        let quoted = |table: &str| format!("`{prefix}_{table}`");
        Self {
            prefix: prefix.to_owned(),
            messages: quoted("messages"),
            keys: quoted("keys"),
            lane_control: quoted("lane_control"),
            served_lanes: quoted("served_lanes"),
            migrations: quoted("migrations"),
            dialect: Arc::new(OnceLock::new()),
        }
    }

    /// The server's dialect. Before the probe (which every transaction of the store and
    /// every enqueue in a caller's transaction waits for) this is MariaDB's, whose text
    /// MySQL also still runs.
    pub(super) fn dialect(&self) -> Dialect {
        self.dialect.get().copied().unwrap_or(Dialect::MariaDb)
    }

    /// Whether the dialect is known.
    pub(super) fn known_dialect(&self) -> Option<Dialect> {
        self.dialect.get().copied()
    }

    /// Records the dialect the probe found (the first answer stays: one server per pool).
    pub(super) fn learn_dialect(&self, dialect: Dialect) -> Dialect {
        *self.dialect.get_or_init(|| dialect)
    }
}

/// Checks a table prefix: lowercase letters, digits and `_`, starting with a letter.
pub(super) fn validate_table_prefix(prefix: &str) -> Result<(), ValidationError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_TABLE_PREFIX_LEN
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(
            "table_prefix",
            format!(
                "{prefix:?} must be 1 to {MAX_TABLE_PREFIX_LEN} lowercase letters, digits or '_', starting with a letter"
            ),
        ))
    }
}

/// One migration: its version and statements (`{m}` the messages table, `{k}` the keys
/// table, `{c}` the lane-control table, `{s}` the served-lanes table).
struct Migration {
    version: i64,
    /// What it adds, in a few words (the file name of its SQL).
    name: &'static str,
    statements: &'static [&'static str],
}

/// Every migration, in order. Shipped text never changes: `migrations/mysql/` holds it, and
/// `tests/migration_files.rs` fails when the code and the files differ.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "messages and keys",
        statements: MIGRATION_1,
    },
    Migration {
        version: 2,
        name: "lane control",
        statements: MIGRATION_2,
    },
    Migration {
        version: 3,
        name: "served lanes",
        statements: MIGRATION_3,
    },
];

/// The messages and the keys.
///
/// - Names and keys are `VARBINARY`: compared byte for byte, as every other store does
///   (a `_bin` collation would still ignore trailing spaces under `PAD SPACE`).
/// - `payload` and `headers` are the exact JSON text (`utf8mb4_bin`).
/// - `ready_at` and `lapse_at` are the claim's two indexes: `NULL` for every row the claim
///   must not see, so a range on them skips the finished tail (module docs).
/// - `{m}_key` (lane, target, ordering_key, status, seq) answers every per-key probe
///   (a key's first pending, first claimed, first dead letter) in one index dive.
/// - `{m}_pending` serves the oldest-pending age and `{m}_finished` the purge.
const MIGRATION_1: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {m} (
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
) ENGINE = InnoDB",
    "CREATE TABLE IF NOT EXISTS {k} (
    lane VARBINARY(255) NOT NULL,
    target VARBINARY(255) NOT NULL,
    ordering_key VARBINARY(1024) NOT NULL,
    head_seq BIGINT NULL,
    PRIMARY KEY (lane, target, ordering_key)
) ENGINE = InnoDB",
];

/// Lane control: one row per (lane, target) paused for every relay on the database.
const MIGRATION_2: &[&str] = &["CREATE TABLE IF NOT EXISTS {c} (
    lane VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    target VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    paused_by VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    reason TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    paused_at BIGINT NOT NULL,
    PRIMARY KEY (lane, target)
) ENGINE = InnoDB"];

/// Until when a running relay serves each (lane, target) (`store/served.rs`), in
/// milliseconds on the store's clock; names as the messages table has them.
const MIGRATION_3: &[&str] = &["CREATE TABLE IF NOT EXISTS {s} (
    lane VARBINARY(255) NOT NULL,
    target VARBINARY(255) NOT NULL,
    served_until BIGINT NOT NULL,
    PRIMARY KEY (lane, target)
) ENGINE = InnoDB"];

/// The newest schema version this build knows.
pub(super) fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

fn statements(names: &Names, migration: &Migration) -> Vec<String> {
    migration
        .statements
        .iter()
        .map(|s| {
            s.replace("{m}", &names.messages)
                .replace("{k}", &names.keys)
                .replace("{c}", &names.lane_control)
                .replace("{s}", &names.served_lanes)
        })
        .collect()
}

fn migrations_table(names: &Names) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (version BIGINT NOT NULL PRIMARY KEY, applied_at BIGINT NOT NULL) ENGINE = InnoDB",
        names.migrations
    )
}

fn record_version(names: &Names, version: i64) -> String {
    format!(
        "INSERT INTO {} (version, applied_at) VALUES ({version}, UNIX_TIMESTAMP() * 1000)",
        names.migrations
    )
}

/// The name of the migration lock: one per database and prefix.
fn lock_name(names: &Names) -> String {
    format!(
        "CONCAT('outbox-relay migrate ', DATABASE(), '.', '{}')",
        names.prefix
    )
}

/// The SQL of the migrations after `from` up to `to`, as [`migrate`] runs them.
pub(super) fn script(names: &Names, from: i64, to: i64) -> String {
    MIGRATIONS
        .iter()
        .filter(|m| m.version > from && m.version <= to)
        .map(|m| {
            let lock = lock_name(names);
            let mut text = format!(
                "-- outbox-relay MySQL schema migration {version}: {name}, for the prefix {prefix}.\n\
                 -- Generated from the code, which runs the same statements; do not edit.\n\
                 -- MySQL commits each DDL statement on its own: every statement is idempotent\n\
                 -- and the version is recorded last, so a run cut short can be run again.\n\
                 SELECT GET_LOCK({lock}, 30);\n{};\n",
                migrations_table(names),
                version = m.version,
                name = m.name,
                prefix = names.prefix,
            );
            for statement in statements(names, m) {
                text.push_str(&statement);
                text.push_str(";\n");
            }
            text.push_str(&record_version(names, m.version));
            text.push_str(";\n");
            text.push_str(&format!("SELECT RELEASE_LOCK({lock});\n"));
            text
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Brings the tables to the newest version, under the migration lock.
pub(super) async fn migrate(
    pool: &MySqlPool,
    names: &Names,
    lock_timeout: Duration,
) -> Result<(), StoreError> {
    const OP: StoreOp = StoreOp::Migrate;
    let mut conn = pool.acquire().await.map_err(|e| db_error(OP, e))?;
    let lock = lock_name(names);
    let got: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT GET_LOCK({lock}, {})",
        lock_timeout.as_secs().max(1)
    )))
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| db_error(OP, e))?;
    if got != Some(1) {
        return Err(StoreError::unavailable(
            OP,
            format!(
                "another process held the migration lock of {} for over {lock_timeout:?}",
                names.messages
            ),
        ));
    }
    let result = async {
        conn.execute(AssertSqlSafe(migrations_table(names)))
            .await
            .map_err(|e| db_error(OP, e))?;
        let applied = applied_on(&mut conn, names).await?.unwrap_or(0);
        for migration in MIGRATIONS.iter().filter(|m| m.version > applied) {
            for statement in statements(names, migration) {
                conn.execute(AssertSqlSafe(statement))
                    .await
                    .map_err(|e| db_error(OP, e))?;
            }
            conn.execute(AssertSqlSafe(record_version(names, migration.version)))
                .await
                .map_err(|e| db_error(OP, e))?;
        }
        Ok::<(), StoreError>(())
    }
    .await;
    let released = sqlx::query(AssertSqlSafe(format!("SELECT RELEASE_LOCK({lock})")))
        .execute(&mut *conn)
        .await;
    result?;
    released.map_err(|e| db_error(OP, e))?;
    Ok(())
}

async fn applied_on(
    conn: &mut sqlx::MySqlConnection,
    names: &Names,
) -> Result<Option<i64>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT MAX(version) AS v FROM {}",
        names.migrations
    )))
    .fetch_one(conn)
    .await
    .map_err(|e| db_error(StoreOp::Migrate, e))?;
    row.try_get::<Option<i64>, _>("v")
        .map_err(|e| db_error(StoreOp::Migrate, e))
}

/// The applied version, read without DDL: `None` when the prefix holds no outbox.
pub(super) async fn applied_version(
    pool: &MySqlPool,
    names: &Names,
) -> Result<Option<i64>, StoreError> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(format!("{}_migrations", names.prefix))
    .fetch_one(pool)
    .await
    .map_err(|e| db_error(StoreOp::Migrate, e))?;
    if exists == 0 {
        return Ok(None);
    }
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| db_error(StoreOp::Migrate, e))?;
    applied_on(&mut conn, names).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_names_its_field_when_refused() {
        assert!(validate_table_prefix("outbox").is_ok());
        for bad in [
            "",
            "Outbox",
            "1x",
            "a-b",
            &"x".repeat(MAX_TABLE_PREFIX_LEN + 1),
        ] {
            assert_eq!(
                validate_table_prefix(bad).unwrap_err().field,
                "table_prefix"
            );
        }
    }

    #[test]
    fn the_script_records_each_version_after_its_statements() {
        let text = script(&Names::new("outbox"), 0, latest_version());
        let table = text
            .find("CREATE TABLE IF NOT EXISTS `outbox_messages`")
            .unwrap();
        let recorded = text.find("VALUES (1, UNIX_TIMESTAMP() * 1000)").unwrap();
        assert!(table < recorded, "{text}");
        assert!(script(&Names::new("outbox"), 1, 1).is_empty());
    }
}
