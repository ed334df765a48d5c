//! `MysqlOutboxStore`: the outbox in MySQL 8.0.19+ or MariaDB 10.6+, through sqlx's MySQL
//! driver.
//! The same semantics as [`InMemoryOutboxStore`](super::memory::InMemoryOutboxStore), row
//! for row (the conformance suite and the differential run check both).
//!
//! # How it differs from PostgreSQL
//!
//! - **No `NOTIFY`.** Wake-ups reach only the lanes of this process: an enqueue through the
//!   same store wakes them at once (an in-process broadcast sent after commit). A message
//!   written by another process, or by a service's own transaction, is found by an adaptive
//!   poll of the newest sequence (one index dive, every 50 ms after activity, backing off
//!   to once a second when quiet): within [`PICKUP_LATENCY`] of its commit.
//! - **No `RETURNING`** (MariaDB has `INSERT/DELETE … RETURNING`, MySQL has none at all),
//!   so no statement uses it, on either server. A claim is one transaction: it selects the
//!   rows it takes with `FOR UPDATE SKIP LOCKED`, in index order, stops at its limit, then
//!   updates them by primary key. The transaction commits at once, so no lock is held while
//!   a handler runs. An enqueue inserts, then reads the sequences of its rows back by
//!   `outbox_id`.
//! - **No partial indexes.** The claim reads two indexes over generated columns that are
//!   `NULL` for every row it must not see: `ready_at` (the due time of a pending row that
//!   heads its key, or has none) and `lapse_at` (the lease end of a claimed row). A range
//!   `ready_at <= now` skips the `NULL`s in the index, so a long delivered or dead tail
//!   never costs a claim anything but index size.
//! - **The store's clock, not the database's.** Timestamps are Unix milliseconds written
//!   by the store from its [`Clock`] (the system clock unless configured): relays sharing
//!   a database must keep their clocks in step (NTP), as with SQLite.
//!
//! # MySQL and MariaDB
//!
//! The statements are SQL both servers accept; the few that differ branch on the
//! [`Dialect`] the store asks the server for before its first transaction (`dialect.rs`).
//!
//! # Per-key order
//!
//! The head of each ordering key (its first pending or claimed message) carries
//! `key_head = 1`, so only heads appear in `ready_at`. The mark is kept by the store's own
//! statements, under a per-key row lock in the `{prefix}_keys` table that also records the
//! head's sequence: every write that can change a key's head (an enqueue, an ack, a nack or
//! lapse that dead-letters, a requeue) locks the key's row first and only then looks. An
//! enqueue in a caller's long transaction keeps the key's row locked until that
//! transaction ends, so an ack of the key's head waits for it and then sees the new row:
//! a key with live rows never lacks its head. Rows are locked before key rows everywhere
//! but in an enqueue, which locks key rows (in key order) before inserting rows nobody
//! else can hold, so the two orders cannot meet in a cycle. A deadlock the server still
//! reports (a caller's transaction that enqueues two keys in one order while an ack locks
//! them in the other) is retried by the store's own calls; a caller's transaction sees it
//! as an error, as any InnoDB deadlock.
//!
//! # Acks
//!
//! An ack is one transaction: a locking read of the rows named, a locking read of the key
//! rows of the heads among them, the write (an `UPDATE` to delivered, or with
//! `keep_delivered = false` a `DELETE`), then the keys' new heads (one read, one `UPDATE`
//! of both tables that marks and records them). An ack that a claim rides on
//! (`ack_and_claim`) shares the claim's transaction: one commit for both, which is what an
//! ack costs most here (InnoDB syncs its log at every commit unless the server is told
//! otherwise).
//!
//! # Isolation
//!
//! The store's transactions run at `READ COMMITTED`: every statement sees what committed
//! before it, and range scans take no gap locks (so a claim never blocks an enqueue). In a
//! caller's transaction ([`Outbox::enqueue_in_tx`](crate::store::Outbox::enqueue_in_tx)),
//! whatever its isolation, the enqueue reads what it decides on with locking reads, which
//! see the latest committed rows.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, MySql, Row, Transaction};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::message::{DraftLimits, OutboxMessage, ValidationError};
use crate::store::{AckAndClaim, AckMode};
use crate::store::{
    Capabilities, ClaimBatch, ClaimOutcome, ClaimRequest, DraftBatch, Enqueued, LaneCount,
    LanePause, LanePauseRequest, LaneStats, MessageFilter, Nack, NackOutcome, OrderingPolicy,
    OutboxBackend, Page, PageRequest, PurgeRequest, StoreError, StoreOp, WakeUp,
    WAKEUP_CHANNEL_CAPACITY,
};
use crate::time::UnixMillis;
use crate::time::{Clock, SystemClock};

