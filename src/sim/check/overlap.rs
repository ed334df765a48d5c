//! Deliveries that run past their lapse beside the next holder's delivery of their key (or
//! of themselves): counted, timed, and held to the start margin's bound.

use std::time::Duration;

use uuid::Uuid;

use super::Checker;
use crate::message::{OutboxStatus, UnixMillis};

/// Deliveries that ran past their lapse beside a later delivery of their key (or of
/// themselves): how many, the longest, and the same for those excused from the bound (a
/// forward jump of the store's clock since the claim, or a process frozen while it ran:
/// no lane can foresee the one or act during the other).
#[derive(Debug, Default, Clone, Copy)]
pub struct Overlaps {
    /// Overlaps held to the bound.
    pub count: u64,
    /// The longest of them.
    pub longest: Duration,
    /// Overlaps excused from it.
    pub excused: u64,
    /// The longest of those.
    pub longest_excused: Duration,
}

impl Overlaps {
    /// The two together (over several runs).
    pub fn add(&mut self, other: Overlaps) {
        self.count += other.count;
        self.longest = self.longest.max(other.longest);
        self.excused += other.excused;
        self.longest_excused = self.longest_excused.max(other.longest_excused);
    }
}

impl Checker {
    /// Delivery `this` of `id` starts at `now` on a live claim: every delivery of the same
    /// message or key still running on a claim that is no longer live overlaps it.
    pub(super) fn overlaps_begin(
        &mut self,
        this: u64,
        id: Uuid,
        key: Option<&str>,
        now: UnixMillis,
    ) {
        let mut begun = Vec::new();
        for (number, running) in &self.running {
            let same = running.outbox_id == id || (key.is_some() && running.key.as_deref() == key);
            let live = self.rows.get(&running.outbox_id).is_some_and(|row| {
                row.status == OutboxStatus::Claimed
                    && row.claim_token == Some(running.token)
                    && row.lease_expires_at.is_some_and(|at| at > now)
            });
            if same && !live {
                let claimed_at = self.claimed_at.get(&(running.outbox_id, running.token));
                let jumped = self
                    .jumped_forward
                    .is_some_and(|jump| claimed_at.is_none_or(|at| jump >= *at));
                begun.push((*number, this, self.now, jumped));
            }
        }
        self.overlapping.extend(begun);
    }

    /// These deliveries' process froze while they ran: their overlaps are excused.
    pub(crate) fn froze(&mut self, deliveries: impl IntoIterator<Item = u64>) {
        self.frozen.extend(deliveries);
    }

    /// Delivery `delivery` ended: so did every overlap it was in.
    pub(super) fn overlaps_end(&mut self, delivery: u64) {
        let (ended, going_on) = std::mem::take(&mut self.overlapping)
            .into_iter()
            .partition(|(a, b, _, _)| *a == delivery || *b == delivery);
        self.overlapping = going_on;
        for (a, b, since, jumped) in ended {
            let lasted = self.now.saturating_sub(since);
            let excused = jumped || self.frozen.contains(&a);
            if excused {
                self.overlaps.excused += 1;
                self.overlaps.longest_excused = self.overlaps.longest_excused.max(lasted);
            } else {
                self.overlaps.count += 1;
                self.overlaps.longest = self.overlaps.longest.max(lasted);
            }
            // The store's clock reads whole milliseconds: a lapse may show 1 ms early.
            if !excused && lasted > self.overlap_bound + Duration::from_millis(2) {
                self.fail(format!(
                    "delivery {a} ran {lasted:?} past its lapse beside delivery {b} of the same \
                     key, over the start margin's bound {:?}",
                    self.overlap_bound
                ));
            }
        }
    }
}
