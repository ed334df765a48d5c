//! [`Outbox`]: the one store type services, the relay, the binary and tests hold, over any
//! [`OutboxBackend`]. What every backend used to repeat is done here, once: drafts are
//! validated and their dedupe keys planned, the caller's trace context captured, every call
//! timed and reported to the [`StoreHook`]s, and what this process enqueues handed to its
//! idle lanes (`store::hand_off`) when the backend can write a draft already claimed.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::backend::{single, single_batch, AckMode};
use super::enqueue::{self, PreClaim};
use super::hand_off::{HandOff, Taken};
use super::{
    AckAndClaim, CallOutcome, Capabilities, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest,
    Enqueued, LaneCount, LaneStats, MessageFilter, Nack, NackOutcome, OrderingPolicy,
    OutboxBackend, Page, PageRequest, PurgeRequest, StoreCall, StoreError, StoreHook, StoreOp,
    WakeUp,
};
use crate::message::{DraftLimits, OutboxMessage, OutboxMessageDraft};

/// The outbox over one backend. Cheap to clone: clones share the backend, the hooks and
/// the hand-off registry, so a message enqueued through any clone can be handed to a lane
/// of a relay running on another.
///
/// ```
/// # async fn example() -> Result<(), outbox_relay::StoreError> {
/// use outbox_relay::{InMemoryOutboxStore, Outbox, OutboxMessageDraft};
/// let outbox = Outbox::new(InMemoryOutboxStore::new()); // counts outbox_enqueued_total, …
/// let draft = OutboxMessageDraft::new("orders", "billing", serde_json::json!({"order": 1}))?;
/// let written = outbox.enqueue(draft).await?;
/// assert!(!written.duplicate);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Outbox {
    backend: Arc<dyn OutboxBackend>,
    /// The same backend, to reach its own API (a transaction, `explain`, its pool).
    concrete: Arc<dyn Any + Send + Sync>,
    hooks: Arc<[Arc<dyn StoreHook>]>,
    /// Whether calls are recorded in the crate's store metrics (`metrics::record_store_call`).
    metrics: bool,
    hand_off: Option<Arc<HandOff>>,
    limits: DraftLimits,
    capabilities: Capabilities,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("backend", &self.backend)
            .field("hooks", &self.hooks)
            .field("metrics", &self.metrics)
            .field("capabilities", &self.capabilities)
            .finish()
    }
}

impl Outbox {
    /// An outbox over `backend` that records the crate's store metrics
    /// (`outbox_enqueued_total`, `outbox_requeued_total`: [`crate::metrics`]) and has no
    /// other hooks. Give the relay this outbox ([`OutboxRelay::builder`](crate::OutboxRelay::builder)
    /// takes it by reference and keeps a clone), so the two share hooks and hand-off.
    pub fn new<B: OutboxBackend>(backend: B) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    /// An outbox over a backend shared with other owners (who may call its own API), as
    /// [`Outbox::new`]. It has a hand-off registry of its own: a relay on another outbox
    /// over the same backend takes only what is enqueued through that one, as a relay in
    /// another process would (the simulation's relays are such).
    pub fn from_arc<B: OutboxBackend>(backend: Arc<B>) -> Self {
        let capabilities = backend.capabilities();
        Self {
            limits: backend.draft_limits(),
            hand_off: capabilities.pre_claim.then(|| Arc::new(HandOff::new())),
            concrete: backend.clone(),
            backend,
            hooks: Arc::new([]),
            metrics: true,
            capabilities,
        }
    }

    /// This outbox without the crate's store metrics: for a service that records its own
    /// through a hook, or a test that counts calls itself. Clones made before keep them.
    pub fn without_metrics(mut self) -> Self {
        self.metrics = false;
        self
    }

    /// This outbox with one more hook, told about every call made through it and its
    /// clones made after this. Clones made before keep the hooks they had.
    pub fn with_hook(mut self, hook: impl StoreHook + 'static) -> Self {
        let mut hooks = self.hooks.to_vec();
        hooks.push(Arc::new(hook));
        self.hooks = hooks.into();
        self
    }

    /// The backend, as the type it is, for its own API (PostgreSQL's `explain` or pool,
    /// SQLite's checkpoints); `None` when it is another type.
    pub fn backend<B: OutboxBackend>(&self) -> Option<&B> {
        self.concrete.downcast_ref::<B>()
    }

