//! `CircuitBreaker`: the breaker as a pure type. Time comes in as a value.
//!
//! ```text
//!            N failures in a row, or the ratio over the window
//!   closed ───────────────────────────────────────────────────▶ open (cool-down)
//!     ▲                                                           │ cool-down over
//!     │ probe delivered                                           ▼
//!     └──────────────────────────────────────────────────── half-open: one probe claimed
//!                     probe failed: open again, the cool-down doubled (up to the max)
//! ```
//! Only the probe's outcome decides a half-open breaker; outcomes of deliveries claimed
//! before it opened are ignored while it is not closed.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::BreakerState;
use crate::config::CircuitBreakerConfig;
use crate::retry::RetryPolicy;

/// How a delivery went, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The target answered (delivered, or rejected for good).
    Answered,
    /// A retryable failure: an error, a timeout, a panic.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// No probe out: the next claim is one.
    Ready,
    /// The probe's claim is in flight.
    Claiming,
    /// The probe is being delivered.
    Running(Uuid),
}

#[derive(Debug)]
enum State {
    Closed {
        consecutive: u32,
        /// Outcomes within the ratio's window: when, and whether it failed.
        window: VecDeque<(Instant, bool)>,
    },
    Open {
        until: Instant,
    },
    HalfOpen {
        probe: Probe,
    },
}

/// What the breaker lets a claim do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerAdmit {
    /// Claim as usual.
    Any,
    /// Claim one message: the probe.
    Probe,
    /// Claim nothing until then.
    Until(Instant),
    /// Claim nothing until the probe's outcome.
    AwaitProbe,
}

/// A breaker state change, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transition {
    pub(crate) state: BreakerState,
    pub(crate) reason: String,
}

/// The lane's circuit breaker.
#[derive(Debug)]
pub(crate) struct CircuitBreaker {
    config: CircuitBreakerConfig,
    state: State,
    /// Openings since the breaker last closed: each doubles the cool-down.
    openings: u32,
}

impl CircuitBreaker {
    pub(crate) fn new(config: CircuitBreakerConfig) -> Self {
        Self {
            config,
            state: closed(),
            openings: 0,
        }
    }

