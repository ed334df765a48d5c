//! The invariant checker. It sees every store call's effect on the rows it touched (the
//! world reads them back after each call) and every delivery's start and end, and holds a
//! shadow copy of every row, so each change is checked against the one before it:
//!
//! - no loss: every row the store holds is one an enqueue wrote, and at the end each is
//!   delivered or dead-lettered (or, under `Block`, held behind a dead head of its key);
//! - fencing: an ack, nack, extension or release whose token is not the row's current one
//!   changes nothing;
//! - no early redelivery: a claim takes a row only when it is pending and due, or claimed
//!   with its lease lapsed (by the store's clock);
//! - dead letters only when due: a permanent nack, a nack on the last attempt, or a lapse
//!   of the last attempt;
//! - a row is delivered only after a delivery of it succeeded;
//! - per key: no two deliveries at once while both claims are current, a message's first
//!   delivery only after every earlier message of its key succeeded (or, under `Skip`, was
//!   dead-lettered), and nothing past a dead head under `Block`;
//! - a lane starts no message whose lease it was told had lapsed;
//! - past a lapse, a delivery still running beside a later delivery of its key (or of
//!   itself) on a live claim overlaps it: each such overlap is counted and timed, and none
//!   may last longer than the lane's start margin allows (`delivery_timeout` less the
//!   margin, `LaneCore::start_margin`), unless the store's clock jumped forward since or
//!   the delivery's process froze while it ran;
//! - the store's stats count what the rows say.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use uuid::Uuid;

use crate::message::ClaimRef;
use crate::message::{OutboxMessage, OutboxStatus, UnixMillis};
use crate::store::StoreOp;
use crate::store::{LaneStats, Nack, NackDisposition, OrderingPolicy};

mod overlap;

pub use overlap::Overlaps;

