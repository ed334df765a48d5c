//! Hand-off credits ([`crate::store::hand_off`]): how many messages this process's enqueues
//! may hand the lane without a claim, granted while the lane is idle and revoked before it
//! claims, drains, pauses or its breaker opens.
//!
//! The lane never holds more than its room allows (`concurrency` plus the prefetch in
//! force, at most [`LaneConfig::most_held`](crate::LaneConfig::most_held)): with `outstanding` the
//! credits granted and not yet settled (still in the taker, or taken by an enqueue and in
//! transit), `held + outstanding` stays within the room, since a grant is at most the room
//! left, a taken credit becomes a held claim when its message arrives, and a claim asks for
//! the room minus `outstanding`. A revoke answers what the taker had left; what was taken
//! before it stays outstanding until it arrives or comes back.

use tokio::time::Instant;

use super::{Command, LaneCore, Mode};
use crate::lane::RelayEvent;
use crate::message::OutboxMessage;

/// The lane's side of its taker's credits.
#[derive(Debug, Default)]
pub(super) struct Credits {
    /// Granted since the last revoke: more than the taker may hold now, never less.
    in_taker: usize,
    /// Granted and not settled (in the taker, or taken and in transit).
    outstanding: usize,
    /// A revoke went out and its answer has not come back.
    revoking: bool,
}

impl Credits {
    /// Credits that may still become claims: counted against the room of every claim.
    pub(super) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Whether the taker holds none and no revoke is awaited: a claim may go out.
    pub(super) fn settled(&self) -> bool {
        self.in_taker == 0 && !self.revoking
    }

    fn grant(&mut self, n: usize) {
        self.in_taker += n;
        self.outstanding += n;
    }

    /// Whether a revoke must go out (the taker may hold credits).
    fn revoke(&mut self) -> bool {
        if self.in_taker == 0 {
            return false;
        }
        self.in_taker = 0;
        self.revoking = true;
        true
    }

    /// The revoke's answer: the taker had `left`; those are settled.
    fn revoked(&mut self, left: usize) {
        self.revoking = false;
        self.outstanding = self.outstanding.saturating_sub(left);
    }

    /// `n` taken credits settled: their messages arrived, or they came back unused.
    fn settle(&mut self, n: usize) {
        self.outstanding = self.outstanding.saturating_sub(n);
    }
}

/// What the lane does with its credits after an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stance {
    /// Idle and empty: top the credits up to the room.
    Grant,
    /// Working off handed-off messages while still idle: leave them.
    Keep,
    /// About to claim, ask `next_due`, drain, pause, or held by a gate: take them back.
    Revoke,
}

impl LaneCore {
    /// Credits outstanding, counted against every claim's room.
    pub(super) fn credits_outstanding(&self) -> usize {
        self.credits.outstanding()
    }

    /// Whether no credit is in the taker and no revoke awaited (a claim may go out).
    pub(super) fn credits_settled(&self) -> bool {
        self.credits.settled()
    }

    fn stance(&self, now: Instant) -> Stance {
        let idle = self.hand_off
            && self.mode == Mode::Running
            && self.claim_loop.is_idle()
            && !self.claim_loop.store_has_more()
            && self.claim_loop.sleeping()
            && !self.backoff.waiting
            && self.gates.hand_off_open(now);
        if !idle {
            return Stance::Revoke;
        }
        if self.held() == 0 && self.buffer.is_empty() {
            Stance::Grant
        } else {
            Stance::Keep
        }
    }

    /// Revokes the credits if the lane is about to do anything but sleep; run before the
    /// claim decisions of `pump`.
    pub(super) fn revoke_credits_if_busy(&mut self, now: Instant, out: &mut Vec<Command>) {
        if self.stance(now) == Stance::Revoke && self.credits.revoke() {
            out.push(Command::RevokeCredits);
        }
    }

    /// Tops the credits up to the room if the lane is idle and holds nothing; run last in
    /// `pump`.
    pub(super) fn grant_credits_if_idle(&mut self, now: Instant, out: &mut Vec<Command>) {
        if self.credits.revoking || self.stance(now) != Stance::Grant {
            return;
        }
        let room = self
            .room_with(self.pool.idle())
            .saturating_sub(self.credits.outstanding());
        if room > 0 {
            self.credits.grant(room);
            out.push(Command::GrantCredits(room));
        }
    }

    /// The answer to [`Command::RevokeCredits`].
    pub(super) fn credits_revoked(&mut self, left: usize) {
        self.credits.revoked(left);
    }

    /// Credits taken and not used came back.
    pub(super) fn credits_returned(&mut self, n: usize) {
        self.credits.settle(n);
    }

    /// A message an enqueue wrote claimed for this lane: held as a one-message claim
    /// batch. While paused or draining (or held by a gate) it goes straight back, as a
    /// buffered claim would.
    pub(super) fn handed_off(
        &mut self,
        now: Instant,
        message: OutboxMessage,
        sent_at: Instant,
        out: &mut Vec<Command>,
    ) {
        self.credits.settle(1);
        let Some(claim) = message.claim() else {
            return;
        };
        if matches!(
            self.mode,
            Mode::Paused | Mode::Draining { .. } | Mode::Stopped
        ) || self.gates.holds_claims(now)
        {
            self.release(vec![claim], out);
            return;
        }
        if self.book.holds_unfinished(message.outbox_id) {
            return;
        }
        let outbox_id = message.outbox_id;
        self.buffer.push_back(message);
        // As for a claim, from the enqueue's statement.
        self.open_leases([claim], sent_at, now, out);
        self.emit(
            out,
            RelayEvent::Claimed {
                lane: self.key.clone(),
                outbox_ids: vec![outbox_id],
                redeliveries: 0,
            },
        );
    }
}
