//! Claim gates: the policies `LaneCore` asks before each claim (claim or not, how many, until
//! when to wait), and tells about each claim and each delivery's outcome. A rate limit, a
//! circuit breaker and a Retry-After hold are gates; all act before the claim, so a
//! throttled or failing target costs no attempts.
//!
//! Why one concrete composition and not a list of trait objects: the breaker's changes
//! become relay events and the throttled time is counted by gate, so the core wants typed
//! answers; each policy is still its own small type with its own tests.
//! Pause and the store-error backoff stay in the core: both also stop acks and nacks (or
//! their timers), which is more than gating a claim.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::config::LaneConfig;

mod breaker;
mod rate;

pub(crate) use breaker::{BreakerAdmit, CircuitBreaker, Transition, Verdict};
pub(crate) use rate::TokenBucket;

pub(crate) use crate::lane::{BreakerState, GateKind};

/// The gates' answer to "may the lane claim now?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Claim up to this many (never 0).
    UpTo(usize),
    /// Claim nothing: `gate` holds the lane, until `until` if known (else until an
    /// outcome comes).
    Wait {
        gate: GateKind,
        until: Option<Instant>,
    },
}

/// The lane's claim gates.
#[derive(Debug)]
pub(crate) struct Gates {
    rate: Option<TokenBucket>,
    breaker: Option<CircuitBreaker>,
    /// Retry-After holds the lane when configured: no claims until then. Capped at this.
    hold_cap: Option<Duration>,
    hold_until: Option<Instant>,
    /// Breaker changes not yet turned into events.
    changes: Vec<Transition>,
    /// A Retry-After hold began (or grew) since the last look.
    hold_began: bool,
}

impl Gates {
    pub(crate) fn new(config: &LaneConfig) -> Self {
        Self {
            rate: config.rate_limit.map(TokenBucket::new),
            breaker: config.circuit_breaker.map(CircuitBreaker::new),
            hold_cap: config.retry_after_holds_lane.then_some(config.retry.max),
            hold_until: None,
            changes: Vec::new(),
            hold_began: false,
        }
    }

    /// The breaker's state, if the lane has one.
    pub(crate) fn breaker_state(&self) -> Option<BreakerState> {
        self.breaker.as_ref().map(CircuitBreaker::state)
    }

    /// Whether an open breaker or a Retry-After hold stops claims at `now` (a claim
    /// answered now is handed back).
    pub(crate) fn holds_claims(&self, now: Instant) -> bool {
        self.breaker_state() == Some(BreakerState::Open)
            || self.hold_until.is_some_and(|until| now < until)
    }

    /// Whether hand-offs may come in at `now`: no rate limit (a hand-off takes no token),
    /// no breaker unless closed, no Retry-After hold.
    pub(crate) fn hand_off_open(&self, now: Instant) -> bool {
        self.rate.is_none()
            && self
                .breaker_state()
                .is_none_or(|state| state == BreakerState::Closed)
            && self.hold_until.is_none_or(|until| now >= until)
    }

    /// How many of `want` (> 0) messages the lane may claim at `now`.
    pub(crate) fn admit(&mut self, now: Instant, want: usize) -> Admit {
        let mut limit = want;
        if let Some(breaker) = &mut self.breaker {
            let (admit, change) = breaker.admit(now);
            self.changes.extend(change);
            match admit {
                BreakerAdmit::Any => {}
                BreakerAdmit::Probe => limit = 1,
                BreakerAdmit::Until(at) => return wait(GateKind::Breaker, Some(at)),
                BreakerAdmit::AwaitProbe => return wait(GateKind::Breaker, None),
            }
        }
        if let Some(until) = self.hold_until {
            if now < until {
                return wait(GateKind::RetryAfter, Some(until));
            }
            self.hold_until = None;
        }
        if let Some(rate) = &mut self.rate {
            let tokens = rate.available(now);
            let batch = rate.batch(limit);
            if tokens < batch {
                // Run low: wait for a batch's worth rather than claim a token at a time.
                return wait(GateKind::RateLimit, Some(rate.ready_at(now, batch)));
            }
            limit = limit.min(tokens);
        }
        Admit::UpTo(limit)
    }

    /// A claim of up to `limit` went out: its tokens are spent.
    pub(crate) fn claim_sent(&mut self, now: Instant, limit: usize) {
        if let Some(rate) = &mut self.rate {
            rate.take(now, limit);
        }
        if let Some(breaker) = &mut self.breaker {
            breaker.claim_sent();
        }
    }

    /// The claim of up to `limit` came back with `claimed` (empty if it failed): the
    /// tokens of what it did not take come back.
    pub(crate) fn claim_answered(&mut self, limit: usize, claimed: &[Uuid]) {
        if let Some(rate) = &mut self.rate {
            rate.give_back(limit.saturating_sub(claimed.len()));
        }
        if let Some(breaker) = &mut self.breaker {
            breaker.claim_answered(claimed);
        }
    }

    /// A claimed message will not be delivered by this lane (lapsed, released).
    pub(crate) fn forget(&mut self, outbox_id: Uuid) {
        if let Some(breaker) = &mut self.breaker {
            breaker.forget(outbox_id);
        }
    }

    /// A delivery ended: `failed` for a retryable failure, with the target's Retry-After.
    pub(crate) fn observe(
        &mut self,
        now: Instant,
        outbox_id: Uuid,
        failed: bool,
        retry_after: Option<Duration>,
    ) {
        if let (Some(cap), Some(after), true) = (self.hold_cap, retry_after, failed) {
            let until = now + after.min(cap);
            if self.hold_until.is_none_or(|held| held < until) {
                self.hold_until = Some(until);
                self.hold_began = true;
            }
        }
        if let Some(breaker) = &mut self.breaker {
            let verdict = if failed {
                Verdict::Failed
            } else {
                Verdict::Answered
            };
            self.changes
                .extend(breaker.observe(now, outbox_id, verdict));
        }
    }

    /// Whether a Retry-After hold began or grew since the last call.
    pub(crate) fn take_hold_began(&mut self) -> bool {
        std::mem::take(&mut self.hold_began)
    }

    /// The breaker changes since the last call, oldest first.
    pub(crate) fn take_changes(&mut self) -> Vec<Transition> {
        std::mem::take(&mut self.changes)
    }
}

fn wait(gate: GateKind, until: Option<Instant>) -> Admit {
    Admit::Wait { gate, until }
}
