//! [`SqliteStoreBuilder`]: the settings of a [`SqliteOutboxStore`] (each with its default and
//! its limits), and opening one: the connection options every connection shares, the write
//! connection and the read pool, and the migrations run at open.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, ConnectOptions, Row};
use tokio::sync::{broadcast, Mutex};

use crate::message::{DraftLimits, ValidationError};
use crate::store::StoreOp;
use crate::store::{StoreError, WAKEUP_CHANNEL_CAPACITY};
use crate::time::{Clock, SystemClock};

use super::checkpoint::{Checkpoints, FALLBACK_AUTOCHECKPOINT, RESTART_PAGES};
use super::row::db;
use super::schema::{self, Statements};
use super::SqliteOutboxStore;

/// How long a write waits for another process's write lock before giving up with
/// [`StoreError::Unavailable`], unless configured otherwise.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How many rows a statement may hand over from the connection's worker thread before it
/// waits for them to be read: room for a whole claim batch of the usual sizes.
const ROW_BUFFER: usize = 1024;

/// How many connections serve reads, unless configured otherwise.
pub const DEFAULT_READ_CONNECTIONS: u32 = 4;

/// Each connection's page cache, unless configured otherwise: SQLite's own default,
/// 2,000 KiB. A larger cache was measured and did not pay: side by side on a 100 k
/// backlog drained at concurrency 64, a 64 MiB cache drained unkeyed lanes 10–25 % slower
/// and used more CPU (the table's hot pages stay in the OS's cache either way). Raise it
/// for a lane whose working set outgrows the OS's cache, and measure.
pub const DEFAULT_CACHE_SIZE: u64 = 2_000 * 1024;
/// The smallest page cache accepted: 256 KiB.
pub const MIN_CACHE_SIZE: u64 = 256 * 1024;
/// The largest page cache or memory map accepted: 1 TiB, far beyond any real outbox, so a
/// larger value is a mistaken unit rather than a wish.
pub const MAX_MEMORY_SIZE: u64 = 1 << 40;

/// Configures and opens a [`SqliteOutboxStore`].
///
/// ```no_run
/// # async fn demo() -> Result<(), outbox_relay::StoreError> {
/// use outbox_relay::store::sqlite::SqliteOutboxStore;
/// let store = SqliteOutboxStore::builder("relay.db")
///     .table_prefix("billing_")
///     .open()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    table_prefix: String,
    limits: DraftLimits,
    clock: Arc<dyn Clock>,
    busy_timeout: Duration,
    read_connections: u32,
    cache_size: u64,
    mmap_size: u64,
    synchronous_commit: bool,
    background_checkpoints: bool,
    /// `checkpoint::RESTART_PAGES`, lowered by unit tests.
    restart_pages: i64,
}

