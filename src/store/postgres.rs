//! `PostgresOutboxStore`: the production store (feature `postgres`).
//!
//! - **In the caller's transaction.** `Outbox::enqueue_in_tx` writes the
//!   outbox row with the service's business rows: both commit or neither does.
//! - **Many relays, one database.** A claim is one statement that commits at once,
//!   `FOR UPDATE SKIP LOCKED`, and enforces per-key order itself, so relays in different
//!   processes never hold two messages of one key (see `sql/claim_block.sql` for the
//!   argument). No lock is held while a handler runs; leases and fencing tokens do the rest.
//! - **The database's clock.** Due times and lease deadlines are computed by PostgreSQL, so
//!   relays on machines with skewed clocks agree. A [`Clock`] injected through
//!   [`PostgresConfig::clock`] replaces it (tests).
//! - **Schema.** Embedded, idempotent migrations ([`PostgresOutboxStore::migrate`]) create
//!   `"{schema}"."{table_prefix}_messages"` and `"{schema}"."{table_prefix}_migrations"`,
//!   with partial indexes over live rows only, so a long tail of delivered and dead rows
//!   does not slow claims.
//! - **Cost.** A claim reads lapsed claims and due key heads in index order and stops at
//!   its limit; rows queued behind a key's head are not in the index it scans (the
//!   key-head marker, `schema/heads.rs`). One statement per ordering policy, never a bind
//!   parameter that changes the plan. `PostgresOutboxStore::explain` (feature `plans`) shows
//!   the plan on your data.
//! - **Session settings.** The pool [`PostgresOutboxStore::connect_with`] builds runs with
//!   `jit = off` and [`PostgresConfig::statement_timeout`]; build your own pool with
//!   [`PostgresConfig::session_options`] to get the same. Through a transaction pooler
//!   (PgBouncer's `pool_mode = transaction`, [`Pooler::Transaction`]) each call is a
//!   transaction that sets them with `SET LOCAL`, and no statement is named (`call.rs`).
//! - **Wake-ups.** Enqueue, release and requeue notify on a channel named after the schema
//!   and prefix; PostgreSQL coalesces them to one per transaction and lane. Each store
//!   listens on a connection of its own and forwards them to [`OutboxBackend::subscribe`].
//! - **Local hand-off.** The store writes a draft with a pre-claim already claimed
//!   ([`Capabilities::pre_claim`]), so an [`Outbox`](crate::store::Outbox) over it hands
//!   what it enqueues (`enqueue`, `enqueue_many`, not `enqueue_in_tx`, whose commit is the
//!   caller's) to an idle lane of a relay running on the same outbox, when that lane has a
//!   credit ([`crate::store::hand_off`]), after the commit, without a NOTIFY. Its
//!   [`Enqueued`] answer then shows the message `claimed`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_relay::store::postgres::PostgresOutboxStore;
//! use outbox_relay::{Outbox, OutboxMessageDraft};
//!
//! let store = PostgresOutboxStore::connect("postgres://app@localhost/app").await?;
//! let mut tx = store.pool().begin().await?;
//! let outbox = Outbox::new(store);
//! // ... the service's own INSERTs and UPDATEs on `tx` ...
//! let draft = OutboxMessageDraft::new("orders", "billing", serde_json::json!({"id": 7}))?;
//! outbox.enqueue_in_tx(&mut tx, draft).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

mod admin;
mod call;
mod claim;
mod config;
mod cycle;
mod enqueue;
#[cfg(feature = "plans")]
mod explain;
mod fenced;
mod heads;
mod key_state;
mod lane_control;
mod list;
mod row;
mod schema;
mod served;
mod sql;
mod sweep;
mod unreadable;
mod vacuum;
mod wake;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPool;
use sqlx::{AssertSqlSafe, Postgres, Transaction};
use tokio::sync::broadcast;
use uuid::Uuid;

pub use schema::{MAX_SCHEMA_LEN, MAX_TABLE_PREFIX_LEN};

