//! `SqliteOutboxStore`: the embedded default. One file, in WAL mode, that survives process
//! restarts; the same semantics as [`InMemoryOutboxStore`](super::memory::InMemoryOutboxStore),
//! row for row (the conformance suite runs against both).
//!
//! # How writers are serialised
//!
//! SQLite has one writer per file. Rather than let many connections race for the write lock
//! and surface `SQLITE_BUSY` (its busy handler sleeps and retries, unfairly), every write
//! takes its turn in-process: a FIFO async mutex, then the single connection of the write
//! pool, then one `BEGIN IMMEDIATE` transaction for the whole call (a batch of acks is one
//! transaction and one commit, not N). `BEGIN IMMEDIATE` takes the write lock up front, so
//! a transaction never has to upgrade from reading to writing half way, and another
//! *process* on the same file waits on `busy_timeout` instead. Reads (get, list, stats,
//! next_due) use a separate small pool: in WAL mode they never wait for the writer.
//!
//! So open one store per file in a process and share it (`Arc`): two handles on one file
//! are correct, but they meet at SQLite's lock and `busy_timeout` rather than at the
//! mutex, and each hands out only its own wake-ups (an in-process broadcast, sent after
//! commit, one per (lane, target) per call).
//!
//! # Durability
//!
//! `synchronous = FULL`: each commit syncs the WAL, so a message whose enqueue returned
//! survives a power cut, not just a process crash. `NORMAL` would be faster but may lose the
//! last commits on power loss, and a lost enqueue breaks at-least-once delivery. The cost is
//! paid once per call, since every batch is one transaction.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, ConnectOptions, Row, Sqlite, Transaction};
use tokio::sync::{broadcast, Mutex, MutexGuard};
use uuid::Uuid;

use crate::message::{DraftLimits, OutboxMessage, ValidationError};
use crate::store::{
    AckAndClaim, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, Clock, DraftBatch, Enqueued,
    LaneCount, LaneStats, MessageFilter, Nack, NackOutcome, OrderingPolicy, OutboxStore, Page,
    PageRequest, PurgeRequest, StoreError, SystemClock, WakeUp, WAKEUP_CHANNEL_CAPACITY,
};

mod explain;
mod filter;
mod read;
mod row;
mod schema;
mod transaction;
mod write;

pub use explain::QueryPlan;
pub use schema::MAX_TABLE_PREFIX_LEN;
pub use transaction::SqliteOutboxTx;

use row::db;
use schema::Statements;
use write::Woken;

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
}

impl SqliteStoreBuilder {
    /// Puts the table (`{prefix}outbox`) and its migrations table behind a prefix, so several
    /// outboxes can share one file. ASCII letters, digits and `_`, not starting with a digit,
    /// at most [`MAX_TABLE_PREFIX_LEN`] characters. Empty by default.
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

    /// Validates the configuration, opens the file (creating it if missing), switches it to
    /// WAL mode and brings the schema up to date.
    pub async fn open(self) -> Result<SqliteOutboxStore, StoreError> {
        self.validate()?;
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
            .map_err(db("open"))?;
        let sql = Statements::new(&self.table_prefix);
        migrate(&writer, &sql).await?;
        // Connected after the writer, so the file exists and is already in WAL mode.
        let reader = SqlitePoolOptions::new()
            .max_connections(self.read_connections)
            .connect_with(options)
            .await
            .map_err(db("open"))?;
        let (wakeups, _) = broadcast::channel(WAKEUP_CHANNEL_CAPACITY);
        Ok(SqliteOutboxStore {
            path: self.path,
            writer,
            write_turn: Mutex::new(()),
            reader,
            sql,
            clock: self.clock,
            limits: self.limits,
            wakeups,
        })
    }
}

