//! `LeaseBook`: every claim the lane holds (buffered or running), grouped by the claim
//! statement that took it, each group with one lease timer and a generation.
//!
//! Invariant, kept by these methods alone: a batch's members are claims this book holds and
//! that point back at that batch, and no batch is empty (an empty batch's timer would extend
//! nothing, forever). A claim detached from its batch (its lease lapsed for good) stays held
//! so its delivery can still ack with its token, which the store then fences.
//!
//! A claim whose delivery finished stays in its batch, *finished*, until its ack or nack is
//! recorded: its lease is extended with the others, because until the store knows, another
//! claimer could take the message once its lease lapsed and deliver it beside the next
//! message of its key. Each batch knows its earliest possible lapse (from the claim's send,
//! moved on by each extension the store applied), so the lane never starts a message whose
//! lease may have lapsed ([`LeaseBook::may_have_lapsed`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::message::ClaimRef;

/// A claim the lane holds, and the batch whose timer keeps its lease.
#[derive(Debug, Clone, Copy)]
struct Held {
    claim: ClaimRef,
    batch: Option<u64>,
    /// Its delivery finished; its ack or nack is not recorded yet.
    finished: bool,
}

#[derive(Debug)]
struct Batch {
    members: HashSet<Uuid>,
    generation: u64,
    /// The earliest instant the store may consider the batch's leases lapsed.
    lapses_at: Instant,
    /// When the extension in flight was sent, if one is.
    extending_since: Option<Instant>,
}

/// The lane's claims and their lease timers.
#[derive(Debug, Default)]
pub(crate) struct LeaseBook {
    held: HashMap<Uuid, Held>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    /// How many held claims are finished.
    finished: usize,
}

impl LeaseBook {
    /// Records the claims of one claim statement as a new batch, at generation 0, whose
    /// leases may lapse from `lapses_at` on. A claim already held (our own lapsed claim,
    /// taken again) moves to the new batch with its fresh token. `None` when there is
    /// nothing to record.
    pub(crate) fn open(
        &mut self,
        claims: impl IntoIterator<Item = ClaimRef>,
        lapses_at: Instant,
    ) -> Option<u64> {
        let id = self.next_batch + 1;
        let mut batch = Batch {
            members: HashSet::new(),
            generation: 0,
            lapses_at,
            extending_since: None,
        };
        for claim in claims {
            self.detach(claim.outbox_id);
            let before = self.held.insert(
                claim.outbox_id,
                Held {
                    claim,
                    batch: Some(id),
                    finished: false,
                },
            );
            if before.is_some_and(|held| held.finished) {
                self.finished -= 1;
            }
            batch.members.insert(claim.outbox_id);
        }
        if batch.members.is_empty() {
            return None;
        }
        self.next_batch = id;
        self.batches.insert(id, batch);
        Some(id)
    }

    /// Whether the lane holds a claim on this message, finished or not.
    pub(crate) fn holds(&self, outbox_id: Uuid) -> bool {
        self.held.contains_key(&outbox_id)
    }

    /// Whether the lane holds this very claim (the message under this token): a message
    /// released and claimed again is held under its fresh token, and an answer about the
    /// old one is not about it.
    pub(crate) fn holds_claim(&self, claim: &ClaimRef) -> bool {
        self.held
            .get(&claim.outbox_id)
            .is_some_and(|held| held.claim.claim_token == claim.claim_token)
    }

    /// Whether the lane holds a claim on this message whose delivery has not finished
    /// (buffered or running).
    pub(crate) fn holds_unfinished(&self, outbox_id: Uuid) -> bool {
        self.held.get(&outbox_id).is_some_and(|held| !held.finished)
    }

    /// Whether this finished claim's ack or nack is still unrecorded.
    pub(crate) fn is_finished(&self, outbox_id: Uuid) -> bool {
        self.held.get(&outbox_id).is_some_and(|held| held.finished)
    }

    /// Stops holding a claim (released, abandoned); its batch forgets it.
    pub(crate) fn close(&mut self, outbox_id: Uuid) -> Option<ClaimRef> {
        self.detach(outbox_id);
        let held = self.held.remove(&outbox_id)?;
        if held.finished {
            self.finished -= 1;
        }
        Some(held.claim)
    }

