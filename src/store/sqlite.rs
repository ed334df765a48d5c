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
//! A message is as durable as its enqueue: enqueues (and a caller's own transaction,
//! [`Outbox::begin`](crate::store::Outbox::begin)) commit with `synchronous = FULL`, so a message whose
//! enqueue returned survives a power cut, not just a process crash. Operators' requeue,
//! discard and purge commit the same way.
//!
//! The relay's own bookkeeping (claim, ack, `ack_and_claim`, nack, lease extension,
//! release) commits with `synchronous = NORMAL` unless
//! [`SqliteStoreBuilder::synchronous_commit`] asks otherwise: the commit appends to the WAL
//! without syncing it, as PostgreSQL's relay commits run with `synchronous_commit = off`.
//! A process crash loses nothing (the WAL is written before the commit returns); a power
//! cut or an OS crash can lose the relay's last commits, a suffix in commit order (the WAL
//! is one sequence, and the next synced commit or checkpoint syncs all before it). A lost
//! claim or ack leaves its message pending or claimed as before, so it is delivered again,
//! which at-least-once delivery allows, and per-key order holds.
//!
//! # Checkpoints
//!
//! Copying the WAL back into the database file runs on a connection of its own, in the
//! background (`checkpoint.rs`), not in the commit that crossed SQLite's threshold while
//! every other write waited for it. [`SqliteStoreBuilder::background_checkpoints`] turns
//! it off.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;
use sqlx::{Sqlite, Transaction};
use tokio::sync::{broadcast, Mutex, MutexGuard};
use uuid::Uuid;

use crate::message::ClaimRef;
use crate::message::{DraftLimits, OutboxMessage};
use crate::store::StoreOp;
use crate::store::{
    AckAndClaim, AckMode, BlockedKeys, Capabilities, ClaimBatch, ClaimOutcome, ClaimRequest,
    DraftBatch, Enqueued, LaneCount, LaneStats, MessageFilter, Nack, NackOutcome, OrderingPolicy,
    OutboxBackend, Page, PageRequest, PurgeRequest, StoreError, WakeUp,
};
use crate::time::Clock;

mod builder;
mod checkpoint;
#[cfg(feature = "plans")]
mod explain;
mod key_state;
mod lane_control;
mod read;
mod row;
mod schema;
mod served;
mod statement;
#[cfg(test)]
mod tests;
mod transaction;
mod write;

pub use builder::{
    SqliteStoreBuilder, DEFAULT_BUSY_TIMEOUT, DEFAULT_CACHE_SIZE, DEFAULT_READ_CONNECTIONS,
    MAX_MEMORY_SIZE, MIN_CACHE_SIZE,
};
#[cfg(feature = "plans")]
#[cfg_attr(docsrs, doc(cfg(feature = "plans")))]
pub use explain::QueryPlan;
pub use schema::MAX_TABLE_PREFIX_LEN;
pub use transaction::SqliteOutboxTx;

use row::db;
use schema::Statements;
use write::Woken;

/// An outbox in one SQLite file. See the module docs for the concurrency design.
#[derive(Debug)]
pub struct SqliteOutboxStore {
    path: PathBuf,
    /// A pool of exactly one connection, used only while holding `write_turn`.
    writer: SqlitePool,
    /// Whose turn it is to write: FIFO, and with no timeout (unlike a pool acquire).
    /// Shared with the background checkpoint, which takes it for its second pass.
    write_turn: Arc<Mutex<()>>,
    /// Whether the relay's own commits sync the WAL (see the module docs).
    synchronous_commit: bool,
    checkpoints: checkpoint::Checkpoints,
    reader: SqlitePool,
    sql: Statements,
    clock: Arc<dyn Clock>,
    limits: DraftLimits,
    wakeups: broadcast::Sender<WakeUp>,
}

impl SqliteOutboxStore {
    /// What the store can do beyond the primitives.
    pub const CAPABILITIES: Capabilities = Capabilities::none()
        .with_ack_and_claim()
        .with_user_transactions()
        .with_delete_on_ack()
        .with_served_lanes();

    /// The newest schema version this build of the crate migrates a file to.
    pub fn latest_schema_version() -> i64 {
        schema::latest_version()
    }

    /// The SQL of the migrations after version `from` up to version `to`, for the table
    /// prefix `prefix`: the statements [`Self::open`] runs, for a DBA to read or run with
    /// their own tool. Each migration is a transaction of its own that records its version
    /// first (running it twice fails at once, changing nothing). `to` is at most
    /// [`Self::latest_schema_version`]; an empty range gives an empty text.
    ///
    /// ```
    /// use outbox_relay::store::sqlite::SqliteOutboxStore;
    /// let sql = SqliteOutboxStore::migration_sql("", 0, 1)?;
    /// assert!(sql.contains("CREATE TABLE IF NOT EXISTS outbox ("));
    /// # Ok::<(), outbox_relay::ValidationError>(())
    /// ```
    pub fn migration_sql(
        prefix: &str,
        from: i64,
        to: i64,
    ) -> Result<String, crate::message::ValidationError> {
        schema::validate_table_prefix(prefix)?;
        crate::store::sql::migration_range(from, to, schema::latest_version())?;
        Ok(schema::script(&Statements::new(prefix).table, from, to))
    }