use crate::message::ClaimRef;
use crate::message::{DraftLimits, OutboxMessage, UnixMillis};
use crate::store::AckMode;
use crate::store::StoreOp;
use crate::store::{
    AckAndClaim, Capabilities, ClaimBatch, ClaimOutcome, ClaimRequest, DraftBatch, Enqueued,
    LaneCount, LaneStats, MessageFilter, Nack, NackOutcome, NextDue, OrderingPolicy, OutboxBackend,
    Page, PageRequest, PurgeRequest, StoreError, WakeUp, WAKEUP_CHANNEL_CAPACITY,
};
use crate::time::{duration_millis, Clock};
pub use config::{pool_options, Pooler, PostgresConfig, PING_IF_IDLE_FOR};
// The store's defaults live beside the daemon's PostgreSQL settings, which builds without
// the `postgres` feature read too (the docs' checks, a config validated without the driver).
pub use crate::database::postgres::options::{
    PostgresOptions, CLAIMS_IN_FLIGHT, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_MIGRATION_LOCK_TIMEOUT,
    DEFAULT_MIGRATION_STATEMENT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT, DEFAULT_VACUUM_EVERY,
};
#[cfg(feature = "plans")]
#[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
pub use explain::Explained;
use fenced::FencedBatch;
use row::{db_error, unsigned};
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

/// The outbox in PostgreSQL. See the module docs.
#[derive(Debug)]
pub struct PostgresOutboxStore {
    pool: PgPool,
    names: Names,
    sql: Statements,
    limits: DraftLimits,
    clock: Option<Arc<dyn Clock>>,
    /// How the relay's own transactions begin: [`PostgresConfig::synchronous_commit`], and
    /// the session settings under a transaction pooler.
    relay_begin_sql: String,
    /// How the store's other transactions begin (the session settings under a transaction
    /// pooler).
    begin_sql: String,
    /// Whether statements are prepared under a name and cached; not through a transaction
    /// pooler ([`Pooler::Transaction`]), where each call is also a transaction (`call.rs`).
    named_statements: bool,
    /// Vacuums the table as rows leave live ([`PostgresConfig::vacuum_every`]).
    vacuum: vacuum::Vacuum,
    /// Clears stray key-head marks in the background (`sweep.rs`).
    sweep_sql: sweep::SweepSql,
    sweeps: sweep::Sweeps,
    /// Whether the relay's statements commit asynchronously (`synchronous_commit` false).
    async_commit: bool,
    /// [`PostgresConfig::cycle_function`].
    cycle_function: bool,
    /// [`PostgresConfig::migration_lock_timeout`] and `migration_statement_timeout`.
    migration_timeouts: schema::MigrationTimeouts,
    /// Whether the database has this build's cycle function (`cycle.rs`).
    cycle_ready: AtomicBool,
    wakeups: broadcast::Sender<WakeUp>,
    /// `None`: not listening (a transaction pooler and no [`PostgresConfig::listen_url`]).
    listener: Option<wake::ListenerGuard>,
}

impl PostgresOutboxStore {
    /// What the store can do beyond the primitives, but for [`Capabilities::listen`],
    /// which depends on whether it listens (not through a transaction pooler without
    /// [`PostgresConfig::listen_url`]).
    pub const CAPABILITIES: Capabilities = Capabilities::none()
        .with_ack_and_claim()
        .with_user_transactions()
        .with_pre_claim()
        // Two claims out, each on its own pooled connection and carrying its own acks: a
        // 10 k no-op drain at c=64 went 1.50x (medians of 3 rounds, every round of two above
        // every round of one) and 1.11x (side by side) as fast as with one where the cores
        // had idle time (load average 1.4-1.7, 2026-12-06); with both cores taken by other
        // work, 0.85-0.92x, as the cycles were then bound by CPU
        // (`examples/benchmark/HISTORY.md`, "Acks per claim").
        .with_claims_in_flight(CLAIMS_IN_FLIGHT)
        .with_delete_on_ack()
        .with_served_lanes();