impl SqliteStoreBuilder {
    /// Puts the table (`{prefix}outbox`) and its migrations table behind a prefix, so several
    /// outboxes can share one file. ASCII letters, digits and `_`, not starting with a digit,
    /// at most [`MAX_TABLE_PREFIX_LEN`](super::MAX_TABLE_PREFIX_LEN) characters. Empty by default.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Sets the limits drafts are validated against.
    pub fn limits(mut self, limits: DraftLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the store's clock ([`SystemClock`] by default).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets how long a write waits for another process's write lock.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets how many connections serve reads (at least one).
    pub fn read_connections(mut self, connections: u32) -> Self {
        self.read_connections = connections;
        self
    }

    /// Sets each connection's page cache (`PRAGMA cache_size`), in bytes, rounded up to
    /// whole KiB: between [`MIN_CACHE_SIZE`] and [`MAX_MEMORY_SIZE`], by default
    /// [`DEFAULT_CACHE_SIZE`] (SQLite's own). The write connection's cache is the one that
    /// counts: every claim and ack walks the table's indexes through it. Each read
    /// connection has one of the same size, filled only as far as it reads.
    pub fn cache_size(mut self, bytes: u64) -> Self {
        self.cache_size = bytes;
        self
    }

    /// Sets how much of the file each connection reads through a memory map
    /// (`PRAGMA mmap_size`), in bytes, at most [`MAX_MEMORY_SIZE`]; 0 (the default) reads
    /// through SQLite's page cache only. SQLite caps it at its build's limit (2 GiB by
    /// default). A map shares the OS's cache between connections instead of copying pages
    /// into each, but an I/O error on a mapped page ends the process with a signal rather
    /// than an error.
    pub fn mmap_size(mut self, bytes: u64) -> Self {
        self.mmap_size = bytes;
        self
    }

    /// Whether the relay's own commits (claim, ack, nack, lease extension, release) sync the
    /// WAL. `false` (the default) commits them with `synchronous = NORMAL`: a power cut can
    /// lose the relay's last state changes, and their messages are delivered again, which
    /// at-least-once delivery allows; a process crash loses nothing. Enqueues and the
    /// caller's own transactions always commit with `synchronous = FULL`. The counterpart
    /// of PostgreSQL's `PostgresConfig::synchronous_commit`.
    pub fn synchronous_commit(mut self, synchronous: bool) -> Self {
        self.synchronous_commit = synchronous;
        self
    }

    /// Whether the WAL is checkpointed by a connection of its own in the background (the
    /// default) rather than by the write that crosses SQLite's threshold of 1,000 pages, which
    /// holds up every write queued behind it. Off, the store leaves checkpoints to SQLite
    /// (`wal_autocheckpoint` at its default). Needs a Tokio runtime at run time; without
    /// one, the writer's own checkpoint at 10,000 pages still bounds the WAL.
    pub fn background_checkpoints(mut self, on: bool) -> Self {
        self.background_checkpoints = on;
        self
    }

    /// The WAL's size (pages) from which a background checkpoint starts it over.
    #[cfg(test)]
    pub(super) fn restart_pages(mut self, pages: i64) -> Self {
        self.restart_pages = pages;
        self
    }

    /// Checks the configuration; the error names the field at fault.
    pub fn validate(&self) -> Result<(), ValidationError> {
        schema::validate_table_prefix(&self.table_prefix)?;
        if self.read_connections == 0 {
            return Err(ValidationError::new(
                "read_connections",
                "must be at least 1",
            ));
        }
        if !(MIN_CACHE_SIZE..=MAX_MEMORY_SIZE).contains(&self.cache_size) {
            return Err(ValidationError::new(
                "cache_size",
                format!(
                    "is {} bytes; it must be between {MIN_CACHE_SIZE} (256 KiB) and \
                     {MAX_MEMORY_SIZE} (1 TiB)",
                    self.cache_size
                ),
            ));
        }
        if self.mmap_size > MAX_MEMORY_SIZE {
            return Err(ValidationError::new(
                "mmap_size",
                format!(
                    "is {} bytes, over the limit of {MAX_MEMORY_SIZE} (1 TiB)",
                    self.mmap_size
                ),
            ));
        }
        Ok(())
    }

    /// Validates the configuration, opens the file (creating it if missing, readable and
    /// writable by its owner only: mode 0600 on Unix), switches it to WAL mode and brings
    /// the schema up to date. An existing file keeps its mode.
    pub async fn open(self) -> Result<SqliteOutboxStore, StoreError> {
        self.validate()?;
        create_private(&self.path);
        let options = SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(self.busy_timeout)
            // No foreign keys in this schema; skip the per-statement checks.
            .foreign_keys(false)
            // sqlx's slow-statement warning prints the whole statement: wrap the store in
            // `SlowCallLog` for a line with the operation's name and duration instead.
            .disable_statement_logging()
            // Rows come back from the connection's worker thread through a bounded channel
            // (50 by default): a claim's `RETURNING` of more rows than that would stall the
            // worker until this task reads, a thread hand-off per few rows.
            .row_buffer_size(ROW_BUFFER)
            // A negative cache_size is in KiB (a positive one would count pages).
            .pragma("cache_size", format!("-{}", self.cache_size.div_ceil(1024)))
            .pragma("mmap_size", self.mmap_size.to_string());
        // One connection: writes are serialised anyway (see the module docs), and one
        // connection keeps its prepared statements warm.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .map_err(db(StoreOp::Connect))?;
        let sql = Statements::new(&self.table_prefix);
        migrate(&writer, &sql).await?;
        let checkpoints = if self.background_checkpoints {
            // The writer checkpoints only past the fallback bound (checkpoint.rs).
            sqlx::query(AssertSqlSafe(format!(
                "PRAGMA wal_autocheckpoint = {FALLBACK_AUTOCHECKPOINT}"
            )))
            .execute(&writer)
            .await
            .map_err(db(StoreOp::Connect))?;
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options.clone())
                .await
                .map_err(db(StoreOp::Connect))?;
            Checkpoints::new(Some(pool), self.restart_pages)
        } else {
            Checkpoints::new(None, self.restart_pages)
        };
        // Connected after the writer, so the file exists and is already in WAL mode.
        let reader = SqlitePoolOptions::new()
            .max_connections(self.read_connections)
            .connect_with(options)
            .await
            .map_err(db(StoreOp::Connect))?;
        let (wakeups, _) = broadcast::channel(WAKEUP_CHANNEL_CAPACITY);
        Ok(SqliteOutboxStore {
            path: self.path,
            writer,
            write_turn: Arc::new(Mutex::new(())),
            synchronous_commit: self.synchronous_commit,
            checkpoints,
            reader,
            sql,
            clock: self.clock,
            limits: self.limits,
            wakeups,
        })
    }
}