mod admin;
mod claim;
mod dialect;
#[cfg(feature = "plans")]
mod explain;
mod fenced;
mod heads;
mod in_list;
mod lane_control;
mod list;
mod row;
mod schema;
mod served;
mod sql;
mod wake;
mod write;

pub use dialect::Dialect;
#[cfg(feature = "plans")]
#[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
pub use explain::{Access, ClaimPlan, Explain, ListPlan, TableRead};
pub use schema::MAX_TABLE_PREFIX_LEN;
pub use wake::{WATCH_MAX_INTERVAL, WATCH_MIN_INTERVAL};

use row::db_error;
use schema::Names;

/// The table prefix used unless configured otherwise: tables `outbox_messages`,
/// `outbox_keys`, `outbox_lane_control` and `outbox_migrations`.
pub const DEFAULT_TABLE_PREFIX: &str = "outbox";

/// How long a call waits for a pool connection by default.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`MysqlOutboxStore::migrate`] waits for the migration lock (`GET_LOCK`) that
/// another process running the migrations holds.
pub const DEFAULT_MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a message enqueued by another process waits before an idle relay of this
/// process is woken for it, plus one round trip: MySQL has no notifications between
/// processes, so an adaptive poll of the newest sequence finds it ([`WATCH_MAX_INTERVAL`],
/// `wake.rs`). An enqueue through the same store wakes its lanes at once.
/// `tests/mysql/wakeups.rs` measures both.
pub const PICKUP_LATENCY: Duration = WATCH_MAX_INTERVAL;

/// How many times a call of the store's own is run again after the server chose it as a
/// deadlock victim (or saw a dedupe key committed under it) before the error is returned.
const RETRIES: usize = 3;

/// Where and how a [`MysqlOutboxStore`] keeps its outbox.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MysqlConfig {
    /// The tables' name prefix, in the connection's database. Lowercase letters, digits and
    /// `_`, at most [`MAX_TABLE_PREFIX_LEN`] characters.
    pub table_prefix: String,
    /// The limits drafts are validated against.
    pub limits: DraftLimits,
    /// The store's clock (tests inject a [`ManualClock`](crate::time::ManualClock)).
    pub clock: Arc<dyn Clock>,
    /// How long a call waits for a pool connection (only for the pool
    /// [`MysqlOutboxStore::connect_with`] builds).
    pub acquire_timeout: Duration,
    /// How long [`MysqlOutboxStore::migrate`] waits for another process's migration.
    pub migration_lock_timeout: Duration,
}

impl Default for MysqlConfig {
    fn default() -> Self {
        Self {
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
            limits: DraftLimits::default(),
            clock: Arc::new(SystemClock),
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            migration_lock_timeout: DEFAULT_MIGRATION_LOCK_TIMEOUT,
        }
    }
}

impl MysqlConfig {
    /// Sets the table prefix.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Sets the draft limits.
    pub fn limits(mut self, limits: DraftLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets how long a call waits for a pool connection.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Sets how long a migration waits for another process's.
    pub fn migration_lock_timeout(mut self, timeout: Duration) -> Self {
        self.migration_lock_timeout = timeout;
        self
    }

    /// Checks every field; the error names the field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        schema::validate_table_prefix(&self.table_prefix)
    }
}

/// The outbox in MySQL or MariaDB. See the module docs.
#[derive(Debug)]
pub struct MysqlOutboxStore {
    pool: MySqlPool,
    names: Names,
    limits: DraftLimits,
    clock: Arc<dyn Clock>,
    migration_lock_timeout: Duration,
    wakeups: Arc<broadcast::Sender<WakeUp>>,
    /// The adaptive poll that wakes lanes for other processes' enqueues (`wake.rs`).
    watch: wake::Watch,
}

impl MysqlOutboxStore {
    /// What the store can do beyond the primitives.
    pub const CAPABILITIES: Capabilities = Capabilities::none()
        .with_user_transactions()
        .with_delete_on_ack()
        .with_served_lanes();