    /// Connects with the default configuration (schema `public`, prefix `outbox`, the
    /// database's clock) and runs the migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connects with `config` and runs the migrations.
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let settings = &config.settings;
        let pool =
            config::pool_options(settings.acquire_timeout.unwrap_or(DEFAULT_ACQUIRE_TIMEOUT))
                .min_connections(settings.pool_min_connections)
                .max_connections(settings.pool_max_connections)
                .connect_with(config.connect_options(url)?)
                .await
                .map_err(|e| db_error(StoreOp::Connect, e))?;
        let store = Self::new(pool, config).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// A store over an existing pool, the service's own. Does not migrate (call
    /// [`Self::migrate`], or run the migrations at deploy time); starts listening for
    /// wake-ups, which takes one extra connection outside the pool.
    ///
    /// The relay's statements rely on their connections' session settings (`jit = off`,
    /// [`PostgresOptions::statement_timeout`]) and on a pool that pings only a connection
    /// idle for a second ([`pool_options`]); [`Self::connect_with`] builds such a pool.
    /// This one keeps the service's settings: the store reads them on one connection and
    /// logs a warning naming what differs (build the pool with
    /// [`PostgresConfig::session_options`] and [`pool_options`], or set them for the role:
    /// `ALTER ROLE … SET jit = off`). The pool's size is the relay's to check: a relay
    /// whose lanes may use more connections at once than the pool holds says so at start
    /// ([`RelayBuilder::connections_needed`](crate::relay::RelayBuilder::connections_needed)).
    pub async fn new(pool: PgPool, config: PostgresConfig) -> Result<Self, StoreError> {
        let names = Names::new(&config.schema, &config.table_prefix)?;
        let shortfalls = config::session_shortfalls(&pool, &config).await?;
        if !shortfalls.is_empty() {
            tracing::warn!(
                shortfalls = %shortfalls.join("; "),
                "the PostgreSQL pool given to the outbox store lacks the relay's session \
                 settings: build it with PostgresConfig::session_options and \
                 store::postgres::pool_options, or set them for the role"
            );
        }
        let (wakeups, _) = broadcast::channel(WAKEUP_CHANNEL_CAPACITY);
        let listen_options = config.listen_options()?;
        // LISTEN through a transaction pooler would hear nothing reliably (the server
        // connection it ran on goes to other clients): the lanes poll instead (`Pooler`).
        let listener = if config.settings.pooler == Pooler::Transaction && listen_options.is_none()
        {
            None
        } else {
            let channel = names.channel.clone();
            Some(wake::start(&pool, listen_options, channel, wakeups.clone()).await?)
        };
        let sql = Statements::new(&names, !config.settings.synchronous_commit)
            .map_err(|e| StoreError::database(StoreOp::Connect, e))?;
        let sweep_sql = sweep::SweepSql::new(&names, &config);
        let cycle_ready = schema::function_exists_in_pool(&pool, &sql.cycle_name).await?;
        Ok(Self {
            sql,
            async_commit: !config.settings.synchronous_commit,
            cycle_function: config.cycle_function,
            migration_timeouts: schema::MigrationTimeouts {
                lock: config.settings.lock_timeout,
                statement: config.migration_statement_timeout,
            },
            cycle_ready: AtomicBool::new(cycle_ready),
            pool,
            names,
            relay_begin_sql: config.relay_begin(),
            begin_sql: config.begin(),
            named_statements: config.named_statements(),
            vacuum: vacuum::Vacuum::new(config.settings.vacuum_every),
            sweep_sql,
            sweeps: sweep::Sweeps::default(),
            limits: config.limits,
            clock: config.clock,
            wakeups,
            listener,
        })
    }

    /// Creates or upgrades the schema. Idempotent; several processes may run it at once.
    /// A step that waits longer than [`PostgresConfig::migration_lock_timeout`] for a lock
    /// (a long transaction holding the outbox table) fails, naming the table and the
    /// sessions holding it, with nothing applied.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let cycle = (self.sql.cycle_name.as_str(), self.sql.cycle_create.as_str());
        schema::migrate(&self.pool, &self.names, &[cycle], self.migration_timeouts).await?;
        self.cycle_ready.store(true, Ordering::Relaxed);
        Ok(())
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

