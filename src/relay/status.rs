//! What [`RelayHandle::status`](super::RelayHandle::status) answers per lane
//! ([`LaneStatus`], [`GateStatus`]), and the counters behind it, which outlive a lane's
//! incarnations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::lane::{BreakerState, LaneKey, LaneState};

/// A lane's status, as [`RelayHandle::status`](super::RelayHandle::status) reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LaneStatus {
    /// The lane.
    pub lane: LaneKey,
    /// Its state.
    pub state: LaneState,
    /// Deliveries running now.
    pub in_flight: u64,
    /// Restarts since the relay started.
    pub restarts: u64,
    /// The last crash or store error.
    pub last_error: Option<String>,
    /// Messages claimed.
    pub claimed: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Failed deliveries (retried or dead-lettered).
    pub failed: u64,
    /// Messages dead-lettered.
    pub dead_lettered: u64,
    /// Acks and nacks that found their claim lost.
    pub lost_claims: u64,
    /// The lane's claim gates.
    pub gates: GateStatus,
    /// Paused in this process ([`RelayHandle::pause`](super::RelayHandle::pause)); the
    /// lane stays paused until this process resumes it or restarts.
    pub paused_here: bool,
    /// Paused for every relay on the store ([`Outbox::pause_lane`](crate::Outbox::pause_lane)):
    /// who, when and why. Either pause stops the lane's claims.
    pub fleet_pause: Option<crate::store::LanePause>,
    /// How long the lane has been [failed](LaneState::Failed) (in JSON, `failed_for_ms`);
    /// `None` while it is not.
    #[serde(
        rename = "failed_for_ms",
        serialize_with = "crate::time::serialize_optional_duration_millis"
    )]
    pub failed_for: Option<Duration>,
}

/// A lane's claim gates, as [`LaneStatus`] reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GateStatus {
    /// The rate limit, e.g. `200/1s (burst 200)`; `None` without one.
    pub rate_limit: Option<String>,
    /// The circuit breaker's state; `None` without a breaker.
    pub breaker: Option<BreakerState>,
    /// Whether a target's Retry-After holds the whole lane.
    pub retry_after_holds_lane: bool,
    /// How long the gates held claims back since the relay started (in JSON,
    /// `throttled_ms`: whole milliseconds).
    #[serde(
        rename = "throttled_ms",
        serialize_with = "crate::time::serialize_duration_millis"
    )]
    pub throttled: Duration,
}

/// Counters that outlive a lane's incarnations, shared by the supervisor and the lane.
#[derive(Debug, Default)]
pub(crate) struct LaneCounters {
    pub(crate) in_flight: AtomicU64,
    pub(crate) claimed: AtomicU64,
    pub(crate) delivered: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) lost_claims: AtomicU64,
    pub(crate) last_error: Mutex<Option<String>>,
    /// Time the claim gates held the lane back, in microseconds.
    pub(crate) throttled_micros: AtomicU64,
    pub(crate) breaker: Mutex<Option<BreakerState>>,
}

impl LaneCounters {
    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_duration(counter: &AtomicU64, duration: Duration) {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        counter.fetch_add(micros, Ordering::Relaxed);
    }

    pub(crate) fn set_breaker(&self, state: Option<BreakerState>) {
        *self
            .breaker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = state;
    }

    pub(crate) fn breaker(&self) -> Option<BreakerState> {
        *self
            .breaker
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn set_last_error(&self, error: String) {
        let mut slot = self
            .last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *slot = Some(error);
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}
