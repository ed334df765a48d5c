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
use super::DEFAULT_TABLE_PREFIX;

/// The longest table prefix: MySQL names are at most 64 characters, and the longest table
/// adds `_lane_control` (or `_served_lanes`).
pub const MAX_TABLE_PREFIX_LEN: usize = 40;

/// What the text of one outbox's statements depends on: its prefix (which [`Self::sql`]
/// gives the `.sql` files), the quoted names of the two tables that statements built in
/// Rust name, and the dialect of the server.
#[derive(Debug, Clone)]
pub(super) struct Names {
    /// The prefix, unquoted.
    pub(super) prefix: String,
    /// `{prefix}_messages`.
    pub(super) messages: String,
    /// `{prefix}_keys`: one row per ordering key with live messages, the key's lock and
    /// its head's sequence.
    pub(super) keys: String,
    /// The `.sql` files' statements for this prefix, renamed once here.
    pub(super) sql: Arc<Statements>,
    /// Set once, by the store's probe before its first transaction (`MysqlOutboxStore::dialect`).
    dialect: Arc<OnceLock<Dialect>>,
}

/// The statements of `sql/NAME.sql`, one field each, written for the default prefix
/// `outbox` and renamed for a store's prefix once, when the store is built (`sql.rs`), so no
/// call renames text.
macro_rules! statements {
    ($($name:ident),* $(,)?) => {
        /// The `.sql` files' statements for one table prefix.
        #[derive(Debug)]
        pub(super) struct Statements {
            $(pub(super) $name: Arc<str>,)*
        }

        impl Statements {
            fn new(prefix: &str) -> Self {
                Self {
                    $($name: sql::for_prefix(
                        include_str!(concat!("sql/", stringify!($name), ".sql")),
                        prefix,
                    )
                    .into(),)*
                }
            }
        }
    };
}

statements!(
    ack_delete,
    ack_delivered,
    applied_version,
    clear_marks,
    dead_letter,
    extend,
    fenced_rows,
    first_dead,
    first_pair,
    fresh_seqs,
    held_back,
    lane_pause_locked,
    lane_pauses,
    lanes_between,
    lanes_stats,
    live_lanes,
    mark_heads,
    nack_retry,
    newest_seq,
    next_lane,
    next_target,
    pause_lane,
    pending_in_pair,
    pending_lanes,
    release,
    requeue,
    resume_lane,
    running_keys,
    serve_lane,
    served_lanes,
);

impl Names {
    pub(super) fn new(prefix: &str) -> Self {
        let quoted = |table: &str| format!("`{prefix}_{table}`");
        Self {
            prefix: prefix.to_owned(),
            messages: quoted("messages"),
            keys: quoted("keys"),
            sql: Arc::new(Statements::new(prefix)),
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

/// Every migration, in order (version 1 first): the files DBAs run, written for the prefix
/// `outbox` (`sql.rs`). A released file never changes, to the byte (tools such as Flyway and
/// `sqlx migrate` checksum what they applied); a new version is a new file.
/// `tests/migration_files.rs` checks that the directory holds these and no other.
///
/// What the tables hold:
/// - Names and keys are `VARBINARY`: compared byte for byte, as every other store does (a
///   `_bin` collation would still ignore trailing spaces under `PAD SPACE`).
/// - `payload` and `headers` are the exact JSON text (`utf8mb4_bin`).
/// - `ready_at` and `lapse_at` are the claim's two indexes: `NULL` for every row the claim
///   must not see, so a range on them skips the finished tail (module docs of the store).
/// - The messages' `by_key` index (lane, target, ordering_key, status, seq) answers every
///   per-key probe (a key's first pending, first claimed, first dead letter) in one index
///   dive; `pending` serves the oldest-pending age and `finished` the purge.
/// - `{prefix}_keys`: one row per ordering key with live messages (`heads.rs`).
/// - `{prefix}_lane_control` (2): one row per (lane, target) paused for every relay.
/// - `{prefix}_served_lanes` (3): until when a running relay serves each (lane, target)
///   (`store/served.rs`), in milliseconds on the store's clock.
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
    let files = between(from, to)
        .map(|(_, text)| sql::for_prefix(text, &names.prefix))
        .collect::<Vec<_>>()
        .join("\n");
    if files.is_empty() || names.prefix == DEFAULT_TABLE_PREFIX {
        return files;
    }
    // The files' comments name the default prefix; their statements name this one.
    format!(
        "-- The files of migrations/mysql/ for the table prefix {}.\n{files}",
        names.prefix
    )
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
    let got: Option<i64> =
        sqlx::query_scalar(AssertSqlSafe(sql::for_prefix(TAKE_LOCK, &names.prefix)))
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
            for statement in sql::statements(&sql::for_prefix(text, &names.prefix)) {
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
    sqlx::query_scalar(AssertSqlSafe(Arc::clone(&names.sql.applied_version)))
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
mod tests;
