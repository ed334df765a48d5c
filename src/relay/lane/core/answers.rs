//! What the lane does with the claim pipeline's answers: a claimed batch (into the buffer,
//! its leases into the book, a short one's `next_due`), and `next_due` (the idle sleep).

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::claim_loop::idle_sleep;
use super::{ClaimOut, Command, LaneCore, Mode, TimerKind, MIN_IDLE_SLEEP};
use crate::lane::RelayEvent;
use crate::message::ClaimRef;
use crate::mutation::Mutation;
use crate::store::StoreOp;
use crate::store::{ClaimBatch, StoreError};

impl LaneCore {
    pub(super) fn claimed(
        &mut self,
        now: Instant,
        call: Option<ClaimOut>,
        result: Result<ClaimBatch, StoreError>,
        out: &mut Vec<Command>,
    ) {
        let Some(ClaimOut {
            issued_at,
            limit,
            more_since,
            ..
        }) = call
        else {
            return;
        };
        let batch = match result {
            Ok(batch) => batch,
            Err(error) => {
                self.gates.claim_answered(limit, &[]);
                return self.store_failed(now, StoreOp::Claim, &error, out);
            }
        };
        self.store_ok();
        let took = now.saturating_duration_since(issued_at);
        self.note_claim_time(took);
        // Claimed just as the drain or a pause began, or sent before the breaker opened or
        // a Retry-After hold began: hand them straight back (a release does not count the
        // attempt).
        let hand_back = matches!(
            self.mode,
            Mode::Paused | Mode::Draining { .. } | Mode::Stopped
        ) || self.gates.holds_claims(now);
        let claimed: Vec<Uuid> = if hand_back {
            Vec::new()
        } else {
            batch.messages.iter().map(|m| m.outbox_id).collect()
        };
        self.gates.claim_answered(limit, &claimed);
        if !batch.dead_lettered.is_empty() {
            for outbox_id in &batch.dead_lettered {
                tracing::warn!(lane = %self.key.name, target = %self.key.target, %outbox_id,
                    "lease lapsed on the last attempt; message dead-lettered");
            }
            self.emit(
                out,
                RelayEvent::LeaseLapsedDeadLettered {
                    lane: self.key.clone(),
                    outbox_ids: batch.dead_lettered,
                },
            );
        }
        if !batch.unreadable.is_empty() {
            for row in &batch.unreadable {
                let outbox_id = row.outbox_id.map(|id| id.to_string());
                tracing::warn!(lane = %self.key.name, target = %self.key.target,
                    outbox_id = outbox_id.as_deref().unwrap_or("?"), seq = row.seq,
                    error = %row.error, "claimed row cannot be read; message dead-lettered");
            }
            self.emit(
                out,
                RelayEvent::UnreadableDeadLettered {
                    lane: self.key.clone(),
                    rows: batch.unreadable,
                },
            );
        }
        let got = batch.messages.len();
        // A short answer means "nothing more" only if nothing came since it was asked.
        if got < limit && !more_since {
            self.claim_loop.came_back_short(now, &batch.next_due);
        } else if got >= limit {
            self.claim_loop.came_back_full();
        }
        if got == 0 {
            out.push(Command::EmptyClaim);
            self.poll_ceiling(now, out);
            return;
        }
        let claims: Vec<ClaimRef> = batch.messages.iter().filter_map(|m| m.claim()).collect();
        if hand_back {
            self.release(claims, out);
            return;
        }
        let mut ids = Vec::with_capacity(got);
        let mut redeliveries = 0;
        for message in batch.messages {
            ids.push(message.outbox_id);
            if self.book.holds_unfinished(message.outbox_id) {
                // Our own delivery (or buffered claim) outlived its lease and we claimed it
                // again. One delivery is enough: it adopts the fresh claim (the book moves
                // it to this batch), so its ack lands with the current token. (A finished
                // one's ack carries the old token, so it is delivered again.) A buffered
                // copy takes the fresh claim's token and attempt: the handler is handed the
                // claim it runs under.
                self.buffer.renew(message);
                continue;
            }
            if message.attempt_count > 1 {
                redeliveries += 1;
            }
            self.buffer.push_back(message);
        }
        self.open_leases(claims, issued_at, now, out);
        self.emit(
            out,
            RelayEvent::Claimed {
                lane: self.key.clone(),
                outbox_ids: ids,
                redeliveries,
            },
        );
        if got < limit {
            self.poll_ceiling(now, out);
        }
    }

