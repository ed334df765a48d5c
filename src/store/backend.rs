//! [`OutboxBackend`]: what a store backend implements, and nothing else. The primitives of
//! the row state machine (the [module docs](super)), each one round trip where the backend
//! can; no validation, no metrics, no hand-off bookkeeping: the [`Outbox`](super::Outbox)
//! over it does those, once, for every backend.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    AckAndClaim, BlockedKeys, ClaimBatch, ClaimOutcome, ClaimRef, ClaimRequest, DraftBatch,
    Enqueued, KeyState, LaneCount, LanePause, LanePauseRequest, LaneStats, MessageFilter, Nack,
    NackOutcome, OrderingPolicy, Page, PageRequest, PurgeRequest, StoreError, StoreOp,
    UnservedLane, WakeUp,
};
use crate::message::{DraftLimits, OutboxMessage};

/// What a backend can do beyond the primitives every backend has. The
/// [`Outbox`](super::Outbox) asks once, when it is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Wake-ups reach other processes (PostgreSQL `LISTEN`/`NOTIFY`); without it they reach
    /// only subscribers of this backend object.
    pub listen: bool,
    /// [`OutboxBackend::ack_and_claim`] is one round trip; without it, it is an ack and a
    /// claim.
    pub ack_and_claim: bool,
    /// A service can write messages inside a transaction it holds
    /// (`Outbox::enqueue_in_tx` on PostgreSQL, `Outbox::begin` on SQLite).
    pub user_transactions: bool,
    /// [`OutboxBackend::write_drafts`] honours [`DraftBatch::pre_claim`]: a draft written
    /// already claimed. The `Outbox` then hands what it enqueues to the idle lanes of this
    /// process (`store::hand_off`).
    pub pre_claim: bool,
    /// How many claims a lane on this backend keeps out at once unless its config says
    /// ([`LaneConfig::claims_in_flight`](crate::LaneConfig::claims_in_flight)); 0 leaves it
    /// to the lane's default. A backend whose claims run on separate connections in
    /// parallel gains from more than one; one that serialises writers does not.
    pub claims_in_flight: usize,
    /// [`OutboxBackend::ack`] takes [`AckMode::Delete`]: it deletes an acked row (a lane's
    /// `keep_delivered = false`); without it, the [`Outbox`](super::Outbox) refuses that mode.
    pub delete_on_ack: bool,
    /// [`OutboxBackend::record_served`] and [`OutboxBackend::unserved_lanes`] keep and read
    /// the record of the lanes running relays serve (`store::served`); without it, the
    /// provided methods refuse and relays report no lanes nobody serves.
    pub served_lanes: bool,
}

impl Capabilities {
    /// None of them: the primitives only.
    pub const fn none() -> Self {
        Self {
            listen: false,
            ack_and_claim: false,
            user_transactions: false,
            pre_claim: false,
            claims_in_flight: 0,
            delete_on_ack: false,
            served_lanes: false,
        }
    }

    /// With [`Capabilities::served_lanes`].
    pub const fn with_served_lanes(mut self) -> Self {
        self.served_lanes = true;
        self
    }

    /// With [`Capabilities::delete_on_ack`].
    pub const fn with_delete_on_ack(mut self) -> Self {
        self.delete_on_ack = true;
        self
    }

    /// With [`Capabilities::listen`].
    pub const fn with_listen(mut self) -> Self {
        self.listen = true;
        self
    }

    /// With [`Capabilities::ack_and_claim`].
    pub const fn with_ack_and_claim(mut self) -> Self {
        self.ack_and_claim = true;
        self
    }

    /// With [`Capabilities::user_transactions`].
    pub const fn with_user_transactions(mut self) -> Self {
        self.user_transactions = true;
        self
    }

    /// With [`Capabilities::claims_in_flight`].
    pub const fn with_claims_in_flight(mut self, claims: usize) -> Self {
        self.claims_in_flight = claims;
        self
    }

    /// With [`Capabilities::pre_claim`].
    pub const fn with_pre_claim(mut self) -> Self {
        self.pre_claim = true;
        self
    }
}

/// What an ack does with the row of a delivered message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AckMode {
    /// Marks it `delivered`; retention purges it later. The default.
    #[default]
    KeepDelivered,
    /// Deletes it, under the same fencing check, on a backend that says
    /// [`Capabilities::delete_on_ack`]: one write per message less, and nothing for
    /// retention to purge. Dead letters are kept as before.
    Delete,
}