/// What a store call was, as far as the checker needs to know.
#[derive(Debug)]
pub enum Call<'a> {
    /// An ack of these claims.
    Ack(&'a [ClaimRef]),
    /// A nack of these.
    Nack(&'a [Nack]),
    /// An extension of these claims' leases by this lease.
    Extend(&'a [ClaimRef], Duration),
    /// A release of these claims.
    Release(&'a [ClaimRef]),
    /// A claim and what it answered: claimed messages (in order) and dead-lettered ids.
    Claim {
        /// The messages it handed out.
        claimed: &'a [OutboxMessage],
        /// The messages it dead-lettered (a lapse of their last attempt).
        dead: &'a [Uuid],
    },
}

/// One ordering key's messages, and what the checks ask of them without a walk.
#[derive(Debug, Default)]
struct KeyState {
    /// Its messages by enqueue sequence.
    seqs: BTreeMap<i64, Uuid>,
    /// Every message below this seq is delivered or dead (both final here).
    settled_below: i64,
    /// The seqs claimed now.
    claimed: BTreeSet<i64>,
    /// The first dead letter's seq.
    first_dead: Option<i64>,
}

#[derive(Debug)]
struct Running {
    outbox_id: Uuid,
    token: Uuid,
    key: Option<String>,
}

/// The checker's state. The first violation is kept; the run stops on it.
#[derive(Debug)]
pub struct Checker {
    ordering: OrderingPolicy,
    rows: HashMap<Uuid, OutboxMessage>,
    keys: HashMap<String, KeyState>,
    running: HashMap<u64, Running>,
    next_delivery: u64,
    started: HashSet<Uuid>,
    succeeded: HashSet<Uuid>,
    pub(crate) deliveries: u64,
    pub(crate) violation: Option<String>,
    /// Virtual time now (the world sets it before each call).
    pub(crate) now: Duration,
    /// When each claim (message, token) was made, in virtual time.
    claimed_at: HashMap<(Uuid, Uuid), Duration>,
    /// The last time the store's clock jumped forward, in virtual time.
    pub(crate) jumped_forward: Option<Duration>,
    /// The rows claimed now.
    claimed_ids: BTreeSet<Uuid>,
    /// The longest a delivery may run past its lapse beside the next holder's.
    overlap_bound: Duration,
    /// Overlaps going on: the two deliveries, since when, and whether a forward jump of
    /// the store's clock exempts them from the bound.
    overlapping: Vec<(u64, u64, Duration, bool)>,
    /// Deliveries whose process froze while they ran.
    frozen: HashSet<u64>,
    /// Overlaps past a lapse seen, and the longest (of those that ended); those after a
    /// forward jump of the store's clock apart.
    pub(crate) overlaps: Overlaps,
    /// First deliveries started past a dead head of their key (`Block`) that a forward
    /// jump of the store's clock since their claim excused.
    pub(crate) past_dead_after_jump: u64,
}

impl Checker {
    /// A checker for a lane of `ordering` whose deliveries may overlap the next holder's
    /// by at most `overlap_bound`.
    pub fn new(ordering: OrderingPolicy, overlap_bound: Duration) -> Self {
        Self {
            ordering,
            rows: HashMap::new(),
            keys: HashMap::new(),
            running: HashMap::new(),
            next_delivery: 0,
            started: HashSet::new(),
            succeeded: HashSet::new(),
            deliveries: 0,
            violation: None,
            now: Duration::ZERO,
            claimed_at: HashMap::new(),
            jumped_forward: None,
            claimed_ids: BTreeSet::new(),
            overlap_bound,
            overlapping: Vec::new(),
            frozen: HashSet::new(),
            overlaps: Overlaps::default(),
            past_dead_after_jump: 0,
        }
    }

    /// Sets the time now, since the run began (the overlaps past a lapse are timed by it).
    pub fn set_now(&mut self, now: Duration) {
        self.now = now;
    }

    /// The store's clock jumped forward now: a lease it lapsed early is no fault of a lane.
    pub fn clock_jumped_forward(&mut self) {
        self.jumped_forward = Some(self.now);
    }

    /// The first invariant broken, if one was (taken: the checker forgets it).
    pub fn take_violation(&mut self) -> Option<String> {
        self.violation.take()
    }

    /// The overlaps past a lapse seen so far.
    pub fn overlaps(&self) -> Overlaps {
        self.overlaps
    }

    /// The row `id` as the checker last saw it.
    pub fn row(&self, id: Uuid) -> Option<&OutboxMessage> {
        self.rows.get(&id)
    }

    /// How many deliveries started.
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }

    pub(crate) fn fail(&mut self, what: String) {
        if self.violation.is_none() {
            self.violation = Some(what);
        }
    }

    /// How many rows were written.
    pub fn messages(&self) -> usize {
        self.rows.len()
    }

    /// Every row written.
    pub fn ids(&self) -> Vec<Uuid> {
        self.rows.keys().copied().collect()
    }

    /// An enqueue's answer.
    pub fn enqueued(&mut self, message: &OutboxMessage, duplicate: bool) {
        let id = message.outbox_id;
        if duplicate {
            if !self.rows.contains_key(&id) {
                self.fail(format!(
                    "duplicate enqueue answered {id}, a row never written"
                ));
            }
            return;
        }
        // Pending, or handed off: written claimed for a lane of the enqueuing process, at
        // its first attempt, with a token and a lease.
        let handed_off = message.status == OutboxStatus::Claimed
            && message.attempt_count == 1
            && message.lease_expires_at.is_some()
            && message.ordering_key.is_none();
        match message.claim_token {
            Some(token) if handed_off => {
                self.claimed_at.insert((id, token), self.now);
            }
            _ if message.status == OutboxStatus::Pending && message.attempt_count == 0 => {}
            _ => self.fail(format!(
                "new row {id} is {:?} at attempt {}",
                message.status, message.attempt_count
            )),
        }
        if self.rows.contains_key(&id) {
            self.fail(format!("enqueue wrote {id} twice"));
        }
        if let Some(key) = &message.ordering_key {
            self.keys
                .entry(key.clone())
                .or_default()
                .seqs
                .insert(message.seq, id);
        }
        self.put(message.clone());
    }

    /// A store call ran at `now` (the store's clock); `after` holds every row it touched,
    /// read back after it.
    pub fn observe(
        &mut self,
        call: Call<'_>,
        now: UnixMillis,
        after: &HashMap<Uuid, OutboxMessage>,
    ) {
        match call {
            Call::Ack(claims) => {
                for claim in self.deciding(claims.iter()) {
                    self.settle(claim, now, after, StoreOp::Ack, |before, row, checker| {
                        if row.status != OutboxStatus::Delivered {
                            return Some(format!("a current ack left it {:?}", row.status));
                        }
                        (!checker.succeeded.contains(&before.outbox_id))
                            .then(|| "acked before any delivery of it succeeded".to_owned())
                    });
                }
            }
            Call::Nack(nacks) => {
                let deciding = self.deciding(nacks.iter().map(|n| &n.claim));
                for nack in nacks.iter().filter(|n| deciding.contains(&&n.claim)) {
                    self.settle(&nack.claim, now, after, StoreOp::Nack, |before, row, _| {
                        let dead_due = nack.disposition == NackDisposition::Permanent
                            || before.attempt_count >= before.max_attempts;
                        match (row.status, nack.disposition) {
                            (OutboxStatus::DeadLetter, _) if dead_due => None,
                            (OutboxStatus::Pending, NackDisposition::Retry(delay))
                                if !dead_due && row.available_at == now.saturating_add(delay) =>
                            {
                                None
                            }
                            (status, _) => Some(format!(
                                "nack ({:?}, attempt {} of {}) left it {status:?}, due {}",
                                nack.disposition,
                                before.attempt_count,
                                before.max_attempts,
                                row.available_at
                            )),
                        }
                    });
                }
            }
            Call::Extend(claims, lease) => {
                for claim in self.deciding(claims.iter()) {
                    self.settle(claim, now, after, StoreOp::ExtendLease, |before, row, _| {
                        (row.status != OutboxStatus::Claimed
                            || row.claim_token != before.claim_token
                            || row.lease_expires_at != Some(now.saturating_add(lease)))
                        .then(|| "a current extension did not extend the lease".to_owned())
                    });
                }
            }
            Call::Release(claims) => {
                for claim in self.deciding(claims.iter()) {
                    self.settle(claim, now, after, StoreOp::Release, |before, row, _| {
                        (row.status != OutboxStatus::Pending
                            || row.attempt_count + 1 != before.attempt_count)
                            .then(|| "a current release did not hand the row back".to_owned())
                    });
                }
            }
            Call::Claim { claimed, dead } => self.claimed(claimed, dead, now, after),
        }
    }

    /// The claims of one call that decide what happens to their rows: a row named twice
    /// (a stale claim retried beside the current one) is decided by its current claim.
    fn deciding<'c>(
        &self,
        claims: impl Iterator<Item = &'c ClaimRef> + Clone,
    ) -> Vec<&'c ClaimRef> {
        let current = |c: &ClaimRef| {
            self.rows.get(&c.outbox_id).is_some_and(|row| {
                row.status == OutboxStatus::Claimed && row.claim_token == Some(c.claim_token)
            })
        };
        claims
            .clone()
            .filter(|c| {
                current(c)
                    || !claims
                        .clone()
                        .any(|other| other.outbox_id == c.outbox_id && current(other))
            })
            .collect()
    }

    /// A call on `claim`: if the claim is current, `check` the change; if not, nothing may
    /// have changed (fencing). The shadow then takes the row as it is.
    fn settle(
        &mut self,
        claim: &ClaimRef,
        now: UnixMillis,
        after: &HashMap<Uuid, OutboxMessage>,
        op: StoreOp,
        check: impl FnOnce(&OutboxMessage, &OutboxMessage, &Self) -> Option<String>,
    ) {
        let id = claim.outbox_id;
        let (Some(before), Some(row)) = (self.rows.get(&id), after.get(&id)) else {
            return self.fail(format!("{op} of {id}: the row is gone"));
        };
        let current =
            before.status == OutboxStatus::Claimed && before.claim_token == Some(claim.claim_token);
        let problem = if current {
            check(before, row, self)
        } else if row != before {
            Some(format!(
                "a fenced {op} changed the row: {:?} -> {:?}",
                before.status, row.status
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            return self.fail(format!("{op} of {id} at {now}: {problem}"));
        }
        self.put(row.clone());
    }

    fn claimed(
        &mut self,
        claimed: &[OutboxMessage],
        dead: &[Uuid],
        now: UnixMillis,
        after: &HashMap<Uuid, OutboxMessage>,
    ) {
        for id in dead {
            let Some(before) = self.rows.get(id) else {
                return self.fail(format!("claim dead-lettered {id}, a row never written"));
            };
            let lapsed = before.status == OutboxStatus::Claimed
                && before.lease_expires_at.is_some_and(|at| at <= now);
            if !lapsed || before.attempt_count < before.max_attempts {
                return self.fail(format!(
                    "claim at {now} dead-lettered {id} ({:?}, attempt {} of {}, lease until {:?}): not due",
                    before.status, before.attempt_count, before.max_attempts, before.lease_expires_at
                ));
            }
            match after.get(id) {
                Some(row) if row.status == OutboxStatus::DeadLetter => self.put(row.clone()),
                _ => return self.fail(format!("claim said {id} was dead-lettered; it is not")),
            }
        }
        let taken: HashSet<Uuid> = claimed.iter().map(|m| m.outbox_id).collect();
        // Lapsed claims go before pending rows: a claim that took a pending row left no
        // claimable lapsed one behind.
        let took_pending = claimed.iter().any(|m| {
            self.rows
                .get(&m.outbox_id)
                .is_some_and(|r| r.status == OutboxStatus::Pending)
        });
        if took_pending {
            if let Some(left) = self
                .claimed_ids
                .iter()
                .find(|id| !taken.contains(id) && self.claimable_lapsed(id, now))
            {
                return self.fail(format!(
                    "claim at {now} took pending rows and left lapsed claim {left} behind"
                ));
            }
        }
        for message in claimed {
            let id = message.outbox_id;
            let Some(before) = self.rows.get(&id) else {
                return self.fail(format!("claim handed out {id}, a row never written"));
            };
            let claimable = match before.status {
                OutboxStatus::Pending => before.available_at <= now,
                OutboxStatus::Claimed => before.lease_expires_at.is_some_and(|at| at <= now),
                _ => false,
            };
            if !claimable {
                return self.fail(format!(
                    "claim at {now} took {id} early ({:?}, due {}, lease until {:?})",
                    before.status, before.available_at, before.lease_expires_at
                ));
            }
            if message.attempt_count != before.attempt_count + 1
                || message.status != OutboxStatus::Claimed
                || message.claim_token.is_none()
                || message.claim_token == before.claim_token
            {
                return self.fail(format!(
                    "claim of {id} did not count the attempt or renew the token"
                ));
            }
            if let Some(token) = message.claim_token {
                self.claimed_at.insert((id, token), self.now);
            }
            if let Some(key) = &message.ordering_key {
                if let Some(problem) = self.key_blocks(key, message.seq, now, &taken) {
                    return self.fail(format!("claim at {now} of {id} (key {key}): {problem}"));
                }
            }
        }
        for row in after.values() {
            self.put(row.clone());
        }
    }

    /// The shadow takes a row as the store now holds it.
    fn put(&mut self, row: OutboxMessage) {
        if row.status == OutboxStatus::Claimed {
            self.claimed_ids.insert(row.outbox_id);
        } else {
            self.claimed_ids.remove(&row.outbox_id);
        }
        if let Some(state) = row.ordering_key.as_ref().and_then(|k| self.keys.get_mut(k)) {
            if row.status == OutboxStatus::Claimed {
                state.claimed.insert(row.seq);
            } else {
                state.claimed.remove(&row.seq);
            }
            if row.status == OutboxStatus::DeadLetter {
                state.first_dead = Some(state.first_dead.map_or(row.seq, |d| d.min(row.seq)));
            }
        }
        let key = row.ordering_key.clone();
        self.rows.insert(row.outbox_id, row);
        if let Some(state) = key.and_then(|k| self.keys.get_mut(&k)) {
            while let Some((seq, id)) = state.seqs.range(state.settled_below..).next() {
                let settled = self.rows.get(id).is_some_and(|r| {
                    matches!(r.status, OutboxStatus::Delivered | OutboxStatus::DeadLetter)
                });
                if !settled {
                    break;
                }
                state.settled_below = seq + 1;
            }
        }
    }

    /// Whether a claimed row's lease lapsed and a claim would take it again.
    fn claimable_lapsed(&self, id: &Uuid, now: UnixMillis) -> bool {
        let Some(row) = self.rows.get(id) else {
            return false;
        };
        if row.lease_expires_at.is_none_or(|at| at > now) || row.attempt_count >= row.max_attempts {
            return false;
        }
        let Some(state) = row.ordering_key.as_ref().and_then(|k| self.keys.get(k)) else {
            return true;
        };
        let head = state
            .seqs
            .range(state.settled_below..)
            .next()
            .map(|(s, _)| *s);
        let blocked =
            self.ordering == OrderingPolicy::Block && state.first_dead.is_some_and(|d| d < row.seq);
        let other_live = state.claimed.iter().any(|s| {
            *s != row.seq
                && self.rows[&state.seqs[s]]
                    .lease_expires_at
                    .is_some_and(|at| at > now)
        });
        head == Some(row.seq) && !blocked && !other_live
    }

    /// Why a claim of `seq` in `key` breaks the key's order, if it does.
    fn key_blocks(
        &self,
        key: &str,
        seq: i64,
        now: UnixMillis,
        taken: &HashSet<Uuid>,
    ) -> Option<String> {
        let state = self.keys.get(key)?;
        for other_seq in &state.claimed {
            let other = state.seqs[other_seq];
            if *other_seq == seq || taken.contains(&other) {
                continue;
            }
            if self.rows[&other]
                .lease_expires_at
                .is_some_and(|at| at > now)
            {
                return Some(format!("{other} of the key holds a live claim"));
            }
        }
        if self.ordering == OrderingPolicy::Block && state.first_dead.is_some_and(|d| d < seq) {
            return Some("an earlier message is dead and the lane blocks".to_owned());
        }
        for other in state.seqs.range(state.settled_below..seq).map(|(_, id)| id) {
            let row = &self.rows[other];
            if !taken.contains(other)
                && matches!(row.status, OutboxStatus::Pending | OutboxStatus::Claimed)
            {
                return Some(format!(
                    "earlier {other} of the key is {:?} (lease until {:?}, by {:?})",
                    row.status, row.lease_expires_at, row.claimed_by
                ));
            }
        }
        None
    }

    /// A delivery starts at `now` (the store's clock); `lapse_known`: the lane had been told
    /// this claim's lease lapsed. Returns the delivery's number for [`Checker::ended`].
    pub fn started(&mut self, message: &OutboxMessage, now: UnixMillis, lapse_known: bool) -> u64 {
        let id = message.outbox_id;
        self.deliveries += 1;
        let token = message.claim_token.unwrap_or_default();
        if lapse_known {
            self.fail(format!("{id} started after its lane saw its lease lapse"));
        }
        let live = self.rows.get(&id).is_some_and(|row| {
            row.status == OutboxStatus::Claimed
                && row.claim_token == Some(token)
                && row.lease_expires_at.is_some_and(|at| at > now)
        });
        // Without a forward jump of the store's clock since the claim, a lease gone by the
        // store's clock is gone by the lane's too (it times leases from the claim's send):
        // the lane must not start it. After a jump the lane cannot know.
        let claimed_at = self.claimed_at.get(&(id, token)).copied();
        let jumped = self
            .jumped_forward
            .is_some_and(|jump| claimed_at.is_none_or(|at| jump >= at));
        if !live && !jumped {
            self.fail(format!(
                "{id} (attempt {}) started at {now} on a claim whose lease is gone (claimed at {claimed_at:?})",
                message.attempt_count
            ));
        }
        let this = self.next_delivery + 1;
        if live {
            self.overlaps_begin(this, id, message.ordering_key.as_deref(), now);
        }
        if let (true, Some(key)) = (live, &message.ordering_key) {
            for running in self.running.values() {
                if running.key.as_deref() != Some(key.as_str()) {
                    continue;
                }
                let live = self.rows.get(&running.outbox_id).is_some_and(|row| {
                    row.status == OutboxStatus::Claimed
                        && row.claim_token == Some(running.token)
                        && row.lease_expires_at.is_some_and(|at| at > now)
                });
                if live {
                    let other = running.outbox_id;
                    self.fail(format!(
                        "{id} (token {token}, attempt {}) started at {now} while {other} of key {key} runs on a live claim (token {})",
                        message.attempt_count, running.token
                    ));
                    break;
                }
            }
            if self.started.insert(id) {
                let state = &self.keys[key];
                // A head dead-lettered after this claim, because a forward jump of the
                // store's clock lapsed its lease early, is news the lane cannot have.
                let behind_dead = self.ordering == OrderingPolicy::Block
                    && state.first_dead.is_some_and(|d| d < message.seq);
                let past_dead = behind_dead && !jumped;
                if behind_dead && jumped {
                    self.past_dead_after_jump += 1;
                }
                let earlier: Vec<Uuid> = state
                    .seqs
                    .range(state.settled_below..message.seq)
                    .map(|(_, other)| *other)
                    .collect();
                if past_dead {
                    self.fail(format!(
                        "{id} started past a dead head of key {key} (Block)"
                    ));
                }
                for other in earlier {
                    let dead = self.rows[&other].status == OutboxStatus::DeadLetter;
                    if !dead && !self.succeeded.contains(&other) {
                        self.fail(format!(
                            "first delivery of {id} (key {key}) before earlier {other} succeeded"
                        ));
                    }
                }
            }
        }
        self.next_delivery += 1;
        self.running.insert(
            self.next_delivery,
            Running {
                outbox_id: id,
                token,
                key: message.ordering_key.clone(),
            },
        );
        self.next_delivery
    }

    /// A delivery ended (`ok`: the target took it).
    pub fn ended(&mut self, delivery: u64, ok: bool) {
        if let Some(running) = self.running.remove(&delivery) {
            if ok {
                self.succeeded.insert(running.outbox_id);
            }
        }
        self.overlaps_end(delivery);
    }

    /// The store's stats against the rows.
    pub fn stats(&mut self, stats: &LaneStats) {
        let count =
            |status: OutboxStatus| self.rows.values().filter(|r| r.status == status).count() as u64;
        let want = (
            count(OutboxStatus::Pending),
            count(OutboxStatus::Claimed),
            count(OutboxStatus::Delivered),
            count(OutboxStatus::DeadLetter),
        );
        let got = (
            stats.pending,
            stats.claimed,
            stats.delivered,
            stats.dead_letter,
        );
        if want != got {
            self.fail(format!(
                "stats (pending, claimed, delivered, dead) {got:?}, rows say {want:?}"
            ));
        }
    }

    /// Every row the store holds, against the shadow: nothing changed behind a call's back,
    /// nothing lost, nothing invented.
    pub fn all_rows(&mut self, rows: &[OutboxMessage]) {
        if rows.len() != self.rows.len() {
            return self.fail(format!(
                "the store holds {} rows, {} were written",
                rows.len(),
                self.rows.len()
            ));
        }
        for row in rows {
            if self.rows.get(&row.outbox_id) != Some(row) {
                return self.fail(format!(
                    "row {} changed outside any call: now {:?}",
                    row.outbox_id, row.status
                ));
            }
        }
    }

    /// Messages not yet settled: not delivered, not dead, not held behind a dead head of
    /// their key under `Block`.
    pub fn unsettled(&self) -> Vec<Uuid> {
        self.rows
            .values()
            .filter(|row| matches!(row.status, OutboxStatus::Pending | OutboxStatus::Claimed))
            .filter(|row| !self.behind_dead_head(row))
            .map(|row| row.outbox_id)
            .collect()
    }

    fn behind_dead_head(&self, row: &OutboxMessage) -> bool {
        self.ordering == OrderingPolicy::Block
            && row
                .ordering_key
                .as_ref()
                .is_some_and(|key| self.keys[key].first_dead.is_some_and(|d| d < row.seq))
    }
}
