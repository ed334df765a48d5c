//! `LeaseBook`: every claim the lane holds (buffered or running), grouped by the claim
//! statement that took it, each group with one lease timer and a generation.
//!
//! Invariant, kept by these methods alone: a batch's members are claims this book holds and
//! that point back at that batch, and no batch is empty (an empty batch's timer would extend
//! nothing, forever). A claim detached from its batch (its lease lapsed for good) stays held
//! so its delivery can still ack with its token, which the store then fences.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::store::ClaimRef;

/// A claim the lane holds, and the batch whose timer keeps its lease.
#[derive(Debug, Clone, Copy)]
struct Held {
    claim: ClaimRef,
    batch: Option<u64>,
}

#[derive(Debug)]
struct Batch {
    members: HashSet<Uuid>,
    generation: u64,
    /// Until when the lease surely holds: from the send of the claim (or of the last
    /// extension the store applied), the earliest the store can have started it.
    held_until: Instant,
    /// When the extension in flight was sent.
    extension_sent: Option<Instant>,
}

/// The lane's claims and their lease timers.
#[derive(Debug, Default)]
pub(crate) struct LeaseBook {
    held: HashMap<Uuid, Held>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
}

impl LeaseBook {
    /// Records the claims of one claim statement as a new batch, at generation 0. A claim
    /// already held (our own lapsed claim, taken again) moves to the new batch with its
    /// fresh token. `None` when there is nothing to record.
    /// `held_until`: when the lease may lapse at the earliest.
    pub(crate) fn open(
        &mut self,
        claims: impl IntoIterator<Item = ClaimRef>,
        held_until: Instant,
    ) -> Option<u64> {
        let id = self.next_batch + 1;
        let mut batch = Batch {
            members: HashSet::new(),
            generation: 0,
            held_until,
            extension_sent: None,
        };
        for claim in claims {
            self.detach(claim.outbox_id);
            self.held.insert(
                claim.outbox_id,
                Held {
                    claim,
                    batch: Some(id),
                },
            );
            batch.members.insert(claim.outbox_id);
        }
        if batch.members.is_empty() {
            return None;
        }
        self.next_batch = id;
        self.batches.insert(id, batch);
        Some(id)
    }

    /// Whether the lane holds a claim on this message.
    pub(crate) fn holds(&self, outbox_id: Uuid) -> bool {
        self.held.contains_key(&outbox_id)
    }

    /// Stops holding a claim (acked, nacked, released); its batch forgets it.
    pub(crate) fn close(&mut self, outbox_id: Uuid) -> Option<ClaimRef> {
        self.detach(outbox_id);
        self.held.remove(&outbox_id).map(|held| held.claim)
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
        entry.extension_sent = Some(now);
        Some(entry.generation)
    }

    /// The store applied the extension in flight: the lease holds for `lease` from its send.
    pub(crate) fn extended(&mut self, batch: u64, lease: Duration) {
        if let Some(entry) = self.batches.get_mut(&batch) {
            if let Some(sent) = entry.extension_sent.take() {
                entry.held_until = entry.held_until.max(sent + lease);
            }
        }
    }

    /// Whether this claim's lease may have lapsed by `now`, as far as the lane can know: its
    /// batch's lease is not sure to hold, or it lapsed for good. A message in that state
    /// must not start: another claimer may have it (and its key) already.
    pub(crate) fn may_have_lapsed(&self, outbox_id: Uuid, now: Instant) -> bool {
        match self.held.get(&outbox_id).map(|held| held.batch) {
            Some(Some(batch)) => self
                .batches
                .get(&batch)
                .is_none_or(|entry| entry.held_until <= now),
            Some(None) => true,
            None => false,
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

    /// Claims held, batched or not.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
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