    /// The backend itself, for a backend wrapper that forwards to it (a test's fault
    /// injector). A call made here bypasses validation, hooks and hand-off.
    pub fn as_backend(&self) -> &Arc<dyn OutboxBackend> {
        &self.backend
    }

    /// What the backend can do beyond the primitives.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// The limits drafts are validated against.
    pub fn draft_limits(&self) -> DraftLimits {
        self.limits
    }

    /// The registry through which a relay's lanes take what this outbox enqueues, without a
    /// claim ([`hand_off`](super::hand_off) module docs): present when the backend writes
    /// pre-claimed drafts ([`Capabilities::pre_claim`]: PostgreSQL does).
    pub fn hand_off(&self) -> Option<&Arc<HandOff>> {
        self.hand_off.as_ref()
    }

    /// Tells every hook that a call finished.
    pub(crate) fn report(&self, op: StoreOp, started: Instant, outcome: CallOutcome<'_>) {
        if self.hooks.is_empty() && !self.metrics {
            return;
        }
        let call = StoreCall {
            op,
            duration: started.elapsed(),
            outcome,
        };
        if self.metrics {
            crate::metrics::record_store_call(&call);
        }
        for hook in self.hooks.iter() {
            hook.finished(&call);
        }
    }

    async fn timed<T>(
        &self,
        op: StoreOp,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let answer = call.await;
        match &answer {
            Ok(_) => self.report(op, started, CallOutcome::Done),
            Err(error) => self.report(op, started, CallOutcome::Failed(error)),
        }
        answer
    }

    /// Writes one message (validated first). A repeated dedupe key returns the first message
    /// with `duplicate: true`, or [`StoreError::Conflict`] if the content differs.
    pub async fn enqueue(&self, draft: OutboxMessageDraft) -> Result<Enqueued, StoreError> {
        single(self.enqueue_many(vec![draft]).await?)
    }

    /// Writes many messages atomically: all are validated first, and either all are
    /// written (or found as duplicates) or none is.
    pub async fn enqueue_many(
        &self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let started = Instant::now();
        let answer = self.write(drafts).await;
        match &answer {
            Ok(answers) => self.report(StoreOp::Enqueue, started, CallOutcome::Enqueued(answers)),
            Err(error) => self.report(StoreOp::Enqueue, started, CallOutcome::Failed(error)),
        }
        answer
    }

    async fn write(&self, drafts: Vec<OutboxMessageDraft>) -> Result<Vec<Enqueued>, StoreError> {
        let (mut batch, plan) = enqueue::plan(drafts, &self.limits)?;
        if batch.is_empty() {
            return plan.answers(Vec::new());
        }
        // Drafts a lane of this process takes: written claimed, handed to it after the
        // commit. A credit not used goes back when its `Taken` drops.
        let taken = self.take_credits(&mut batch);
        let sent_at = tokio::time::Instant::now();
        let written = self.backend.write_drafts(batch).await?;
        for (taken, answer) in taken.into_iter().zip(&written) {
            let Some((taken, token)) = taken else {
                continue;
            };
            if !answer.duplicate && answer.message.claim_token == Some(token) {
                taken.deliver(answer.message.clone(), sent_at);
            } else {
                taken.give_back();
            }
        }
        plan.answers(written)
    }

    /// Takes a hand-off credit for each draft a lane of this process may take (no ordering
    /// key, no delay) and marks the draft pre-claimed for that lane.
    fn take_credits(&self, batch: &mut enqueue::DraftBatch) -> Vec<Option<(Taken, Uuid)>> {
        let Some(hand_off) = &self.hand_off else {
            return Vec::new();
        };
        let taken: Vec<Option<(Taken, Uuid)>> = batch
            .drafts()
            .iter()
            .map(|d| {
                (d.ordering_key.is_none() && d.delay.is_zero())
                    .then(|| hand_off.take(&d.lane, &d.target))
                    .flatten()
                    .map(|taken| (taken, Uuid::new_v4()))
            })
            .collect();
        if taken.iter().any(Option::is_some) {
            batch.set_pre_claims(
                taken
                    .iter()
                    .map(|t| {
                        t.as_ref().map(|(taken, token)| PreClaim {
                            consumer_id: taken.consumer_id().to_owned(),
                            lease: taken.lease(),
                            claim_token: *token,
                        })
                    })
                    .collect(),
            );
        }
        taken
    }

