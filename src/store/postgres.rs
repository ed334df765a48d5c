//! `PostgresOutboxStore`: the production store (feature `postgres`).
//!
//! - **In the caller's transaction.** [`PostgresOutboxStore::enqueue_in_tx`] writes the
//!   outbox row with the service's business rows: both commit or neither does.
//! - **Many relays, one database.** A claim is one statement that commits at once,
//!   `FOR UPDATE SKIP LOCKED`, and enforces per-key order itself, so relays in different
//!   processes never hold two messages of one key (see `sql.rs` for the argument). No lock
//!   is held while a handler runs; leases and fencing tokens do the rest.
//! - **The database's clock.** Due times and lease deadlines are computed by PostgreSQL, so
//!   relays on machines with skewed clocks agree. A [`Clock`] injected through
//!   [`PostgresConfig::clock`] replaces it (tests).
//! - **Schema.** Embedded, idempotent migrations ([`PostgresOutboxStore::migrate`]) create
//!   `"{schema}"."{table_prefix}_messages"` and `"{schema}"."{table_prefix}_migrations"`,
//!   with a partial index over claimable rows only, so a long tail of delivered and dead
//!   rows does not slow claims.
//! - **Wake-ups.** Enqueue, release and requeue notify on a channel named after the schema
//!   and prefix; PostgreSQL coalesces them to one per transaction and lane. Each store
//!   listens on a connection of its own and forwards them to [`OutboxStore::subscribe`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_relay::store::postgres::PostgresOutboxStore;
//! use outbox_relay::OutboxMessageDraft;
//!
//! let store = PostgresOutboxStore::connect("postgres://app@localhost/app").await?;
//! let mut tx = store.pool().begin().await?;
//! // ... the service's own INSERTs and UPDATEs on `tx` ...
//! let draft = OutboxMessageDraft::new("orders", "billing", serde_json::json!({"id": 7}))?;
//! store.enqueue_in_tx(&mut tx, draft).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

mod decode;
mod enqueue;
mod fenced;
mod listener;
mod schema;
mod sql;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Postgres, Row, Transaction};
use tokio::sync::broadcast;
use uuid::Uuid;

pub use schema::{MAX_SCHEMA_LEN, MAX_TABLE_PREFIX_LEN};

use crate::message::{DraftLimits, OutboxMessage, OutboxMessageDraft, ValidationError};
use crate::store::memory::LEASE_LAPSED_ERROR;
use crate::store::{
    duration_millis, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, Clock, Enqueued, LaneStats,
    MessageFilter, Nack, NackDisposition, NackOutcome, OrderingPolicy, OutboxStore, Page,
    PageRequest, StoreError, WakeUp, WAKEUP_CHANNEL_CAPACITY,
};
use decode::{db_error, unsigned};
use fenced::FencedBatch;
use schema::Names;
use sql::Statements;

/// The schema used unless configured otherwise.
pub const DEFAULT_SCHEMA: &str = "public";
/// The table prefix used unless configured otherwise: tables `outbox_messages` and
/// `outbox_migrations`.
pub const DEFAULT_TABLE_PREFIX: &str = "outbox";
/// The longest delay or lease the store writes (1,000 years): longer ones are cut to it, as
/// the in-memory store saturates, instead of overflowing PostgreSQL's timestamps.
const MAX_INTERVAL_MILLIS: i64 = 1_000 * 365 * 24 * 60 * 60 * 1_000;

/// Where and how a [`PostgresOutboxStore`] keeps its outbox.
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// The schema holding the tables (created if missing). Lowercase letters, digits and
    /// `_`, at most [`MAX_SCHEMA_LEN`] characters.
    pub schema: String,
    /// The tables' name prefix. Lowercase letters, digits and `_`, at most
    /// [`MAX_TABLE_PREFIX_LEN`] characters.
    pub table_prefix: String,
    /// The limits drafts are validated against.
    pub limits: DraftLimits,
    /// The store's clock. `None` (the default) uses the database's clock, which every relay
    /// shares; tests inject a [`crate::store::ManualClock`].
    pub clock: Option<Arc<dyn Clock>>,
    /// How long a call waits for a pool connection (only for the pool `connect_with`
    /// builds; a pool passed to `new` keeps its own settings).
    pub acquire_timeout: Duration,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.to_owned(),
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
            limits: DraftLimits::default(),
            clock: None,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
        }
    }
}