    /// A claim's delivery finished: it stays held, and extended, until [`Self::settle`].
    pub(crate) fn finish(&mut self, outbox_id: Uuid) -> Option<ClaimRef> {
        let held = self.held.get_mut(&outbox_id)?;
        if !held.finished {
            held.finished = true;
            self.finished += 1;
        }
        Some(held.claim)
    }

    /// The ack or nack of `claim` was recorded (or found the claim lost): stops holding it,
    /// unless the message has been claimed again since, under another token.
    pub(crate) fn settle(&mut self, claim: ClaimRef) {
        let ours = self
            .held
            .get(&claim.outbox_id)
            .is_some_and(|held| held.claim == claim && held.finished);
        if ours {
            self.close(claim.outbox_id);
        }
    }

    /// Whether the store may consider this claim's lease lapsed at `now`: its batch's
    /// earliest possible lapse has come, or it lapsed for good (detached). Not held: true.
    pub(crate) fn may_have_lapsed(&self, outbox_id: Uuid, now: Instant) -> bool {
        match self.held.get(&outbox_id).and_then(|held| held.batch) {
            Some(batch) => self
                .batches
                .get(&batch)
                .is_none_or(|entry| entry.lapses_at <= now),
            None => true,
        }
    }

    /// Whether a batch's earliest possible lapse has come.
    pub(crate) fn batch_may_have_lapsed(&self, batch: u64, now: Instant) -> bool {
        self.batches
            .get(&batch)
            .is_some_and(|entry| entry.lapses_at <= now)
    }

    /// The claims a batch's timer must look after, if the timer is current.
    pub(crate) fn due(&self, batch: u64, generation: u64) -> Option<Vec<ClaimRef>> {
        let entry = self.batches.get(&batch)?;
        (entry.generation == generation).then(|| {
            entry
                .members
                .iter()
                .filter_map(|id| self.held.get(id).map(|held| held.claim))
                .collect()
        })
    }

    /// Moves a batch's timer on, so the one in flight is stale, for an extension sent at
    /// `now`; the new generation.
    pub(crate) fn bump(&mut self, batch: u64, now: Instant) -> Option<u64> {
        let entry = self.batches.get_mut(&batch)?;
        entry.generation += 1;
        entry.extending_since = Some(now);
        Some(entry.generation)
    }

    /// The store applied the batch's extension (of generation `generation`) to `lease`
    /// from when it was sent: its members' leases lapse no earlier than that.
    pub(crate) fn extended(&mut self, batch: u64, generation: u64, lease: Duration) {
        let Some(entry) = self.batches.get_mut(&batch) else {
            return;
        };
        if entry.generation != generation {
            return;
        }
        if let Some(sent) = entry.extending_since.take() {
            entry.lapses_at = entry.lapses_at.max(sent + lease);
        }
    }

    /// Whether a batch still has a timer to run (it may have emptied meanwhile).
    pub(crate) fn is_current(&self, batch: u64, generation: u64) -> bool {
        self.batches
            .get(&batch)
            .is_some_and(|entry| entry.generation == generation)
    }

    /// Stops extending these claims (their leases lapsed); they stay held.
    pub(crate) fn lapse(&mut self, outbox_ids: &[Uuid]) {
        for outbox_id in outbox_ids {
            self.detach(*outbox_id);
        }
    }

    /// Claims held whose delivery has not finished (buffered or running), batched or not.
    /// Finished ones are counted with their outcomes, by the lane.
    pub(crate) fn len(&self) -> usize {
        self.held.len() - self.finished
    }

    fn detach(&mut self, outbox_id: Uuid) {
        let Some(held) = self.held.get_mut(&outbox_id) else {
            return;
        };
        let Some(batch) = held.batch.take() else {
            return;
        };
        if let Some(entry) = self.batches.get_mut(&batch) {
            entry.members.remove(&outbox_id);
            if entry.members.is_empty() {
                self.batches.remove(&batch);
            }
        }
    }
}