/// Runs the migrations this file lacks, in one transaction.
async fn migrate(writer: &SqlitePool, sql: &Statements) -> Result<(), StoreError> {
    const OP: &str = "migrate";
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(db(OP))?;
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {} (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        sql.migrations_table
    );
    sqlx::query(AssertSqlSafe(create))
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
                "table {} is at schema version {applied}, newer than this build's {}",
                sql.table,
                schema::latest_version()
            ),
        ));
    }
    for (version, statements) in schema::pending_migrations(&sql.table, applied) {
        for statement in statements {
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await
                .map_err(db(OP))?;
        }
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (version, applied_at) VALUES (?1, ?2)",
            sql.migrations_table
        )))
        .bind(version)
        .bind(SystemClock.now_millis())
        .execute(&mut *tx)
        .await
        .map_err(db(OP))?;
    }
    tx.commit().await.map_err(db(OP))
}

/// An outbox in one SQLite file. See the module docs for the concurrency design.
#[derive(Debug)]
pub struct SqliteOutboxStore {
    path: PathBuf,
    /// A pool of exactly one connection, used only while holding `write_turn`.
    writer: SqlitePool,
    /// Whose turn it is to write: FIFO, and with no timeout (unlike a pool acquire).
    write_turn: Mutex<()>,
    reader: SqlitePool,
    sql: Statements,
    clock: Arc<dyn Clock>,
    limits: DraftLimits,
    wakeups: broadcast::Sender<WakeUp>,
}

impl SqliteOutboxStore {
    /// Opens (creating if missing) the outbox in the file at `path`, with default settings.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::builder(path).open().await
    }

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
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name of the outbox table (`{prefix}outbox`).
    pub fn table_name(&self) -> &str {
        &self.sql.table
    }

    /// Closes every connection, waiting for them to finish. Later calls fail with
    /// [`StoreError::Unavailable`].
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }

    /// Waits for the turn to write and opens a `BEGIN IMMEDIATE` transaction. The turn is
    /// held for as long as the returned guard lives: keep it alongside the transaction.
    async fn begin_write(
        &self,
        op: &'static str,
    ) -> Result<(MutexGuard<'_, ()>, Transaction<'static, Sqlite>), StoreError> {
        let turn = self.write_turn.lock().await;
        let tx = match self.writer.begin_with("BEGIN IMMEDIATE").await {
            Err(sqlx::Error::InvalidSavePointStatement) => {
                // A COMMIT that failed on a full disk ends SQLite's transaction but leaves
                // sqlx's transaction depth on the connection at one: every later BEGIN
                // fails, even once space returns. That connection cannot be repaired from
                // here; close it and begin on a fresh one.
                let mut stale = self.writer.acquire().await.map_err(db(op))?;
                stale.close_on_drop();
                drop(stale);
                tracing::warn!(path = %self.path.display(), "replaced the SQLite write connection after a failed transaction");
                self.writer.begin_with("BEGIN IMMEDIATE").await
            }
            begun => begun,
        }
        .map_err(db(op))?;
        Ok((turn, tx))
    }

    fn wake(&self, lanes: Woken) {
        for (lane, target) in lanes {
            // No receivers is fine: nobody is idle-waiting.
            let _ = self.wakeups.send(WakeUp::Lane { lane, target });
        }
    }
}