    pub(crate) fn state(&self) -> BreakerState {
        match self.state {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// What a claim may do at `now`; an open breaker whose cool-down is over turns
    /// half-open here.
    pub(crate) fn admit(&mut self, now: Instant) -> (BreakerAdmit, Option<Transition>) {
        match self.state {
            State::Closed { .. } => (BreakerAdmit::Any, None),
            State::Open { until } if now < until => (BreakerAdmit::Until(until), None),
            State::Open { .. } => {
                self.state = State::HalfOpen {
                    probe: Probe::Ready,
                };
                let change = Transition {
                    state: BreakerState::HalfOpen,
                    reason: "cool-down over: one probe message".to_owned(),
                };
                (BreakerAdmit::Probe, Some(change))
            }
            State::HalfOpen {
                probe: Probe::Ready,
            } => (BreakerAdmit::Probe, None),
            State::HalfOpen { .. } => (BreakerAdmit::AwaitProbe, None),
        }
    }

    /// A claim went out (of one message, if it is the probe).
    pub(crate) fn claim_sent(&mut self) {
        if let State::HalfOpen { probe } = &mut self.state {
            if *probe == Probe::Ready {
                *probe = Probe::Claiming;
            }
        }
    }

    /// The claim came back with `claimed` (empty if it failed).
    pub(crate) fn claim_answered(&mut self, claimed: &[Uuid]) {
        if let State::HalfOpen { probe } = &mut self.state {
            if *probe == Probe::Claiming {
                *probe = claimed
                    .first()
                    .map_or(Probe::Ready, |id| Probe::Running(*id));
            }
        }
    }

    /// A claimed message will not be delivered by this lane after all (lapsed, released):
    /// if it was the probe, the next claim is the probe.
    pub(crate) fn forget(&mut self, outbox_id: Uuid) {
        if let State::HalfOpen { probe } = &mut self.state {
            if *probe == Probe::Running(outbox_id) {
                *probe = Probe::Ready;
            }
        }
    }

    /// A delivery of `outbox_id` ended with `verdict` at `now`.
    pub(crate) fn observe(
        &mut self,
        now: Instant,
        outbox_id: Uuid,
        verdict: Verdict,
    ) -> Option<Transition> {
        match &mut self.state {
            State::Closed {
                consecutive,
                window,
            } => {
                let failed = verdict == Verdict::Failed;
                *consecutive = if failed { *consecutive + 1 } else { 0 };
                if let Some(n) = self.config.consecutive_failures {
                    if *consecutive >= n {
                        let reason = format!("{n} retryable failures in a row");
                        return Some(self.open(now, reason));
                    }
                }
                let ratio = self.config.failure_ratio?;
                window.push_back((now, failed));
                while window
                    .front()
                    .is_some_and(|(at, _)| now.saturating_duration_since(*at) > ratio.window)
                {
                    window.pop_front();
                }
                let total = window.len();
                let failures = window.iter().filter(|(_, failed)| *failed).count();
                if total >= ratio.min_requests as usize
                    && failures * 1000 >= usize::from(ratio.permille) * total
                {
                    let reason = format!(
                        "{failures} of the last {total} deliveries failed within {:?}",
                        ratio.window
                    );
                    return Some(self.open(now, reason));
                }
                None
            }
            State::Open { .. } => None,
            State::HalfOpen { probe } => {
                if *probe != Probe::Running(outbox_id) {
                    return None;
                }
                match verdict {
                    Verdict::Answered => {
                        self.state = closed();
                        self.openings = 0;
                        Some(Transition {
                            state: BreakerState::Closed,
                            reason: "the probe was delivered".to_owned(),
                        })
                    }
                    Verdict::Failed => Some(self.open(now, "the probe failed".to_owned())),
                }
            }
        }
    }

    /// Opens now, for the cool-down of this opening (doubled per opening since the
    /// breaker last closed, up to the max).
    fn open(&mut self, now: Instant, reason: String) -> Transition {
        let cool_down = self.cool_down(self.openings);
        self.openings = self.openings.saturating_add(1);
        self.state = State::Open {
            until: now + cool_down,
        };
        Transition {
            state: BreakerState::Open,
            reason: format!("{reason}; no claims for {cool_down:?}"),
        }
    }

    /// The crate's one exponential backoff, [`RetryPolicy`], without jitter: the probe
    /// comes when the operator expects it. After `openings` openings this is the
    /// backoff before attempt `openings + 1`.
    fn cool_down(&self, openings: u32) -> Duration {
        RetryPolicy::new(self.config.cool_down, self.config.max_cool_down)
            .jitter(false)
            .backoff(openings.saturating_add(1))
    }
}

fn closed() -> State {
    State::Closed {
        consecutive: 0,
        window: VecDeque::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FailureRatio;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(
            CircuitBreakerConfig::default()
                .consecutive_failures(Some(3))
                .cool_down(Duration::from_secs(10))
                .max_cool_down(Duration::from_secs(25)),
        )
    }

    #[test]
    fn opens_after_n_failures_in_a_row_and_a_success_resets_the_count() {
        let now = Instant::now();
        let mut b = breaker();
        let id = Uuid::new_v4();
        assert!(b.observe(now, id, Verdict::Failed).is_none());
        assert!(b.observe(now, id, Verdict::Failed).is_none());
        assert!(b.observe(now, id, Verdict::Answered).is_none());
        assert!(b.observe(now, id, Verdict::Failed).is_none());
        assert!(b.observe(now, id, Verdict::Failed).is_none());
        let change = b.observe(now, id, Verdict::Failed).expect("opens");
        assert_eq!(change.state, BreakerState::Open);
        assert!(change.reason.contains("3 retryable failures"), "{change:?}");
        let until = now + Duration::from_secs(10);
        assert_eq!(b.admit(now).0, BreakerAdmit::Until(until));
    }

    #[test]
    fn half_open_sends_one_probe_and_its_failure_reopens_with_a_doubled_capped_cool_down() {
        let mut now = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            b.observe(now, Uuid::new_v4(), Verdict::Failed);
        }
        for expected in [20, 25, 25] {
            now += Duration::from_secs(30);
            let (admit, change) = b.admit(now);
            assert_eq!(admit, BreakerAdmit::Probe);
            assert_eq!(change.map(|c| c.state), Some(BreakerState::HalfOpen));
            b.claim_sent();
            assert_eq!(b.admit(now).0, BreakerAdmit::AwaitProbe);
            let probe = Uuid::new_v4();
            b.claim_answered(&[probe]);
            // A late outcome of an older delivery decides nothing.
            assert!(b.observe(now, Uuid::new_v4(), Verdict::Answered).is_none());
            let change = b.observe(now, probe, Verdict::Failed).expect("re-opens");
            assert_eq!(change.state, BreakerState::Open);
            assert_eq!(
                b.admit(now).0,
                BreakerAdmit::Until(now + Duration::from_secs(expected))
            );
        }
        now += Duration::from_secs(30);
        b.admit(now);
        b.claim_sent();
        let probe = Uuid::new_v4();
        b.claim_answered(&[probe]);
        let change = b.observe(now, probe, Verdict::Answered).expect("closes");
        assert_eq!(change.state, BreakerState::Closed);
        // Closed again, the next opening starts from the first cool-down.
        for _ in 0..3 {
            b.observe(now, Uuid::new_v4(), Verdict::Failed);
        }
        assert_eq!(
            b.admit(now).0,
            BreakerAdmit::Until(now + Duration::from_secs(10))
        );
    }

    #[test]
    fn an_empty_probe_claim_or_a_forgotten_probe_lets_the_next_claim_probe() {
        let now = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            b.observe(now, Uuid::new_v4(), Verdict::Failed);
        }
        let later = now + Duration::from_secs(10);
        assert_eq!(b.admit(later).0, BreakerAdmit::Probe);
        b.claim_sent();
        b.claim_answered(&[]);
        assert_eq!(b.admit(later).0, BreakerAdmit::Probe);
        b.claim_sent();
        let probe = Uuid::new_v4();
        b.claim_answered(&[probe]);
        b.forget(probe);
        assert_eq!(b.admit(later).0, BreakerAdmit::Probe);
    }