    /// Claims up to `limit` claimable messages of one (lane, target). See the
    /// [module docs](super).
    pub async fn claim(&self, request: &ClaimRequest) -> Result<ClaimBatch, StoreError> {
        let started = Instant::now();
        let answer = self
            .backend
            .claim(std::slice::from_ref(request))
            .await
            .and_then(single_batch);
        match &answer {
            Ok(batch) => self.report(StoreOp::Claim, started, CallOutcome::Claimed(batch)),
            Err(error) => self.report(StoreOp::Claim, started, CallOutcome::Failed(error)),
        }
        answer
    }

    /// Marks claims delivered. One answer per claim, in order.
    pub async fn ack(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.ack_with(claims, AckMode::KeepDelivered).await
    }

    /// Acks claims as `mode` says: marks their rows delivered, or deletes them
    /// ([`AckMode::Delete`], on a backend with
    /// [`Capabilities::delete_on_ack`](super::Capabilities::delete_on_ack); elsewhere
    /// [`StoreError::Unsupported`]). One answer per claim, in order.
    pub async fn ack_with(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.timed(StoreOp::Ack, async {
            self.can_ack(mode)?;
            self.backend.ack(claims, mode).await
        })
        .await
    }

    /// Refuses [`AckMode::Delete`] unless the backend says
    /// [`Capabilities::delete_on_ack`](super::Capabilities::delete_on_ack).
    fn can_ack(&self, mode: AckMode) -> Result<(), StoreError> {
        if mode == AckMode::Delete && !self.capabilities.delete_on_ack {
            return Err(StoreError::Unsupported {
                op: StoreOp::Ack,
                what: "this store cannot delete a row at its ack (keep_delivered = false)"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// Acks finished deliveries, then claims the next messages: one round trip where the
    /// backend can ([`Capabilities::ack_and_claim`]). An `Err` means nothing is known to be
    /// recorded; once the acks are, a failed claim comes back in [`AckAndClaim::claimed`].
    pub async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
    ) -> Result<AckAndClaim, StoreError> {
        self.ack_and_claim_with(acks, request, AckMode::KeepDelivered)
            .await
    }

    /// [`Outbox::ack_and_claim`], its acks as `mode` says ([`Outbox::ack_with`]).
    pub async fn ack_and_claim_with(
        &self,
        acks: &[ClaimRef],
        request: &ClaimRequest,
        mode: AckMode,
    ) -> Result<AckAndClaim, StoreError> {
        let started = Instant::now();
        // With no acks the mode says nothing, and there is nothing to refuse.
        let mode = if acks.is_empty() {
            AckMode::KeepDelivered
        } else {
            mode
        };
        let answer = match self.can_ack(mode) {
            Err(error) => Err(error),
            Ok(()) => self
                .backend
                .ack_and_claim(acks, std::slice::from_ref(request), mode)
                .await
                .map(|answer| AckAndClaim {
                    acked: answer.acked,
                    claimed: answer.claimed.and_then(single_batch),
                }),
        };
        match &answer {
            Ok(AckAndClaim {
                claimed: Err(error),
                ..
            })
            | Err(error) => self.report(StoreOp::AckAndClaim, started, CallOutcome::Failed(error)),
            Ok(AckAndClaim {
                claimed: Ok(batch), ..
            }) => self.report(StoreOp::AckAndClaim, started, CallOutcome::Claimed(batch)),
        }
        answer
    }

    /// Records failed deliveries. One answer per nack, in order.
    pub async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
        self.timed(StoreOp::Nack, self.backend.nack(nacks)).await
    }

    /// Extends the leases of claims still held, to `lease` from now.
    pub async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.timed(
            StoreOp::ExtendLease,
            self.backend.extend_lease(claims, lease),
        )
        .await
    }

    /// Returns claims unused: pending, due now, the attempt not counted.
    pub async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.timed(StoreOp::Release, self.backend.release(claims))
            .await
    }

    /// How long until the next message of (lane, target) may be claimable; `Some(ZERO)`
    /// when one is claimable now, `None` when there is nothing to wait for.
    pub async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError> {
        self.timed(
            StoreOp::NextDue,
            self.backend.next_due(lane, target, ordering),
        )
        .await
    }