impl PostgresConfig {
    /// Sets the schema.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the table prefix.
    pub fn with_table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Sets the draft limits.
    pub fn with_limits(mut self, limits: DraftLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Injects a clock in place of the database's.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets how long a call waits for a pool connection.
    pub fn with_acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Checks the schema, prefix and timeout; the error names the field at fault.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.acquire_timeout.is_zero() {
            return Err(ValidationError::new(
                "acquire_timeout",
                "must be greater than zero",
            ));
        }
        Names::new(&self.schema, &self.table_prefix).map(|_| ())
    }
}

/// How long a store call made through [`PostgresOutboxStore::connect_with`]'s pool waits
/// for a connection before it fails with [`StoreError::Unavailable`]. Short, so a relay
/// notices an outage (and backs off) in seconds rather than sqlx's default 30 s.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The outbox in PostgreSQL. See the module docs.
#[derive(Debug)]
pub struct PostgresOutboxStore {
    pool: PgPool,
    names: Names,
    sql: Statements,
    limits: DraftLimits,
    clock: Option<Arc<dyn Clock>>,
    wakeups: broadcast::Sender<WakeUp>,
    _listener: listener::ListenerGuard,
}

impl PostgresOutboxStore {
    /// Connects with the default configuration (schema `public`, prefix `outbox`, the
    /// database's clock) and runs the migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connects with `config` and runs the migrations.
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let pool = PgPoolOptions::new()
            .acquire_timeout(config.acquire_timeout)
            .connect(url)
            .await
            .map_err(|e| db_error("connect", e))?;
        let store = Self::new(pool, config).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// A store over an existing pool. Does not migrate (call [`Self::migrate`], or run the
    /// migrations at deploy time); starts listening for wake-ups, which takes one extra
    /// connection outside the pool.
    pub async fn new(pool: PgPool, config: PostgresConfig) -> Result<Self, StoreError> {
        let names = Names::new(&config.schema, &config.table_prefix)?;
        let (wakeups, _) = broadcast::channel(WAKEUP_CHANNEL_CAPACITY);
        let listener = listener::start(&pool, names.channel.clone(), wakeups.clone()).await?;
        Ok(Self {
            sql: Statements::new(&names),
            pool,
            names,
            limits: config.limits,
            clock: config.clock,
            wakeups,
            _listener: listener,
        })
    }

    /// Creates or upgrades the schema. Idempotent; several processes may run it at once.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        schema::migrate(&self.pool, &self.names).await
    }

    /// The schema version applied in the database, read without any DDL (for roles
    /// without DDL rights, and for read-only admin commands): `None` when this schema and
    /// prefix hold no outbox. Compare with [`Self::latest_schema_version`].
    pub async fn schema_version(&self) -> Result<Option<i32>, StoreError> {
        schema::applied_version(&self.pool, &self.names).await
    }

    /// The newest schema version this build of the crate migrates to.
    pub fn latest_schema_version() -> i32 {
        schema::latest_version()
    }

    /// The pool, e.g. to begin the transaction passed to [`Self::enqueue_in_tx`].
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The messages table, schema-qualified and quoted, for operators' queries.
    pub fn messages_table(&self) -> &str {
        &self.names.messages
    }

    /// The LISTEN/NOTIFY channel of this outbox.
    pub fn notify_channel(&self) -> &str {
        &self.names.channel
    }

    /// Writes one message in the caller's transaction: it becomes visible, and wakes relays,
    /// only when `tx` commits. A dedupe key taken by a message another transaction has not
    /// committed yet makes this wait for that transaction to end.
    pub async fn enqueue_in_tx(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        draft: OutboxMessageDraft,
    ) -> Result<Enqueued, StoreError> {
        crate::store::single(self.enqueue_many_in_tx(tx, vec![draft]).await?)
    }

    /// Writes many messages in the caller's transaction. On an error nothing of this call
    /// is left in `tx` (a conflict undoes the rows already written); on a database error
    /// PostgreSQL has aborted `tx` anyway. `outbox_enqueued_total` counts the messages
    /// when they are written, before the caller commits (or rolls back).
    pub async fn enqueue_many_in_tx(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let plan = self.plan(drafts)?;
        match self.write(tx, &plan).await {
            Ok(answers) => {
                crate::metrics::record_enqueued(&answers);
                Ok(answers)
            }
            Err(failure) => {
                if !failure.inserted.is_empty() {
                    sqlx::query(AssertSqlSafe(self.sql.delete_ids.clone()))
                        .bind(&failure.inserted)
                        .execute(&mut **tx)
                        .await
                        .map_err(|e| db_error("enqueue (undo)", e))?;
                }
                Err(failure.error)
            }
        }
    }

    fn now(&self) -> Option<i64> {
        self.clock.as_ref().map(|clock| clock.now_millis())
    }
}