impl SqliteOutboxStore {
    /// A builder for the outbox in the file at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.as_ref().to_path_buf(),
            table_prefix: String::new(),
            limits: DraftLimits::default(),
            clock: Arc::new(SystemClock),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            read_connections: DEFAULT_READ_CONNECTIONS,
            cache_size: DEFAULT_CACHE_SIZE,
            mmap_size: 0,
            synchronous_commit: false,
            background_checkpoints: true,
            restart_pages: RESTART_PAGES,
        }
    }
}

/// Creates the database file at `path`, empty and with mode 0600, unless it exists. SQLite
/// would create it with 0644 (less the umask): every local user could read the outbox's
/// payloads. Its `-wal` and `-shm` files take the database file's mode. Creating with
/// `create_new` never changes a file another process made meanwhile. Any failure here
/// (a missing directory, no permission) is left for SQLite's own open to report.
fn create_private(path: &Path) {
    // `:memory:` and an empty name are SQLite's in-memory and temporary databases.
    if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
        return;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    if let Err(error) = options.open(path) {
        if error.kind() != std::io::ErrorKind::AlreadyExists {
            tracing::debug!(path = %path.display(), %error, "could not create the database file; SQLite will try");
        }
    }
}

/// Runs the migrations this file lacks, each in a transaction of its own with the row that
/// records it (the files of `SqliteOutboxStore::migration_sql`, between their `BEGIN
/// IMMEDIATE` and `COMMIT`): a failure leaves the earlier ones applied and itself not at
/// all. A file migrated by a newer build is refused.
async fn migrate(writer: &SqlitePool, sql: &Statements) -> Result<(), StoreError> {
    const OP: StoreOp = StoreOp::Migrate;
    loop {
        let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(db(OP))?;
        sqlx::query(AssertSqlSafe(schema::for_table(
            schema::MIGRATIONS_TABLE,
            &sql.table,
        )))
        .execute(&mut *tx)
        .await
        .map_err(db(OP))?;
        let applied: i64 = sqlx::query(AssertSqlSafe(format!(
            "SELECT COALESCE(MAX(version), 0) FROM {}",
            sql.migrations_table
        )))
        .fetch_one(&mut *tx)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(db(OP))?;
        if applied > schema::latest_version() {
            return Err(StoreError::database(
                OP,
                format!(
                    "table {} is at schema version {applied}, newer than the version this \
                     build of outbox-relay knows ({}); run that outbox-relay version or a \
                     later one",
                    sql.table,
                    schema::latest_version()
                ),
            ));
        }
        let Some((_, statements)) = schema::next_migration(&sql.table, applied) else {
            return tx.commit().await.map_err(db(OP));
        };
        sqlx::raw_sql(AssertSqlSafe(statements))
            .execute(&mut *tx)
            .await
            .map_err(db(OP))?;
        tx.commit().await.map_err(db(OP))?;
    }
}