/// Commits on success, rolls back on failure (dropping the transaction would too, later).
async fn finish<T>(
    tx: Transaction<'static, Sqlite>,
    result: Result<T, StoreError>,
    op: &'static str,
) -> Result<T, StoreError> {
    match result {
        Ok(value) => {
            tx.commit().await.map_err(db(op))?;
            Ok(value)
        }
        Err(error) => {
            // The original error is the one worth reporting.
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

#[async_trait]
impl OutboxStore for SqliteOutboxStore {
    fn draft_limits(&self) -> DraftLimits {
        self.limits
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        const OP: &str = "enqueue";
        let mut woken = Woken::new();
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let result = write::enqueue(&self.sql, &mut tx, drafts, now, &mut woken).await;
        let answers = finish(tx, result, OP).await?;
        self.wake(woken);
        Ok(answers)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        const OP: &str = "claim";
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let result = write::claim(&self.sql, &mut tx, request, now).await;
        finish(tx, result, OP).await
    }

    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: &str = "ack";
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let result = write::ack(&self.sql, &mut tx, claims, now).await;
        finish(tx, result, OP).await
    }

    /// One write transaction: the acks, then the claim, one commit. A failed claim rolls back
    /// to a savepoint after the acks, so the acks still commit and the failure is reported in
    /// [`AckAndClaim::claimed`].
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
    ) -> Result<AckAndClaim, StoreError> {
        const OP: &str = "ack_and_claim";
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let acked = match write::ack(&self.sql, &mut tx, acks, now).await {
            Ok(acked) => acked,
            Err(error) => return finish(tx, Err(error), OP).await,
        };
        let claimed = match write::savepoint(&mut tx, "claim").await {
            Ok(()) => {
                let claimed = write::claim(&self.sql, &mut tx, request, now).await;
                match write::end_savepoint(&mut tx, "claim", claimed.is_ok()).await {
                    Ok(()) => claimed,
                    Err(error) => return finish(tx, Err(error), OP).await,
                }
            }
            Err(error) => Err(error),
        };
        finish(tx, Ok(()), OP).await?;
        Ok(AckAndClaim { acked, claimed })
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        const OP: &str = "nack";
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let result = write::nack(&self.sql, &mut tx, nacks, now).await;
        finish(tx, result, OP).await
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: &str = "extend_lease";
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let result = write::extend_lease(&self.sql, &mut tx, claims, lease, now).await;
        finish(tx, result, OP).await
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: &str = "release";
        let mut woken = Woken::new();
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let result = write::release(&self.sql, &mut tx, claims, now, &mut woken).await;
        let outcomes = finish(tx, result, OP).await?;
        self.wake(woken);
        Ok(outcomes)
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let now = self.clock.now_millis();
        read::next_due(&self.sql, &self.reader, lane, target, ordering, now).await
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        let now = self.clock.now_millis();
        read::stats(&self.sql, &self.reader, filter, now).await
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        read::list(&self.sql, &self.reader, filter, page).await
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        read::get(&self.sql, &self.reader, outbox_id).await
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        const OP: &str = "requeue_dead_letters";
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let now = self.clock.now_millis();
        let result = write::requeue_dead_letters(&self.sql, &mut tx, filter, now).await;
        let requeued = finish(tx, result, OP).await?;
        self.wake(requeued.iter().cloned().collect());
        Ok(LaneCount::tally(requeued))
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        const OP: &str = "discard_dead_letters";
        let (_turn, mut tx) = self.begin_write(OP).await?;
        let result = write::discard_dead_letters(&self.sql, &mut tx, filter).await;
        finish(tx, result, OP).await
    }

    async fn purge(&self, request: &PurgeRequest) -> Result<u64, StoreError> {
        const OP: &str = "purge";
        let batch_size = request.batch_size.max(1);
        let mut purged = 0u64;
        for (status, older_than) in request.ages() {
            let cutoff = self.clock.now_millis().saturating_sub(older_than);
            if request.dry_run {
                purged += read::purge_count(
                    &self.sql,
                    &self.reader,
                    status,
                    cutoff,
                    request.lane.as_ref(),
                )
                .await?;
                continue;
            }
            loop {
                // One transaction per batch, giving up the turn in between, so claims and
                // acks are never held up for longer than one batch.
                let (_turn, mut tx) = self.begin_write(OP).await?;
                let result = write::purge_batch(
                    &self.sql,
                    &mut tx,
                    status,
                    cutoff,
                    request.lane.as_ref(),
                    batch_size,
                )
                .await;
                let deleted = finish(tx, result, OP).await?;
                purged += deleted;
                if deleted < batch_size as u64 {
                    break;
                }
            }
        }
        Ok(purged)
    }

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.wakeups.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_cache_and_memory_map_sizes_are_checked() {
        let builder = SqliteOutboxStore::builder("outbox.db");
        assert!(builder.validate().is_ok());
        for bad in [0, MIN_CACHE_SIZE - 1, MAX_MEMORY_SIZE + 1] {
            let err = builder.clone().cache_size(bad).validate().unwrap_err();
            assert_eq!(err.field, "cache_size", "{bad}");
        }
        let err = builder
            .clone()
            .mmap_size(MAX_MEMORY_SIZE + 1)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "mmap_size");
        assert!(builder
            .cache_size(MIN_CACHE_SIZE)
            .mmap_size(0)
            .validate()
            .is_ok());
    }

    /// Every connection, the writer and each reader, runs with the configured sizes.
    #[tokio::test]
    async fn connections_get_the_page_cache_and_memory_map() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteOutboxStore::builder(dir.path().join("outbox.db"))
            .cache_size(3 * 1024 * 1024 + 1)
            .mmap_size(1 << 20)
            .open()
            .await
            .unwrap();
        for pool in [&store.writer, &store.reader] {
            let cache: i64 = sqlx::query("PRAGMA cache_size")
                .fetch_one(pool)
                .await
                .unwrap()
                .get(0);
            assert_eq!(cache, -(3 * 1024 + 1), "KiB, rounded up");
            let map: i64 = sqlx::query("PRAGMA mmap_size")
                .fetch_one(pool)
                .await
                .unwrap()
                .get(0);
            assert_eq!(map, 1 << 20);
        }
        let default = SqliteOutboxStore::open(dir.path().join("default.db"))
            .await
            .unwrap();
        let cache: i64 = sqlx::query("PRAGMA cache_size")
            .fetch_one(&default.writer)
            .await
            .unwrap()
            .get(0);
        assert_eq!(cache, -((DEFAULT_CACHE_SIZE / 1024) as i64));
    }

    /// The hot statements must find their rows through an index: a full scan would make
    /// every claim slower as the delivered tail grows.
    #[tokio::test]
    async fn hot_statements_use_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap();
        let sql = &store.sql;
        for (statement, index) in [
            (&sql.skip.claim_doomed, "outbox_leases"),
            (&sql.block.claim_lapsed, "outbox_leases"),
            (&sql.skip.claim_ready, "outbox_ready"),
            (&sql.block.claim_ready, "outbox_ready"),
            (&sql.skip.claim_runs, "outbox_ready"),
            (&sql.block.claim_runs, "outbox_ready"),
            (&sql.block.next_due, "outbox_ready"),
            (&sql.oldest_due, "outbox_pending"),
            (&sql.purge_batch, "outbox_finished"),
            (&sql.find_dedupe, "outbox_dedupe"),
            (&sql.ack, "sqlite_autoindex_outbox_1"),
            (&sql.nack, "sqlite_autoindex_outbox_1"),
            (&sql.extend, "sqlite_autoindex_outbox_1"),
            (&sql.release, "sqlite_autoindex_outbox_1"),
            (&sql.mark_claimed, "INTEGER PRIMARY KEY"),
            (&sql.dead_letter_lapsed, "INTEGER PRIMARY KEY"),
        ] {
            let plan: Vec<String> =
                sqlx::query(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {statement}")))
                    .fetch_all(&store.reader)
                    .await
                    .unwrap()
                    .iter()
                    .map(|row| row.get(3))
                    .collect();
            assert!(
                plan.iter().any(|step| step.contains(index)),
                "{index} unused: {plan:#?}"
            );
            assert!(
                !plan
                    .iter()
                    .any(|step| step.starts_with("SCAN outbox") || step.starts_with("SCAN c")),
                "full scan: {plan:#?}"
            );
        }
    }
}