    /// Connects with the default configuration and runs the migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, MysqlConfig::default()).await
    }

    /// Connects with `config` and runs the migrations.
    pub async fn connect_with(url: &str, config: MysqlConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let options: MySqlConnectOptions = url
            .parse()
            .map_err(|e| StoreError::from(ValidationError::new("database_url", format!("{e}"))))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(config.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(|e| db_error(StoreOp::Connect, e))?;
        let store = Self::new(pool, config)?;
        store.probe_dialect(StoreOp::Connect).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// A store over an existing pool. Does not migrate: call [`Self::migrate`], or run the
    /// migrations at deploy time.
    pub fn new(pool: MySqlPool, config: MysqlConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let (wakeups, _) = broadcast::channel(WAKEUP_CHANNEL_CAPACITY);
        Ok(Self {
            pool,
            names: Names::new(&config.table_prefix),
            limits: config.limits,
            clock: config.clock,
            migration_lock_timeout: config.migration_lock_timeout,
            wakeups: Arc::new(wakeups),
            watch: wake::Watch::default(),
        })
    }

    /// Creates or upgrades the tables. Idempotent; several processes may run it at once
    /// (they take turns under `GET_LOCK`).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.probe_dialect(StoreOp::Migrate).await?;
        schema::migrate(&self.pool, &self.names, self.migration_lock_timeout).await
    }

    /// The schema version applied in the database, `None` when this prefix holds no outbox.
    pub async fn schema_version(&self) -> Result<Option<i64>, StoreError> {
        schema::applied_version(&self.pool, &self.names).await
    }

    /// The newest schema version this build of the crate migrates to.
    pub fn latest_schema_version() -> i64 {
        schema::latest_version()
    }

    /// The SQL of the migrations after version `from` up to version `to`, for the table
    /// prefix `prefix`: the files in `migrations/mysql/` with the prefix's table names,
    /// whose statements [`Self::migrate`] runs, for a DBA to read or run with their own tool. `to` is at most [`Self::latest_schema_version`]; an empty range gives
    /// an empty text.
    ///
    /// ```
    /// use outbox_relay::store::mysql::MysqlOutboxStore;
    /// let sql = MysqlOutboxStore::migration_sql("outbox", 0, 1)?;
    /// assert!(sql.contains("CREATE TABLE IF NOT EXISTS `outbox_messages` ("));
    /// # Ok::<(), outbox_relay::ValidationError>(())
    /// ```
    pub fn migration_sql(prefix: &str, from: i64, to: i64) -> Result<String, ValidationError> {
        schema::validate_table_prefix(prefix)?;
        crate::store::sql::migration_range(from, to, schema::latest_version())?;
        Ok(schema::script(&Names::new(prefix), from, to))
    }

    /// The pool, e.g. to begin the transaction passed to `Outbox::enqueue_in_tx`.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The messages table (quoted), for operators' queries.
    pub fn messages_table(&self) -> &str {
        &self.names.messages
    }

    /// The server's dialect: MariaDB or MySQL (asked once, then kept; see [`Dialect`]).
    pub async fn dialect(&self) -> Result<Dialect, StoreError> {
        self.probe_dialect(StoreOp::Connect).await
    }

    /// Asks the server for its dialect the first time; later calls answer what it said.
    async fn probe_dialect(&self, op: StoreOp) -> Result<Dialect, StoreError> {
        if let Some(known) = self.names.known_dialect() {
            return Ok(known);
        }
        let mut conn = self.pool.acquire().await.map_err(|e| db_error(op, e))?;
        let found = dialect::probe(&mut conn, op).await?;
        Ok(self.names.learn_dialect(found))
    }

    fn now(&self) -> UnixMillis {
        self.clock.now_millis()
    }

    /// A transaction of the store's own, at `READ COMMITTED` (module docs).
    async fn begin(&self, op: StoreOp) -> Result<Transaction<'static, MySql>, StoreError> {
        // Statements that differ between the servers may run in it.
        self.probe_dialect(op).await?;
        self.pool
            .begin_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
            .await
            .map_err(|e| db_error(op, e))
    }

    fn wake(&self, lanes: impl IntoIterator<Item = (String, String)>) {
        let lanes: std::collections::BTreeSet<(String, String)> = lanes.into_iter().collect();
        for (lane, target) in lanes {
            // No receivers is fine: nobody is idle-waiting.
            let _ = self.wakeups.send(WakeUp::Lane { lane, target });
        }
    }

    /// Writes drafts on a caller's connection, inside the caller's transaction (the
    /// backend half of `Outbox::enqueue_in_tx`).
    pub(crate) async fn write_in_tx(
        &self,
        conn: &mut sqlx::MySqlConnection,
        drafts: &DraftBatch,
    ) -> Result<Vec<Enqueued>, StoreError> {
        if self.names.known_dialect().is_none() {
            let found = dialect::probe(conn, StoreOp::Enqueue).await?;
            self.names.learn_dialect(found);
        }
        write::write(conn, &self.names, drafts, self.now(), true).await
    }
}

/// Runs a call of the store's own again when the server made it a deadlock victim, or when
/// a dedupe key it checked was committed by another transaction before its insert: both
/// leave nothing behind (the transaction is rolled back) and succeed on a second run.
macro_rules! retrying {
    ($body:expr) => {{
        let mut tries = 0;
        loop {
            match $body.await {
                Err(error) if tries < RETRIES && row::is_transient(&error) => tries += 1,
                answer => break answer,
            }
        }
    }};
}