    #[test]
    fn opens_on_a_failure_ratio_once_the_window_holds_enough_outcomes() {
        let mut now = Instant::now();
        let mut b = CircuitBreaker::new(
            CircuitBreakerConfig::default()
                .consecutive_failures(None)
                .failure_ratio(Some(FailureRatio {
                    permille: 500,
                    window: Duration::from_secs(10),
                    min_requests: 6,
                })),
        );
        // Alternating: half fail, but never two in a row matter here.
        for i in 0..5 {
            let verdict = if i % 2 == 0 {
                Verdict::Failed
            } else {
                Verdict::Answered
            };
            assert!(b.observe(now, Uuid::new_v4(), verdict).is_none(), "{i}");
            now += Duration::from_secs(1);
        }
        // Old outcomes leave the window: 20 s later the window holds only the new ones.
        now += Duration::from_secs(20);
        for _ in 0..5 {
            assert!(b.observe(now, Uuid::new_v4(), Verdict::Answered).is_none());
        }
        assert!(b.observe(now, Uuid::new_v4(), Verdict::Failed).is_none());
        for _ in 0..3 {
            let _ = b.observe(now, Uuid::new_v4(), Verdict::Failed);
        }
        // 4 failed of 9 is under half; the fifth makes 5 of 10.
        assert_eq!(b.state(), BreakerState::Closed);
        let change = b
            .observe(now, Uuid::new_v4(), Verdict::Failed)
            .expect("opens");
        assert!(change.reason.contains("5 of the last 10"), "{change:?}");
    }
}