    /// The SQL of the migrations after version `from` up to version `to`, for `config`'s
    /// schema and table prefix: what [`Self::migrate`] runs, for a DBA to read or to run
    /// with their own tool. Each migration is a transaction of its own that records its
    /// version (first, so running it twice fails at once, changing nothing), under
    /// `config`'s migration lock and statement timeouts; its header says what it locks on a
    /// table with rows and how to run it online. `to` is at most
    /// [`Self::latest_schema_version`]; an empty range gives an empty text.
    ///
    /// ```
    /// use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
    /// let sql = PostgresOutboxStore::migration_sql(&PostgresConfig::default(), 0, 1)?;
    /// assert!(sql.contains("CREATE TABLE IF NOT EXISTS \"public\".\"outbox_messages\""));
    /// assert!(sql.contains("SET LOCAL lock_timeout = 5000"));
    /// # Ok::<(), outbox_relay::ValidationError>(())
    /// ```
    pub fn migration_sql(
        config: &PostgresConfig,
        from: i32,
        to: i32,
    ) -> Result<String, crate::message::ValidationError> {
        config.validate()?;
        crate::store::sql::migration_range(
            from.into(),
            to.into(),
            schema::latest_version().into(),
        )?;
        let names = Names::new(&config.schema, &config.table_prefix)?;
        let timeouts = schema::MigrationTimeouts {
            lock: config.settings.lock_timeout,
            statement: config.migration_statement_timeout,
        };
        Ok(schema::script(&names, timeouts, from, to))
    }

    /// The pool, e.g. to begin the transaction passed to `Outbox::enqueue_in_tx`.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The messages table, schema-qualified and quoted, for operators' queries.
    pub fn messages_table(&self) -> &str {
        &self.names.messages
    }

    /// The key of the session-level advisory lock a purge holds while it runs, so that of
    /// several relays sharing this outbox only one purges at a time (the others skip their
    /// pass and purge nothing). Derived from [`messages_table`](Self::messages_table), so
    /// outboxes in other schemas or with other prefixes never contend. It shows in
    /// `pg_locks` as `locktype = 'advisory'`, `classid`/`objid` its high and low halves.
    pub fn purge_lock_key(&self) -> i64 {
        // FNV-1a, 64 bits: stable across builds and platforms, unlike std's hashers.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in "outbox-relay purge "
            .bytes()
            .chain(self.names.messages.bytes())
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        i64::from_ne_bytes(hash.to_ne_bytes())
    }

    /// The LISTEN/NOTIFY channel of this outbox.
    pub fn notify_channel(&self) -> &str {
        &self.names.channel
    }