/// A duration as the milliseconds the store writes, cut to [`MAX_INTERVAL_MILLIS`].
fn interval(duration: Duration) -> i64 {
    duration_millis(duration).min(MAX_INTERVAL_MILLIS)
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl OutboxStore for PostgresOutboxStore {
    async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let plan = self.plan(drafts)?;
        if plan.drafts.is_empty() {
            return Ok(Vec::new());
        }
        if plan.drafts.iter().all(|d| d.dedupe_key.is_none()) {
            // One INSERT statement: atomic on its own, no transaction round trips.
            let mut conn = self
                .pool
                .acquire()
                .await
                .map_err(|e| db_error("enqueue", e))?;
            let answers = self.write(&mut conn, &plan).await.map_err(|f| f.error)?;
            crate::metrics::record_enqueued(&answers);
            return Ok(answers);
        }
        // A conflict found after some rows went in must take them back out: roll back.
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| db_error("enqueue", e))?;
        let answers = self.write(&mut tx, &plan).await.map_err(|f| f.error)?;
        tx.commit().await.map_err(|e| db_error("enqueue", e))?;
        crate::metrics::record_enqueued(&answers);
        Ok(answers)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        let op = "claim";
        let rows = sqlx::query(AssertSqlSafe(self.sql.claim.clone()))
            .bind(self.now())
            .bind(&request.lane)
            .bind(&request.target)
            .bind(to_i64(request.limit))
            .bind(interval(request.lease))
            .bind(&request.consumer_id)
            .bind(request.ordering == OrderingPolicy::Block)
            .bind(LEASE_LAPSED_ERROR)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(op, e))?;
        let mut batch = ClaimBatch::default();
        for (i, row) in rows.iter().enumerate() {
            if i == 0 {
                batch.dead_lettered = row.try_get("dead_ids").map_err(|e| db_error(op, e))?;
            }
            let id: Option<Uuid> = row.try_get("outbox_id").map_err(|e| db_error(op, e))?;
            if id.is_some() {
                batch.messages.push(decode::message(row)?);
            }
        }
        Ok(batch)
    }

    async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let batch = FencedBatch::new(claims);
        let rows = self.fenced("ack", &self.sql.ack, &batch, |q| q).await?;
        Ok(batch.outcomes(&FencedBatch::applied(&rows, "ack")?, false))
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        let op = "nack";
        let batch = FencedBatch::new(nacks.iter().map(|n| &n.claim));
        // The first nack of each claim is the one that counts, as in the reference store.
        let mut firsts: Vec<&Nack> = Vec::with_capacity(batch.ids.len());
        for (nack, &(_, first)) in nacks.iter().zip(&batch.slots) {
            if first {
                firsts.push(nack);
            }
        }
        let errors: Vec<&str> = firsts.iter().map(|n| n.error.as_str()).collect();
        let retries: Vec<Option<i64>> = firsts
            .iter()
            .map(|n| match n.disposition {
                NackDisposition::Retry(delay) => Some(interval(delay)),
                NackDisposition::Permanent => None,
            })
            .collect();
        let rows = self
            .fenced(op, &self.sql.nack, &batch, |q| q.bind(errors).bind(retries))
            .await?;
        let mut outcomes: HashMap<usize, NackOutcome> = HashMap::new();
        for row in &rows {
            let ord: i64 = row.try_get("ord").map_err(|e| db_error(op, e))?;
            let status: String = row.try_get("status").map_err(|e| db_error(op, e))?;
            let outcome = if status == "pending" {
                NackOutcome::Requeued
            } else {
                NackOutcome::DeadLettered
            };
            outcomes.insert(usize::try_from(ord - 1).unwrap_or(usize::MAX), outcome);
        }
        Ok(batch
            .slots
            .iter()
            .map(|&(slot, first)| match outcomes.get(&slot) {
                Some(outcome) if first => *outcome,
                _ => NackOutcome::LostClaim,
            })
            .collect())
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let op = "extend_lease";
        let batch = FencedBatch::new(claims);
        let rows = self
            .fenced(op, &self.sql.extend_lease, &batch, |q| {
                q.bind(interval(lease))
            })
            .await?;
        Ok(batch.outcomes(&FencedBatch::applied(&rows, op)?, true))
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let batch = FencedBatch::new(claims);
        let channel = self.names.channel.clone();
        let rows = self
            .fenced("release", &self.sql.release, &batch, |q| q.bind(channel))
            .await?;
        Ok(batch.outcomes(&FencedBatch::applied(&rows, "release")?, false))
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        let wait: Option<i64> = sqlx::query_scalar(AssertSqlSafe(self.sql.next_due.clone()))
            .bind(self.now())
            .bind(lane)
            .bind(target)
            .bind(ordering == OrderingPolicy::Block)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| db_error("next_due", e))?;
        Ok(wait.map(|ms| Duration::from_millis(unsigned(ms))))
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        let op = "stats";
        let rows = sqlx::query(AssertSqlSafe(self.sql.stats.clone()))
            .bind(self.now())
            .bind(&filter.lane)
            .bind(&filter.target)
            .bind(&filter.ordering_key)
            .bind(&filter.ids)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(op, e))?;
        let get = |row: &PgRow, column: &str| -> Result<u64, StoreError> {
            row.try_get::<i64, _>(column)
                .map(unsigned)
                .map_err(|e| db_error(op, e))
        };
        let mut lanes = rows
            .iter()
            .map(|row| {
                let oldest: Option<i64> = row
                    .try_get("oldest_pending_ms")
                    .map_err(|e| db_error(op, e))?;
                Ok(LaneStats {
                    lane: row.try_get("lane").map_err(|e| db_error(op, e))?,
                    target: row.try_get("target").map_err(|e| db_error(op, e))?,
                    pending: get(row, "pending")?,
                    claimed: get(row, "claimed")?,
                    delivered: get(row, "delivered")?,
                    dead_letter: get(row, "dead_letter")?,
                    oldest_pending_age: oldest.map(|ms| Duration::from_millis(unsigned(ms))),
                    blocked_keys: get(row, "blocked_keys")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // Sorted here, by bytes as the reference store does, not by the database collation.
        lanes.sort_by(|a, b| (&a.lane, &a.target).cmp(&(&b.lane, &b.target)));
        Ok(lanes)
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        // One row past the page tells whether another page exists.
        let rows = sqlx::query(AssertSqlSafe(self.sql.list.clone()))
            .bind(&filter.lane)
            .bind(&filter.target)
            .bind(&filter.ordering_key)
            .bind(&filter.ids)
            .bind(filter.status.map(|s| s.as_str()))
            .bind(page.after)
            .bind(to_i64(page.limit.saturating_add(1)))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error("list", e))?;
        let messages = rows
            .iter()
            .map(decode::message)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Page::from_overfetch(messages, page.limit))
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.sql.get.clone()))
            .bind(outbox_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| db_error("get", e))?;
        row.as_ref().map(decode::message).transpose()
    }

    async fn requeue_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let op = "requeue_dead_letters";
        let rows = sqlx::query(AssertSqlSafe(self.sql.requeue.clone()))
            .bind(self.now())
            .bind(&filter.lane)
            .bind(&filter.target)
            .bind(&filter.ordering_key)
            .bind(&filter.ids)
            .bind(&self.names.channel)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| db_error(op, e))?;
        // One row per (lane, target) requeued; none when nothing was.
        let mut per_lane = Vec::with_capacity(rows.len());
        for row in &rows {
            let lane: String = row.try_get("lane").map_err(|e| db_error(op, e))?;
            let target: String = row.try_get("target").map_err(|e| db_error(op, e))?;
            let requeued: i64 = row.try_get("requeued").map_err(|e| db_error(op, e))?;
            per_lane.push((lane, target, unsigned(requeued)));
        }
        crate::metrics::record_requeued(per_lane.iter().flat_map(|(lane, target, n)| {
            std::iter::repeat_n((lane.as_str(), target.as_str()), *n as usize)
        }));
        Ok(per_lane.iter().map(|(_, _, n)| n).sum())
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let done = sqlx::query(AssertSqlSafe(self.sql.discard.clone()))
            .bind(&filter.lane)
            .bind(&filter.target)
            .bind(&filter.ordering_key)
            .bind(&filter.ids)
            .execute(&self.pool)
            .await
            .map_err(|e| db_error("discard_dead_letters", e))?;
        Ok(done.rows_affected())
    }

    async fn purge(&self, older_than: Duration, batch_size: usize) -> Result<u64, StoreError> {
        let batch_size = batch_size.max(1);
        let mut purged = 0u64;
        loop {
            // One statement per batch, each its own transaction: no lock outlives a batch.
            let done = sqlx::query(AssertSqlSafe(self.sql.purge.clone()))
                .bind(self.now())
                .bind(interval(older_than))
                .bind(to_i64(batch_size))
                .execute(&self.pool)
                .await
                .map_err(|e| db_error("purge", e))?;
            purged += done.rows_affected();
            if done.rows_affected() < batch_size as u64 {
                return Ok(purged);
            }
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.wakeups.subscribe()
    }
}