    /// Opens (creating if missing) the outbox in the file at `path`, with default settings.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::builder(path).open().await
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
        self.checkpoints.close().await;
        self.writer.close().await;
        self.reader.close().await;
    }

    /// Waits for the turn to write and opens a `BEGIN IMMEDIATE` transaction. The turn is
    /// held for as long as the returned guard lives: keep it alongside the transaction.
    ///
    /// `commit`: whose transaction it is, which decides whether its commit syncs the WAL.
    async fn begin_write(
        &self,
        op: StoreOp,
        commit: Commit,
    ) -> Result<(MutexGuard<'_, ()>, Transaction<'static, Sqlite>), StoreError> {
        let begin = begin_statement(commit, self.synchronous_commit);
        let turn = self.write_turn.lock().await;
        let tx = match self.writer.begin_with(begin).await {
            Err(sqlx::Error::InvalidSavePointStatement) => {
                // A COMMIT that failed on a full disk ends SQLite's transaction but leaves
                // sqlx's transaction depth on the connection at one: every later BEGIN
                // fails, even once space returns. That connection cannot be repaired from
                // here; close it and begin on a fresh one.
                let mut stale = self.writer.acquire().await.map_err(db(op))?;
                stale.close_on_drop();
                drop(stale);
                tracing::warn!(path = %self.path.display(), "replaced the SQLite write connection after a failed transaction");
                self.writer.begin_with(begin).await
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

    /// Commits on success, rolls back on failure (dropping the transaction would too, later).
    /// A commit counts towards the next background checkpoint.
    async fn finish<T>(
        &self,
        tx: Transaction<'static, Sqlite>,
        result: Result<T, StoreError>,
        op: StoreOp,
    ) -> Result<T, StoreError> {
        match result {
            Ok(value) => {
                tx.commit().await.map_err(db(op))?;
                self.checkpoints.committed(&self.write_turn);
                Ok(value)
            }
            Err(error) => {
                // The original error is the one worth reporting.
                let _ = tx.rollback().await;
                Err(error)
            }
        }
    }
}

/// Whose write transaction it is: it decides whether the commit syncs the WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// The relay's own bookkeeping (claim, ack, nack, lease extension, release): with
    /// `synchronous_commit` off, `synchronous = NORMAL` (module docs).
    Relay,
    /// Everything else: enqueues, the caller's own transactions, operators' requeue,
    /// discard and purge. Always `synchronous = FULL`.
    Durable,
}

/// The statement that opens a write transaction: the connection's `synchronous` for this
/// commit, then `BEGIN IMMEDIATE`, in one call. Set on every transaction, because the one
/// write connection serves both kinds.
fn begin_statement(commit: Commit, synchronous_commit: bool) -> &'static str {
    if commit == Commit::Relay && !synchronous_commit {
        "PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE"
    } else {
        "PRAGMA synchronous = FULL; BEGIN IMMEDIATE"
    }
}