    /// A transaction of the store's, with the session settings under a transaction pooler.
    async fn begin(&self, op: StoreOp) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.pool
            .begin_with(AssertSqlSafe(self.begin_sql.clone()))
            .await
            .map_err(|e| db_error(op, e))
    }

    /// A transaction of the relay's own (claim, ack, nack): see
    /// [`PostgresConfig::synchronous_commit`].
    async fn relay_begin(&self, op: StoreOp) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.pool
            .begin_with(AssertSqlSafe(self.relay_begin_sql.clone()))
            .await
            .map_err(|e| db_error(op, e))
    }

    /// Counts the rows an ack took out of live, for the vacuum that follows them.
    fn retired_acks(&self, outcomes: &[ClaimOutcome]) {
        let acked = outcomes
            .iter()
            .filter(|o| **o == ClaimOutcome::Applied)
            .count();
        self.vacuum.retired(acked, &self.pool, &self.names.messages);
    }

    /// The full claim, which dead-letters lapsed last attempts, in a transaction of its own.
    async fn claim_dead_lettering(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        let mut tx = self.relay_begin(StoreOp::Claim).await?;
        let batch = self.claim_in(&mut tx, request).await?;
        tx.commit().await.map_err(|e| db_error(StoreOp::Claim, e))?;
        Ok(batch)
    }

    /// One request's claim: one round trip where it can be.
    async fn claim_one(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        self.sweep_soon(&request.lane, &request.target);
        if self.has_cycle() {
            // One round trip, `next_due` included when the claim is empty.
            let cycle = self.cycle(&[], request, AckMode::KeepDelivered).await?;
            if !cycle.lapsed_last {
                return Ok(cycle.batch);
            }
            return self.claim_dead_lettering(request).await;
        }
        // The common case is one statement, one round trip (`claim_fast`); only a lane with
        // a lapsed last attempt to dead-letter pays for the transaction that does it.
        let (mut batch, lapsed_last) = self.claim_fast(request).await?;
        if lapsed_last {
            // The one-statement claim claimed nothing: it leaves the lane to this one.
            batch = self.claim_dead_lettering(request).await?;
        } else if batch.messages.is_empty() {
            batch.next_due = NextDue::Known(
                self.next_due_alone(&request.lane, &request.target, request.ordering)
                    .await?,
            );
        }
        Ok(batch)
    }

    /// `ack_and_claim` for one request, its acks as `mode` says.
    async fn ack_and_claim_one(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
        mode: AckMode,
    ) -> Result<AckAndClaim, StoreError> {
        self.sweep_soon(&request.lane, &request.target);
        if self.has_cycle() {
            // One call: if it fails, it changed nothing, and the acks are made alone; the
            // answer then carries them with the claim's error, as the contract says. Only
            // an error of the acks themselves is an `Err`.
            return match self.cycle(acks, request, mode).await {
                Ok(cycle) => {
                    self.retired_acks(&cycle.acked);
                    let claimed = if cycle.lapsed_last {
                        self.claim_dead_lettering(request).await
                    } else {
                        Ok(cycle.batch)
                    };
                    Ok(AckAndClaim {
                        acked: cycle.acked,
                        claimed,
                    })
                }
                Err(error) => Ok(AckAndClaim {
                    acked: self.ack_alone(acks, mode).await?,
                    claimed: Err(error),
                }),
            };
        }
        // One transaction, so one commit, and the claim sees the acks (an acked head's
        // successor is claimable at once). If the claim fails, the transaction rolls back
        // and the acks are made alone.
        let op = StoreOp::AckAndClaim;
        let mut tx = self.relay_begin(op).await?;
        let acked = if acks.is_empty() {
            Vec::new()
        } else {
            self.ack_in(&mut tx, acks, mode).await?
        };
        let claimed = match self.claim_in(&mut tx, request).await {
            Ok(claimed) => claimed,
            Err(error) => {
                drop(tx);
                return Ok(AckAndClaim {
                    acked: self.ack_alone(acks, mode).await?,
                    claimed: Err(error),
                });
            }
        };
        tx.commit().await.map_err(|e| db_error(op, e))?;
        self.retired_acks(&acked);
        Ok(AckAndClaim {
            acked,
            claimed: Ok(claimed),
        })
    }

    /// The acks of a cycle whose claim failed, made on their own.
    async fn ack_alone(
        &self,
        acks: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        self.ack(acks, mode).await
    }

    async fn conn(&self, op: StoreOp) -> Result<PoolConnection<Postgres>, StoreError> {
        self.pool.acquire().await.map_err(|e| db_error(op, e))
    }

    fn now(&self) -> Option<UnixMillis> {
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
impl OutboxBackend for PostgresOutboxStore {
    fn capabilities(&self) -> Capabilities {
        if self.listener.is_some() {
            Self::CAPABILITIES.with_listen()
        } else {
            Self::CAPABILITIES
        }
    }

    fn draft_limits(&self) -> DraftLimits {
        self.limits
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        self.write_pooled(drafts).await
    }

    /// Claims request after request, each as it would be alone.
    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        let mut batches = Vec::with_capacity(requests.len());
        for request in requests {
            batches.push(self.claim_one(request).await?);
        }
        Ok(batches)
    }

    /// The ack as `mode` says: one transaction, its keys' heads promoted.
    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let mut tx = self.relay_begin(StoreOp::Ack).await?;
        let outcomes = self.ack_in(&mut tx, claims, mode).await?;
        tx.commit().await.map_err(|e| db_error(StoreOp::Ack, e))?;
        self.retired_acks(&outcomes);
        Ok(outcomes)
    }

    /// The acks and the first request's claim in one round trip (or one transaction); each
    /// further request is claimed after them, as [`claim`](Self::claim) claims it.
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        requests: &[ClaimRequest],
        mode: AckMode,
    ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
        let Some((first, rest)) = requests.split_first() else {
            return Ok(AckAndClaim {
                acked: self.ack_alone(acks, mode).await?,
                claimed: Ok(Vec::new()),
            });
        };
        let AckAndClaim { acked, claimed } = self.ack_and_claim_one(acks, first, mode).await?;
        let claimed = match claimed {
            Ok(batch) => self
                .claim(rest)
                .await
                .map(|more| std::iter::once(batch).chain(more).collect()),
            Err(error) => Err(error),
        };
        Ok(AckAndClaim { acked, claimed })
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        self.record_nacks(nacks).await
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        let op = StoreOp::ExtendLease;
        let batch = FencedBatch::new(claims);
        let mut call = self.call(op).await?;
        let rows = self
            .fenced(&mut call, op, &self.sql.extend_lease, &batch, |q| {
                q.bind(interval(lease))
            })
            .await?;
        call.finish(op).await?;
        Ok(batch.outcomes(&FencedBatch::applied(&rows, op)?, true))
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        let batch = FencedBatch::new(claims);
        let channel = self.names.channel.clone();
        let mut call = self.call(StoreOp::Release).await?;
        let rows = self
            .fenced(
                &mut call,
                StoreOp::Release,
                &self.sql.release,
                &batch,
                |q| q.bind(channel),
            )
            .await?;
        call.finish(StoreOp::Release).await?;
        Ok(batch.outcomes(&FencedBatch::applied(&rows, StoreOp::Release)?, false))
    }

    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        self.next_due_alone(lane, target, ordering).await
    }

    async fn lanes_next_due(
        &self,
        lanes: &[(String, String, OrderingPolicy)],
    ) -> Result<Vec<Option<Duration>>, StoreError> {
        self.lanes_next_due_of(lanes).await
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.stats_of(filter).await
    }

    async fn lanes_stats(&self, lanes: &[(String, String)]) -> Result<Vec<LaneStats>, StoreError> {
        self.lanes_stats_of(lanes).await
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        self.list_page(filter, page).await
    }

    async fn count_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.count_dead(filter).await
    }

    async fn blocked_keys(
        &self,
        lane: &str,
        target: &str,
        after: Option<i64>,
        limit: usize,
    ) -> Result<crate::store::BlockedKeys, StoreError> {
        self.blocked_keys_of(lane, target, after, limit).await
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.get_one(outbox_id).await
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        self.requeue_dead(filter).await
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.discard_dead(filter).await
    }

    /// Holds the [purge lock](Self::purge_lock_key) on a connection of its own: when
    /// another relay holds it, purges nothing and returns no counts. A dry run takes no lock.
    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        self.purge_locked(request).await
    }

    async fn pause_lane(
        &self,
        request: &crate::store::LanePauseRequest,
    ) -> Result<crate::store::LanePause, StoreError> {
        self.record_pause(request).await
    }

    async fn resume_lane(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<crate::store::LanePause>, StoreError> {
        self.lift_pause(lane, target).await
    }

    async fn lane_pauses(&self) -> Result<Vec<crate::store::LanePause>, StoreError> {
        self.all_pauses().await
    }

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.wakeups.subscribe()
    }

    fn max_connections(&self) -> Option<u32> {
        Some(self.pool.options().get_max_connections())
    }

    async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
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