    /// [`next_due`](Self::next_due) of each of `lanes` (lane, target, ordering policy), in
    /// order, in one call where the backend can ([`OutboxBackend::lanes_next_due`]); timed
    /// as a `next_due` call.
    pub async fn lanes_next_due(
        &self,
        lanes: &[(String, String, OrderingPolicy)],
    ) -> Result<Vec<Option<Duration>>, StoreError> {
        self.timed(StoreOp::NextDue, self.backend.lanes_next_due(lanes))
            .await
    }

    /// Counts per (lane, target) among the messages the filter selects.
    pub async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
        self.timed(StoreOp::Stats, self.backend.stats(filter)).await
    }

    /// The stats of each of `lanes` (lane, target) that has messages, in one call where the
    /// backend can ([`OutboxBackend::lanes_stats`]); timed as a `stats` call.
    pub async fn lanes_stats(
        &self,
        lanes: &[(String, String)],
    ) -> Result<Vec<LaneStats>, StoreError> {
        self.timed(StoreOp::Stats, self.backend.lanes_stats(lanes))
            .await
    }

    /// Pauses (lane, target) for every relay on this store, until
    /// [`resume_lane`](Self::resume_lane); see [`OutboxBackend::pause_lane`].
    pub async fn pause_lane(
        &self,
        request: &super::LanePauseRequest,
    ) -> Result<super::LanePause, StoreError> {
        request.validate()?;
        self.timed(StoreOp::PauseLane, self.backend.pause_lane(request))
            .await
    }

    /// Lifts the fleet-wide pause of (lane, target); see [`OutboxBackend::resume_lane`].
    pub async fn resume_lane(
        &self,
        lane: &str,
        target: &str,
    ) -> Result<Option<super::LanePause>, StoreError> {
        self.timed(StoreOp::ResumeLane, self.backend.resume_lane(lane, target))
            .await
    }

    /// Every fleet-wide pause in force; see [`OutboxBackend::lane_pauses`].
    pub async fn lane_pauses(&self) -> Result<Vec<super::LanePause>, StoreError> {
        self.timed(StoreOp::LanePauses, self.backend.lane_pauses())
            .await
    }

    /// Records that a running relay serves these (lane, target) pairs until `served_for`
    /// from now ([`super::served`]; [`OutboxBackend::record_served`]).
    pub async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        self.timed(
            StoreOp::RecordServed,
            self.backend.record_served(lanes, served_for),
        )
        .await
    }

    /// The (lane, target) pairs holding pending messages that no running relay serves, at
    /// most `limit` ([`super::served`]; [`OutboxBackend::unserved_lanes`]).
    pub async fn unserved_lanes(
        &self,
        limit: usize,
    ) -> Result<Vec<super::UnservedLane>, StoreError> {
        self.timed(StoreOp::UnservedLanes, self.backend.unserved_lanes(limit))
            .await
    }

    /// The (lane, target) pairs holding pending messages whose lane begins with a prefix
    /// given for its target, in name order, at most `limit` (lane patterns;
    /// [`OutboxBackend::pending_lanes`]).
    pub async fn pending_lanes(
        &self,
        prefixes: &[(String, String)],
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.timed(
            StoreOp::PendingLanes,
            self.backend.pending_lanes(prefixes, limit),
        )
        .await
    }

    /// Lists messages in enqueue order, a page at a time.
    pub async fn list(
        &self,
        filter: &MessageFilter,
        page: PageRequest,
    ) -> Result<Page, StoreError> {
        self.timed(StoreOp::List, self.backend.list(filter, page))
            .await
    }

    /// How many dead letters the filter selects (its status is ignored): a requeue's or a
    /// discard's dry run; see [`OutboxBackend::count_dead_letters`]. Timed as stats.
    pub async fn count_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.timed(StoreOp::Stats, self.backend.count_dead_letters(filter))
            .await
    }

    /// Where ordering key `key` of (lane, target) stands: its head, the dead letters before
    /// it, and what waits behind it (at most `limit` of each); see
    /// [`OutboxBackend::key_state`]. Timed as a list.
    pub async fn key_state(
        &self,
        lane: &str,
        target: &str,
        key: &str,
        limit: usize,
    ) -> Result<super::KeyState, StoreError> {
        self.timed(
            StoreOp::List,
            self.backend.key_state(lane, target, key, limit),
        )
        .await
    }

    /// The keys of (lane, target) held by a dead head, a page at a time (`after`: the
    /// previous page's `next_cursor`); see [`OutboxBackend::blocked_keys`]. Timed as a list.
    pub async fn blocked_keys(
        &self,
        lane: &str,
        target: &str,
        after: Option<i64>,
        limit: usize,
    ) -> Result<super::BlockedKeys, StoreError> {
        self.timed(
            StoreOp::List,
            self.backend.blocked_keys(lane, target, after, limit),
        )
        .await
    }

    /// One message by id.
    pub async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
        self.timed(StoreOp::Get, self.backend.get(outbox_id)).await
    }

    /// Moves the dead letters the filter selects back to pending, due now, with attempts
    /// reset to zero (`last_error` is kept). Returns how many.
    pub async fn requeue_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        let started = Instant::now();
        let op = StoreOp::RequeueDeadLetters;
        match self.backend.requeue_dead_letters_per_lane(filter).await {
            Ok(requeued) => {
                self.report(op, started, CallOutcome::Requeued(&requeued));
                Ok(LaneCount::total(&requeued))
            }
            Err(error) => {
                self.report(op, started, CallOutcome::Failed(&error));
                Err(error)
            }
        }
    }

    /// Deletes the dead letters the filter selects. Returns how many.
    pub async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        self.timed(
            StoreOp::DiscardDeadLetters,
            self.backend.discard_dead_letters(filter),
        )
        .await
    }

    /// Deletes the delivered and dead-lettered messages the request selects, in bounded
    /// statements; pending and claimed messages never. Returns how many per (lane, target);
    /// [`LaneCount::total`] adds them up.
    pub async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
        self.timed(StoreOp::Purge, self.backend.purge(request))
            .await
    }

    /// Subscribes to wake-ups. A lagging receiver should treat the lag as [`WakeUp::All`].
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.backend.subscribe()
    }
}