    /// Books `claims` as one batch and sets its lease timer. The store started the lease
    /// between `sent_at` (the claim, or the enqueue that handed the message off) and its
    /// answer at `now`. An extension must come before the earliest possible lapse, so it is
    /// timed from the send; a lapse (no extension) must not be declared before the latest
    /// possible one, so it is timed from the answer.
    pub(super) fn open_leases(
        &mut self,
        claims: impl IntoIterator<Item = ClaimRef>,
        sent_at: Instant,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        // The store started the leases after the send: none lapses before this.
        let from = if self.mutated(Mutation::LeaseTimedFromAnswer) {
            now
        } else {
            sent_at
        };
        let Some(batch) = self.book.open(claims, from + self.config.lease) else {
            return;
        };
        let started = if self.config.lease_extend_margin.is_some() {
            sent_at
        } else {
            now
        };
        out.push(Command::timer(
            TimerKind::Lease { batch },
            started + self.lease_check_delay(),
            0,
        ));
    }

    /// After a short claim while the lane holds claims: no `next_due` (their own leases
    /// would answer it), but the poll ceiling still holds, so a retry that comes due while
    /// long deliveries run is not left waiting for them.
    pub(super) fn poll_ceiling(&mut self, now: Instant, out: &mut Vec<Command>) {
        if self.held() == 0 {
            return; // `pump` asks `next_due`
        }
        let generation = self.claim_loop.poll_ceiling();
        out.push(Command::timer(
            TimerKind::Poll,
            now + self.config.max_poll_interval,
            generation,
        ));
    }

    pub(super) fn next_due(
        &mut self,
        now: Instant,
        result: Result<Option<Duration>, StoreError>,
        out: &mut Vec<Command>,
    ) {
        self.claim_loop.due_answered();
        let due = match result {
            Ok(due) => due,
            Err(error) => return self.store_failed(now, StoreOp::NextDue, &error, out),
        };
        self.store_ok();
        if self.claim_loop.store_has_more() {
            return; // news came while it was asked: the lane claims instead
        }
        self.sleep_until_due(now, due, out);
    }

    /// Sleeps until the next message is due (`None`: nothing to wait for), within the poll
    /// ceiling; a watched lane ([`LaneCore::watched`]) without the ceiling: the due
    /// watcher's pass is its ceiling, and costs this lane nothing when nothing is due. The
    /// `Idle` event says the longest the lane sleeps before something looks at the store
    /// for it (its timer, or the watcher's next pass).
    pub(super) fn sleep_until_due(
        &mut self,
        now: Instant,
        due: Option<Duration>,
        out: &mut Vec<Command>,
    ) {
        if self.mode != Mode::Running {
            return; // paused or draining since it was asked: no sleep to plan
        }
        let sleep = idle_sleep(due, MIN_IDLE_SLEEP, self.config.max_poll_interval);
        let until = if self.watched {
            due.and_then(|due| now.checked_add(due.max(MIN_IDLE_SLEEP)))
        } else {
            Some(now + sleep)
        };
        let generation = self.claim_loop.sleep(until);
        if let Some(at) = until {
            out.push(Command::timer(TimerKind::Poll, at, generation));
        }
        self.emit(
            out,
            RelayEvent::Idle {
                lane: self.key.clone(),
                sleep,
            },
        );
    }
}