/// The outbox table's primitives, as a backend implements them. Object-safe. Users and the
/// relay do not call a backend: they hold an [`Outbox`](super::Outbox) over it, which
/// validates, plans dedupe, captures trace context, times every call for its
/// [`StoreHook`](super::StoreHook)s and keeps the hand-off.
///
/// The conformance suite (`outbox_relay::testing`, feature `testing`) checks a backend
/// against the contract through an `Outbox`, as the crate's own are checked.
#[async_trait]
pub trait OutboxBackend: Send + Sync + fmt::Debug + 'static {
    /// What this backend can do beyond the primitives. The default: nothing.
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }

    /// The limits drafts are validated against before they reach
    /// [`write_drafts`](Self::write_drafts).
    fn draft_limits(&self) -> DraftLimits;

    /// Writes the batch atomically, answering one [`Enqueued`] per draft, in order. The
    /// drafts are valid and no two share a dedupe key in one (lane, target); what is left to
    /// the backend is a key already held by a stored message: answer that message with
    /// `duplicate: true` when [`OutboxMessageDraft::matches`](crate::OutboxMessageDraft::matches)
    /// it, else fail the whole batch with [`StoreError::Conflict`].
    ///
    /// A draft with a [`DraftBatch::pre_claim`] (only when the backend says
    /// [`Capabilities::pre_claim`]) that goes in fresh is written `claimed` by its consumer,
    /// with its token and lease, its attempt counted; a duplicate is answered as stored.
    async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError>;

    /// Claims, for each request, up to its `limit` claimable messages of its (lane, target),
    /// under its lease and consumer id: one [`ClaimBatch`] per request, in order, each with
    /// its own lane's messages only. See the module docs.
    ///
    /// A batch with no message should also answer [`ClaimBatch::next_due`], and one with
    /// fewer than its `limit` may. A backend that leaves it
    /// [`NextDue::Unknown`](super::NextDue::Unknown) only costs an idle relay a `next_due`
    /// call.
    ///
    /// The [`Outbox`](super::Outbox) sends one request at a time; a slice is what lets one
    /// statement claim for many lanes without another change of this trait. A backend may
    /// claim for more than one by claiming one request after another (the crate's backends
    /// do, in one transaction where they can). An `Err` answers no batch: what was claimed
    /// before it is then held by nobody and comes back when its leases lapse, as the claims
    /// of a call whose answer was lost do.
    async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError>;

    /// Acks claims as `mode` says: a row still `claimed` under the claim's token is marked
    /// delivered ([`AckMode::KeepDelivered`]) or deleted ([`AckMode::Delete`]); anything
    /// else is a lost claim and changes nothing. Either way a keyed row's successor becomes
    /// claimable. One answer per claim, in order.
    ///
    /// The [`Outbox`](super::Outbox) asks for [`AckMode::Delete`] only of a backend that says
    /// [`Capabilities::delete_on_ack`]; it refuses it for the others.
    async fn ack(
        &self,
        claims: &[ClaimRef],
        mode: AckMode,
    ) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Acks finished deliveries as `mode` says ([`ack`](Self::ack)), then claims for
    /// `requests` ([`claim`](Self::claim)). The provided method makes the two calls; a
    /// backend that can do both in one round trip overrides it and says
    /// [`Capabilities::ack_and_claim`].
    ///
    /// An `Err` means nothing is known to be recorded: the acks may be tried again. Once the
    /// acks are recorded, a failed claim comes back in [`AckAndClaim::claimed`].
    async fn ack_and_claim(
        &self,
        acks: &[ClaimRef],
        requests: &[ClaimRequest],
        mode: AckMode,
    ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
        let acked = if acks.is_empty() {
            Vec::new()
        } else {
            self.ack(acks, mode).await?
        };
        let claimed = self.claim(requests).await;
        Ok(AckAndClaim { acked, claimed })
    }

    /// Records failed deliveries. One answer per nack, in order.
    async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError>;

    /// Extends the leases of claims still held, to `lease` from now.
    async fn extend_lease(
        &self,
        claims: &[ClaimRef],
        lease: Duration,
    ) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Returns claims unused: pending, due now, the attempt not counted.
    async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// How long until the next message of (lane, target) may be claimable: the earliest due
    /// pending message or the earliest lease expiry. `Some(ZERO)` when one is claimable now,
    /// `None` when there is nothing to wait for. A message its ordering key holds back is
    /// not counted: its key's head is.
    async fn next_due(
        &self,
        lane: &str,
        target: &str,
        ordering: OrderingPolicy,
    ) -> Result<Option<Duration>, StoreError>;

    /// [`next_due`](Self::next_due) of each of `lanes` (lane, target, ordering policy), in
    /// order. A relay's due watcher asks this for all its lanes at once (`relay/upkeep.rs`)
    /// so its idle lanes need no poll of their own, so a backend answers it in one
    /// statement where it can; this default asks lane by lane.
    async fn lanes_next_due(
        &self,
        lanes: &[(String, String, OrderingPolicy)],
    ) -> Result<Vec<Option<Duration>>, StoreError> {
        let mut due = Vec::with_capacity(lanes.len());
        for (lane, target, ordering) in lanes {
            due.push(self.next_due(lane, target, *ordering).await?);
        }
        Ok(due)
    }

    /// Counts per (lane, target) among the messages the filter selects (its status is
    /// ignored). Lanes with no messages are absent.
    async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError>;

    /// The stats of each of `lanes` (lane, target) that has messages, sorted by lane and
    /// target; a lane without messages is absent, as in [`stats`](Self::stats). A relay
    /// samples the backlog of all its lanes with one such call (`relay/upkeep.rs`), so a
    /// backend answers it in one statement where it can; this default asks
    /// [`stats`](Self::stats) lane by lane.
    async fn lanes_stats(&self, lanes: &[(String, String)]) -> Result<Vec<LaneStats>, StoreError> {
        let mut all = Vec::new();
        for (lane, target) in lanes {
            all.extend(self.stats(&MessageFilter::lane(lane, target)).await?);
        }
        super::admin::sort_lanes(&mut all);
        Ok(all)
    }

    /// Lists messages in enqueue order, a page at a time.
    async fn list(&self, filter: &MessageFilter, page: PageRequest) -> Result<Page, StoreError>;

    /// One message by id.
    async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError>;

    /// Moves the dead letters the filter selects back to pending, due now, with attempts
    /// reset to zero (`last_error` is kept), committed when it returns. Answers how many
    /// per (lane, target), lanes with none left out.
    async fn requeue_dead_letters_per_lane(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<LaneCount>, StoreError>;

    /// Deletes the dead letters the filter selects. Returns how many.
    async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError>;

    /// Deletes the delivered and dead-lettered messages the request selects (each status
    /// by its own age, since last changed; optionally only some lanes), in statements of at
    /// most `batch_size` rows, each covering all the request's lanes. Pending and claimed
    /// messages are never purged. Returns how many per (lane, target) (with
    /// [`dry_run`](PurgeRequest::dry_run), how many would go), lanes with none left out.
    async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError>;

    /// How many dead letters the filter selects (its status is ignored): what a requeue or
    /// a discard by that filter would change. The provided method sums
    /// [`stats`](Self::stats), which counts every status; a backend that can count the dead
    /// letters alone (an index of them) overrides it.
    async fn count_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
        Ok(self
            .stats(filter)
            .await?
            .iter()
            .map(|lane| lane.dead_letter)
            .sum())
    }

    /// Where ordering key `key` of (lane, target) stands: its head, the dead letters
    /// before it and what waits behind it, at most `limit` of each. The provided method
    /// reads it with [`list`](Self::list) (three key-index reads).
    async fn key_state(
        &self,
        lane: &str,
        target: &str,
        key: &str,
        limit: usize,
    ) -> Result<KeyState, StoreError> {
        super::key_state::key_state(self, lane, target, key, limit).await
    }

    /// The keys of (lane, target) whose earliest dead letter comes before their head (held
    /// back under [`OrderingPolicy::Block`]), by the enqueue order of that dead letter,
    /// from the dead letters after `after`, at most `limit` keys. The provided method reads
    /// them with [`list`](Self::list), at most
    /// [`BLOCKED_KEYS_SCAN`](super::key_state::BLOCKED_KEYS_SCAN) dead letters a page.
    async fn blocked_keys(
        &self,
        lane: &str,
        target: &str,
        after: Option<i64>,
        limit: usize,
    ) -> Result<BlockedKeys, StoreError> {
        super::key_state::blocked_keys(self, lane, target, after, limit).await
    }

    /// Subscribes to wake-ups: enqueues and requeues of this backend, from any process when
    /// it says [`Capabilities::listen`]. A lagging receiver treats the lag as
    /// [`WakeUp::All`].
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp>;

    /// The most connections the backend's calls may hold at once (its pool's size), for the
    /// relay's check at start that its lanes' claims will not wait for one
    /// ([`RelayBuilder::connections_needed`](crate::relay::RelayBuilder::connections_needed)).
    /// `None`, the provided answer: no such bound.
    fn max_connections(&self) -> Option<u32> {
        None
    }

    // ---- Lane control: the fleet-wide pause of a (lane, target) -----------------------
    // Each backend implements it in a file of its own (`store/<backend>/lane_control.rs`);
    // the provided methods are what a backend without lane control answers: refused for
    // good (a relay then stops asking, saying why once).

    /// Pauses (lane, target) for every relay on this store, until
    /// [`resume_lane`](Self::resume_lane); committed when it returns. Pausing a paused lane
    /// replaces who, why and when. Returns the pause as recorded (its time is the store's).
    async fn pause_lane(&self, request: &LanePauseRequest) -> Result<LanePause, StoreError> {
        let _ = request;
        Err(super::lane_control::unsupported(StoreOp::PauseLane))
    }

    /// Lifts the fleet-wide pause of (lane, target): the pause it lifted, `None` when the
    /// lane was not paused.
    async fn resume_lane(&self, lane: &str, target: &str) -> Result<Option<LanePause>, StoreError> {
        let _ = (lane, target);
        Err(super::lane_control::unsupported(StoreOp::ResumeLane))
    }

    /// Every fleet-wide pause in force, by (lane, target).
    async fn lane_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
        Err(super::lane_control::unsupported(StoreOp::LanePauses))
    }

    // ---- Lanes nobody serves (`store::served`) -----------------------------------------
    // The provided methods answer refused for good: a relay then stops asking, saying why.

    /// Records that a running relay serves each (lane, target) of `lanes` until `served_for`
    /// from now, on the store's clock; a record that already runs longer is kept.
    async fn record_served(
        &self,
        lanes: &[(String, String)],
        served_for: Duration,
    ) -> Result<(), StoreError> {
        let _ = (lanes, served_for);
        Err(StoreError::denied(
            StoreOp::RecordServed,
            "this store keeps no record of served lanes",
        ))
    }

    /// The (lane, target) pairs holding pending messages that no record of
    /// [`record_served`](Self::record_served) covers now, in name order, at most `limit`,
    /// each with its pending messages counted up to
    /// [`UNSERVED_COUNT_CAP`](super::served::UNSERVED_COUNT_CAP). Reads each pair with
    /// pending messages once, and counts only the unserved ones' messages.
    async fn unserved_lanes(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
        let _ = limit;
        Err(StoreError::denied(
            StoreOp::UnservedLanes,
            "this store keeps no record of served lanes",
        ))
    }

    /// The (lane, target) pairs holding pending messages whose lane begins with a prefix
    /// given for its target (`prefixes`: (prefix, target)), in name order, at most `limit`:
    /// how a relay finds the lanes its lane patterns serve (`relay/patterns.rs`), for all
    /// its patterns in one call per pass. A backend answers it reading each pair holding
    /// pending messages once, never their messages; this default reads every lane's
    /// [`stats`](Self::stats), which costs the whole table.
    async fn pending_lanes(
        &self,
        prefixes: &[(String, String)],
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        if prefixes.is_empty() {
            return Ok(Vec::new());
        }
        let mut stats = self.stats(&MessageFilter::default()).await?;
        super::admin::sort_lanes(&mut stats);
        Ok(super::served::matching(
            stats
                .into_iter()
                .filter(|lane| lane.pending > 0)
                .map(|lane| (lane.lane, lane.target)),
            prefixes,
            limit,
        ))
    }
}

/// The one answer of a one-draft write.
pub(crate) fn single(mut answers: Vec<Enqueued>) -> Result<Enqueued, StoreError> {
    answers
        .pop()
        .ok_or_else(|| StoreError::database(super::StoreOp::Enqueue, "wrote nothing"))
}

/// The one batch of a one-request claim.
pub(crate) fn single_batch(batches: Vec<ClaimBatch>) -> Result<ClaimBatch, StoreError> {
    match <[ClaimBatch; 1]>::try_from(batches) {
        Ok([batch]) => Ok(batch),
        Err(batches) => Err(StoreError::database(
            StoreOp::Claim,
            format!("a claim of one request answered {} batches", batches.len()),
        )),
    }
}