/// The transactions a caller holds: PostgreSQL's and MySQL's `enqueue_in_tx`, SQLite's
/// `begin`. Each validates and plans as [`Outbox::enqueue_many`] does and reports to the
/// same hooks.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
impl Outbox {
    /// The error of a transaction API the backend does not have.
    #[allow(dead_code)]
    fn no_user_transactions(&self, api: &'static str) -> StoreError {
        StoreError::Unsupported {
            op: StoreOp::Enqueue,
            what: format!(
                "{api}: this outbox's backend ({:?}) is of another kind",
                self.backend
            ),
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "postgres", feature = "mysql"))))]
impl Outbox {
    /// Writes one message on the caller's connection, normally inside the caller's
    /// transaction: it becomes visible, and wakes relays, only when that transaction
    /// commits. Takes a PostgreSQL or a MySQL connection ([`CallerConnection`]): `&mut tx`
    /// for a [`sqlx::Transaction`], `&mut conn` for a pooled or own connection (then the row
    /// commits at once). A dedupe key taken by a message another transaction has not
    /// committed yet makes this wait for that transaction to end. Fails with
    /// [`StoreError::Unsupported`] when the backend is not the store of that database
    /// ([`PostgresOutboxStore`](super::postgres::PostgresOutboxStore) or
    /// [`MysqlOutboxStore`](super::mysql::MysqlOutboxStore)).
    pub async fn enqueue_in_tx<C: CallerConnection + ?Sized>(
        &self,
        tx: &mut C,
        draft: OutboxMessageDraft,
    ) -> Result<Enqueued, StoreError> {
        single(self.enqueue_many_in_tx(tx, vec![draft]).await?)
    }

    /// Writes many messages on the caller's connection (see [`Self::enqueue_in_tx`]). On an
    /// error nothing of this call is left in the caller's transaction. The hooks hear of
    /// the messages when they are written, before the caller commits (or rolls back).
    pub async fn enqueue_many_in_tx<C: CallerConnection + ?Sized>(
        &self,
        tx: &mut C,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let started = Instant::now();
        let answer = self.write_in_tx(tx.connection(), drafts).await;
        match &answer {
            Ok(answers) => self.report(StoreOp::Enqueue, started, CallOutcome::Enqueued(answers)),
            Err(error) => self.report(StoreOp::Enqueue, started, CallOutcome::Failed(error)),
        }
        answer
    }