#[async_trait]
impl OutboxBackend for SqliteOutboxStore {
    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    fn draft_limits(&self) -> DraftLimits {
        self.limits
    }

    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
        const OP: StoreOp = StoreOp::Enqueue;
        let mut woken = Woken::new();
        let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
        let now = self.clock.now_millis();
        let result = write::enqueue(&self.sql, &mut tx, drafts, now, &mut woken).await;
        let answers = self.finish(tx, result, OP).await?;
        self.wake(woken);
        Ok(answers)
    }

    /// Every request's claim in one write transaction, one after another: one commit.
    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
        const OP: StoreOp = StoreOp::Claim;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let now = self.clock.now_millis();
        let result = write::claim_each(&self.sql, &mut tx, requests, now).await;
        self.finish(tx, result, OP).await
    }

    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: StoreOp = StoreOp::Ack;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let now = self.clock.now_millis();
        let result = write::ack(&self.sql, &mut tx, claims, now, mode).await;
        self.finish(tx, result, OP).await
    }

    /// One write transaction: the acks, then the claims, one commit. A failed claim rolls
    /// back to a savepoint after the acks, so the acks still commit and the failure is
    /// reported in [`AckAndClaim::claimed`].
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        requests: &[ClaimRequest],
        mode: AckMode,
    ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
        const OP: StoreOp = StoreOp::AckAndClaim;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let now = self.clock.now_millis();
        let acked = match write::ack(&self.sql, &mut tx, acks, now, mode).await {
            Ok(acked) => acked,
            Err(error) => return self.finish(tx, Err(error), OP).await,
        };
        let claimed = match write::savepoint(&mut tx).await {
            Ok(()) => {
                let claimed = write::claim_each(&self.sql, &mut tx, requests, now).await;
                match write::end_savepoint(&mut tx, claimed.is_ok()).await {
                    Ok(()) => claimed,
                    Err(error) => return self.finish(tx, Err(error), OP).await,
                }
            }
            Err(error) => Err(error),
        };
        self.finish(tx, Ok(()), OP).await?;
        Ok(AckAndClaim { acked, claimed })
    }

    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        const OP: StoreOp = StoreOp::Nack;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let now = self.clock.now_millis();
        let result = write::nack(&self.sql, &mut tx, nacks, now).await;
        self.finish(tx, result, OP).await
    }

    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: StoreOp = StoreOp::ExtendLease;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let now = self.clock.now_millis();
        let result = write::extend_lease(&self.sql, &mut tx, claims, lease, now).await;
        self.finish(tx, result, OP).await
    }

    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        const OP: StoreOp = StoreOp::Release;
        let mut woken = Woken::new();
        let (_turn, mut tx) = self.begin_write(OP, Commit::Relay).await?;
        let now = self.clock.now_millis();
        let result = write::release(&self.sql, &mut tx, claims, now, &mut woken).await;
        let outcomes = self.finish(tx, result, OP).await?;
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

    async fn lanes_next_due(
        &self,
        lanes: &[(String, String, OrderingPolicy)],
    ) -> Result<Vec<Option<Duration>>, StoreError> {
        let now = self.clock.now_millis();
        read::lanes_next_due(&self.sql, &self.reader, lanes, now).await
    }

    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        let now = self.clock.now_millis();
        read::stats(&self.sql, &self.reader, filter, now).await
    }

    /// Every lane's stats in one transaction (the counts table and one probe per lane with
    /// pending messages), then those of `lanes`: a file a relay serves holds few others.
    async fn lanes_stats(&self, lanes: &[(String, String)]) -> Result<Vec<LaneStats>, StoreError> {
        let now = self.clock.now_millis();
        let wanted: std::collections::HashSet<(&str, &str)> = lanes
            .iter()
            .map(|(lane, target)| (lane.as_str(), target.as_str()))
            .collect();
        let mut all = read::stats(&self.sql, &self.reader, &MessageFilter::all(), now).await?;
        all.retain(|s| wanted.contains(&(s.lane.as_str(), s.target.as_str())));
        Ok(all)
    }

    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError> {
        read::list(&self.sql, &self.reader, filter, page).await
    }

    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        read::get(&self.sql, &self.reader, outbox_id).await
    }

    async fn count_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        key_state::count_dead_letters(&self.sql, &self.reader, filter).await
    }

    async fn blocked_keys(
        &self,
        lane: &str,
        target: &str,
        after: Option<i64>,
        limit: usize,
    ) -> Result<BlockedKeys, StoreError> {
        let (pairs, next_cursor) =
            key_state::blocked_key_pairs(&self.sql, &self.reader, lane, target, after, limit)
                .await?;
        crate::store::key_state::blocked_keys_from_pairs(self, pairs, next_cursor).await
    }

    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError> {
        const OP: StoreOp = StoreOp::RequeueDeadLetters;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
        let now = self.clock.now_millis();
        let result = write::requeue_dead_letters(&self.sql, &mut tx, filter, now).await;
        let requeued = self.finish(tx, result, OP).await?;
        self.wake(requeued.iter().cloned().collect());
        Ok(LaneCount::tally(requeued))
    }

    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        const OP: StoreOp = StoreOp::DiscardDeadLetters;
        let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
        let result = write::discard_dead_letters(&self.sql, &mut tx, filter).await;
        self.finish(tx, result, OP).await
    }

    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        const OP: StoreOp = StoreOp::Purge;
        let batch_size = request.batch_size.max(1);
        let lanes = row::lanes_json(&request.lanes, OP)?;
        let mut purged = Vec::new();
        for (status, older_than) in request.ages() {
            let cutoff = self.clock.now_millis().saturating_sub(older_than);
            if request.dry_run {
                purged.extend(
                    read::purge_count(
                        &self.sql,
                        &self.reader,
                        status,
                        cutoff,
                        lanes.as_deref(),
                        request.keeps_keyed(status),
                    )
                    .await?,
                );
                continue;
            }
            loop {
                // One transaction per batch, giving up the turn in between, so claims and
                // acks are never held up for longer than one batch.
                let (_turn, mut tx) = self.begin_write(OP, Commit::Durable).await?;
                let result = write::purge_batch(
                    &self.sql,
                    &mut tx,
                    status,
                    cutoff,
                    lanes.as_deref(),
                    batch_size,
                    request.keeps_keyed(status),
                )
                .await;
                let deleted = self.finish(tx, result, OP).await?;
                let done = deleted.len() < batch_size;
                purged.extend(LaneCount::tally(deleted));
                if done {
                    break;
                }
            }
        }
        Ok(LaneCount::sum(purged))
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

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.wakeups.subscribe()
    }
}