#[async_trait]
impl OutboxBackend for MysqlOutboxStore {
    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    fn draft_limits(&self) -> DraftLimits {
        self.limits
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        let answers = retrying!(self.write_once(&drafts))?;
        self.wake(
            answers
                .iter()
                .filter(|a| !a.duplicate)
                .map(|a| (a.message.lane.clone(), a.message.target.clone())),
        );
        Ok(answers)
    }

    /// Every request's claim in one transaction, one after another.
    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        retrying!(self.claim_once(requests))
    }

    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        retrying!(self.ack_once(claims, mode))
    }

    /// One transaction for both (one commit, not two): the claims see what the acks freed.
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        requests: &[ClaimRequest],
        mode: AckMode,
    ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
        retrying!(self.ack_and_claim_once(acks, requests, mode))
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        retrying!(self.nack_once(nacks))
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        retrying!(self.extend_once(claims, lease))
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let (outcomes, lanes) = retrying!(self.release_once(claims))?;
        self.wake(lanes);
        Ok(outcomes)
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| db_error(StoreOp::NextDue, e))?;
        claim::next_due(&mut conn, &self.names, lane, target, ordering, self.now()).await
    }

    /// One statement finds the lanes with a live row (`sql/live_lanes.sql`); only those are
    /// asked `next_due`, one after another on the same connection. An idle relay's lanes
    /// with nothing pending or claimed cost that one statement.
    async fn lanes_next_due(
        &self,
        lanes: &[(String, String, OrderingPolicy)],
    ) -> Result<Vec<Option<Duration>>, StoreError> {
        const OP: StoreOp = StoreOp::NextDue;
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        let asked: Vec<(&str, &str)> = lanes
            .iter()
            .map(|(lane, target, _)| (lane.as_str(), target.as_str()))
            .collect();
        let asked = serde_json::to_string(&asked).map_err(|e| StoreError::database(OP, e))?;
        let mut conn = self.pool.acquire().await.map_err(|e| db_error(OP, e))?;
        let rows = sqlx::query(AssertSqlSafe(Arc::clone(&self.names.sql.live_lanes)))
            .bind(asked)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| db_error(OP, e))?;
        let mut live = vec![false; lanes.len()];
        for row in &rows {
            let i: i64 = row.try_get("i").map_err(|e| db_error(OP, e))?;
            let found: i64 = row.try_get("live").map_err(|e| db_error(OP, e))?;
            let place = usize::try_from(i - 1).ok();
            if let Some(slot) = place.and_then(|i| live.get_mut(i)) {
                *slot = found != 0;
            }
        }
        let now = self.now();
        let mut due = Vec::with_capacity(lanes.len());
        for ((lane, target, ordering), live) in lanes.iter().zip(live) {
            due.push(if live {
                claim::next_due(&mut conn, &self.names, lane, target, *ordering, now).await?
            } else {
                None
            });
        }
        Ok(due)
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.stats_of(filter).await
    }

    async fn lanes_stats(&self, lanes: &[(String, String)]) -> Result<Vec<LaneStats>, StoreError> {
        self.lanes_stats_of(lanes).await
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        self.list_of(filter, page).await
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.get_one(outbox_id).await
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        let counts = retrying!(self.requeue_once(filter))?;
        self.wake(counts.iter().map(|c| (c.lane.clone(), c.target.clone())));
        Ok(counts)
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        retrying!(self.discard_once(filter))
    }

    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        self.purge_rows(request).await
    }

    /// This store's enqueues and requeues at once; other processes' enqueues through the
    /// adaptive poll, which runs while anybody subscribes (`wake.rs`).
    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        let receiver = self.wakeups.subscribe();
        self.watch.ensure(&self.pool, &self.names, &self.wakeups);
        receiver
    }

    fn max_connections(&self) -> Option<u32> {
        Some(self.pool.options().get_max_connections())
    }

    async fn pause_lane(&self, request: &LanePauseRequest) -> Result<LanePause, StoreError> {
        self.record_pause(request).await
    }

    async fn resume_lane(&self, lane: &str, target: &str) -> Result<Option<LanePause>, StoreError> {
        self.lift_pause(lane, target).await
    }

    async fn lane_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        self.all_pauses().await
    }

    async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: std::time::Duration,
    ) -> Result<(), StoreError> {
        self.record_served_lanes(lanes, served_for).await
    }

    async fn unserved_lanes(
        &self,
        limit: usize,
    ) -> Result<Vec<crate::store::UnservedLane>, StoreError> {
        self.unserved(limit).await
    }

    async fn pending_lanes(
        &self,
        prefixes: &[(String, String)],
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.matching_lanes(prefixes, limit).await
    }
}
