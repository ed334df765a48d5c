//! The MySQL store's tables and their migrations.
//!
//! The migrations are the files in `migrations/mysql/`, which a DBA may also run as they
//! are. MySQL commits every DDL statement on its own, so a migration cannot be one
//! transaction as on PostgreSQL and SQLite. Instead every statement is idempotent (`CREATE
//! TABLE IF NOT EXISTS`, indexes declared inside it), the whole run holds a named server
//! lock (`GET_LOCK`, one per database and prefix) so two processes never interleave, and a
//! version is recorded only after all its statements succeeded: a run cut short is
//! completed by the next.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Executor};

use crate::message::ValidationError;
use crate::store::{StoreError, StoreOp};

use super::dialect::Dialect;
use super::row::db_error;
use super::sql;

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

    /// `text`, written for the default prefix `outbox`, for this prefix (`sql.rs`).
    pub(super) fn sql(&self, text: &str) -> String {
        sql::for_prefix(text, &self.prefix)
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

/// Every migration, in order (version 1 first): the files DBAs run, written for the prefix
/// `outbox` (`sql.rs`). Shipped files never change; a new version is a new file.
/// `tests/migration_files.rs` checks that the directory holds these and no other.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/mysql/V1__messages_and_keys.sql"),
    include_str!("../../../migrations/mysql/V2__lane_control.sql"),
    include_str!("../../../migrations/mysql/V3__served_lanes.sql"),
];

/// The migration lock, as the files take it: one per database and prefix. A session may
/// take a named lock it holds again (it then holds it twice), so the files' own
/// `GET_LOCK` and `RELEASE_LOCK` run inside the store's hold of it.
const TAKE_LOCK: &str =
    "SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'), ?)";

/// The newest schema version this build knows.
pub(super) fn latest_version() -> i64 {
    version_of(MIGRATIONS.len())
}

/// The version of the `n`th migration (the first is 1).
fn version_of(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The migrations after `from` up to `to`, with their versions.
fn between(from: i64, to: i64) -> impl Iterator<Item = (i64, &'static str)> {
    MIGRATIONS
        .iter()
        .enumerate()
        .map(|(i, text)| (version_of(i + 1), *text))
        .filter(move |(version, _)| *version > from && *version <= to)
}

/// The SQL of the migrations after `from` up to `to`, for `names`' prefix: the files, as
/// [`migrate`] runs them.
pub(super) fn script(names: &Names, from: i64, to: i64) -> String {
    between(from, to)
        .map(|(_, text)| names.sql(text))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Brings the tables to the newest version: under the migration lock, runs each file the
/// database lacks, statement by statement. Each file records its version last, so a run
/// cut short runs its file again, whose statements are all idempotent.
pub(super) async fn migrate(
    pool: &MySqlPool,
    names: &Names,
    lock_timeout: Duration,
) -> Result<(), StoreError> {
    const OP: StoreOp = StoreOp::Migrate;
    let mut conn = pool.acquire().await.map_err(|e| db_error(OP, e))?;
    let got: Option<i64> = sqlx::query_scalar(AssertSqlSafe(names.sql(TAKE_LOCK)))
        .bind(lock_timeout.as_secs().max(1))
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
        let applied = applied_on(&mut conn, names).await?.unwrap_or(0);
        for (_, text) in between(applied, latest_version()) {
            for statement in sql::statements(&names.sql(text)) {
                conn.execute(AssertSqlSafe(statement.to_owned()))
                    .await
                    .map_err(|e| db_error(OP, e))?;
            }
        }
        Ok::<(), StoreError>(())
    }
    .await;
    // Every hold: the store's and, after a file that failed, that file's own.
    let released = sqlx::query("SELECT RELEASE_ALL_LOCKS()")
        .execute(&mut *conn)
        .await;
    result?;
    released.map_err(|e| db_error(OP, e))?;
    Ok(())
}

/// The applied version, read without DDL: `None` when the prefix holds no outbox.
async fn applied_on(
    conn: &mut sqlx::MySqlConnection,
    names: &Names,
) -> Result<Option<i64>, StoreError> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(format!("{}_migrations", names.prefix))
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| db_error(StoreOp::Migrate, e))?;
    if exists == 0 {
        return Ok(None);
    }
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT MAX(version) FROM {}",
        names.migrations
    )))
    .fetch_one(conn)
    .await
    .map_err(|e| db_error(StoreOp::Migrate, e))
}

/// The applied version: `None` when the prefix holds no outbox.
pub(super) async fn applied_version(
    pool: &MySqlPool,
    names: &Names,
) -> Result<Option<i64>, StoreError> {
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
    fn the_script_is_the_files_for_the_prefix() {
        let text = script(&Names::new("shop"), 0, latest_version());
        let table = text
            .find("CREATE TABLE IF NOT EXISTS `shop_messages`")
            .unwrap();
        let recorded = text
            .find("INSERT INTO `shop_migrations` (version, applied_at) VALUES (1,")
            .unwrap();
        assert!(table < recorded, "{text}");
        for statement in sql::statements(&text) {
            assert!(!statement.contains("`outbox_"), "{statement}");
        }
        assert_eq!(
            script(&Names::new("outbox"), 1, 2),
            MIGRATIONS[1],
            "the default prefix's script is the file"
        );
        assert!(script(&Names::new("outbox"), 1, 1).is_empty());
    }

    /// What makes a file safe to run again and to run beside another process: the lock
    /// first, then only idempotent statements, then the version, then the release.
    #[test]
    fn each_file_takes_the_lock_and_records_its_version_last() {
        for (version, text) in between(0, latest_version()) {
            let statements = sql::statements(text);
            let lock = TAKE_LOCK.replace('?', "30");
            assert_eq!(statements.first(), Some(&lock.as_str()), "V{version}");
            let n = statements.len();
            assert_eq!(
                statements[n - 2],
                format!(
                    "INSERT INTO `outbox_migrations` (version, applied_at) \
                     VALUES ({version}, UNIX_TIMESTAMP() * 1000)"
                ),
                "V{version}"
            );
            assert_eq!(
                statements[n - 1],
                lock.replace("SELECT GET_LOCK(", "SELECT RELEASE_LOCK(")
                    .replace(", 30)", ")"),
                "V{version}"
            );
            for statement in &statements[1..n - 2] {
                assert!(
                    statement.starts_with("CREATE TABLE IF NOT EXISTS `outbox_"),
                    "V{version}: not idempotent: {statement}"
                );
            }
        }
    }

    /// The prefix reaches every table because the files quote every table name (and
    /// nothing else): no table name appears unquoted outside comments.
    #[test]
    fn the_files_quote_every_table_name() {
        for (version, text) in between(0, latest_version()) {
            for statement in sql::statements(text) {
                let unquoted = statement
                    .split('`')
                    .step_by(2)
                    .collect::<Vec<_>>()
                    .join(" ");
                for table in sql::TABLES {
                    let name = format!("outbox_{table}");
                    assert!(
                        !unquoted.contains(&format!(" {name}")),
                        "V{version}: {name} unquoted in {statement}"
                    );
                }
            }
        }
    }
}