    async fn write_in_tx(
        &self,
        conn: CallerConn<'_>,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        match conn {
            #[cfg(feature = "postgres")]
            CallerConn::Postgres(tx) => {
                let Some(postgres) = self.backend::<super::postgres::PostgresOutboxStore>() else {
                    return Err(self.no_user_transactions("enqueue_in_tx"));
                };
                let (batch, plan) = enqueue::plan(drafts, &self.limits)?;
                if batch.is_empty() {
                    return plan.answers(Vec::new());
                }
                plan.answers(postgres.write_in_tx(tx, &batch).await?)
            }
            #[cfg(feature = "mysql")]
            CallerConn::Mysql(conn) => {
                let Some(mysql) = self.backend::<super::mysql::MysqlOutboxStore>() else {
                    return Err(self.no_user_transactions("enqueue_in_tx"));
                };
                let (batch, plan) = enqueue::plan(drafts, &self.limits)?;
                if batch.is_empty() {
                    return plan.answers(Vec::new());
                }
                plan.answers(mysql.write_in_tx(conn, &batch).await?)
            }
        }
    }
}

/// A connection [`Outbox::enqueue_in_tx`] writes on: a PostgreSQL or MySQL connection, a
/// transaction on one, or a pooled one. Sealed: the crate implements it for sqlx's types.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub trait CallerConnection: Send + caller_connection::Sealed {
    /// The connection underneath, by database.
    #[doc(hidden)]
    fn connection(&mut self) -> CallerConn<'_>;
}

/// A caller's connection by database (see [`CallerConnection`]).
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[doc(hidden)]
#[derive(Debug)]
pub enum CallerConn<'c> {
    /// A PostgreSQL connection.
    #[cfg(feature = "postgres")]
    Postgres(&'c mut sqlx::PgConnection),
    /// A MySQL or MariaDB connection.
    #[cfg(feature = "mysql")]
    Mysql(&'c mut sqlx::MySqlConnection),
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
mod caller_connection {
    pub trait Sealed {}
}

/// Implements [`CallerConnection`] for a database's connection, its transactions and its
/// pooled connections.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! caller_connection {
    ($db:ty, $conn:ty, $variant:ident) => {
        impl caller_connection::Sealed for $conn {}
        impl CallerConnection for $conn {
            fn connection(&mut self) -> CallerConn<'_> {
                CallerConn::$variant(self)
            }
        }
        impl caller_connection::Sealed for sqlx::Transaction<'_, $db> {}
        impl CallerConnection for sqlx::Transaction<'_, $db> {
            fn connection(&mut self) -> CallerConn<'_> {
                CallerConn::$variant(&mut *self)
            }
        }
        impl caller_connection::Sealed for sqlx::pool::PoolConnection<$db> {}
        impl CallerConnection for sqlx::pool::PoolConnection<$db> {
            fn connection(&mut self) -> CallerConn<'_> {
                CallerConn::$variant(&mut *self)
            }
        }
    };
}

#[cfg(feature = "postgres")]
caller_connection!(sqlx::Postgres, sqlx::PgConnection, Postgres);
#[cfg(feature = "mysql")]
caller_connection!(sqlx::MySql, sqlx::MySqlConnection, Mysql);

#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
impl Outbox {
    /// Begins a write transaction on the SQLite file for business rows and outbox messages
    /// together ([`SqliteOutboxTx`](super::sqlite::SqliteOutboxTx)). Its enqueues are
    /// validated as [`Outbox::enqueue_many`]'s are, and reported to the hooks at commit.
    /// Fails with [`StoreError::Unsupported`] when the backend is not a
    /// [`SqliteOutboxStore`](super::sqlite::SqliteOutboxStore).
    ///
    /// ```no_run
    /// # async fn example(outbox: &outbox_relay::Outbox) -> Result<(), Box<dyn std::error::Error>> {
    /// use outbox_relay::OutboxMessageDraft;
    /// let mut tx = outbox.begin().await?;
    /// sqlx::query("INSERT INTO orders (id, total) VALUES (?1, ?2)")
    ///     .bind(42).bind(1999)
    ///     .execute(tx.connection())
    ///     .await?;
    /// tx.enqueue(OutboxMessageDraft::new("orders", "billing", serde_json::json!({"order": 42}))?)
    ///     .await?;
    /// tx.commit().await?; // both rows, or neither
    /// # Ok(()) }
    /// ```
    pub async fn begin(&self) -> Result<super::sqlite::SqliteOutboxTx<'_>, StoreError> {
        let Some(sqlite) = self.backend::<super::sqlite::SqliteOutboxStore>() else {
            return Err(self.no_user_transactions("begin"));
        };
        sqlite.begin(self).await
    }
}
