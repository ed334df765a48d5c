//! The states a lane reports: what its relay is doing ([`LaneState`]), its circuit
//! breaker's state ([`BreakerState`]) and the claim gate that holds it back
//! ([`GateKind`]). The relay sets them, its status and events carry them, and the metrics
//! label with them; they live here, apart from both, so that `metrics` needs nothing of
//! `relay` (which records through `metrics`). Reached as `relay::{LaneState, BreakerState,
//! GateKind}` and `metrics::LaneState`.

crate::named::label_values! {
    /// What a lane relay is doing: the value of [`LABEL_STATE`](crate::metrics::LABEL_STATE) on
    /// [`LANE_STATE`](crate::metrics::LANE_STATE).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum LaneState {
        /// Claiming and delivering.
        Running => "running",
        /// Paused by a command: claims nothing, keeps its configuration.
        Paused => "paused",
        /// Being removed: claims nothing new, finishes what it holds.
        Draining => "draining",
        /// Crashed; the supervisor restarts it after a backoff.
        Restarting => "restarting",
        /// Restarted too often within the window: stays down until an operator acts.
        Failed => "failed",
        /// Stopped on purpose (shutdown or removal).
        Stopped => "stopped",
    }
}

crate::named::label_values! {
    /// A circuit breaker's state: the value of the `state` label on
    /// `outbox_breaker_state` ([`crate::metrics::BREAKER_STATE`]).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum BreakerState {
        /// The target answers: claims go on.
        Closed => "closed",
        /// The target kept failing: no claims until the cool-down ends.
        Open => "open",
        /// The cool-down ended: one probe message is out; its outcome closes or re-opens.
        HalfOpen => "half_open",
    }
}

crate::named::label_values! {
    /// The claim gate that held a lane back: the value of the `gate` label on
    /// `outbox_throttled_seconds` ([`crate::metrics::THROTTLED_SECONDS`]).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum GateKind {
        /// The rate limit's tokens ran out.
        RateLimit => "rate_limit",
        /// The circuit breaker is open or waits for its probe.
        Breaker => "breaker",
        /// A target's Retry-After holds the lane.
        RetryAfter => "retry_after",
    }
}

#[cfg(test)]
mod tests {
    /// `relay` records through `metrics`; `metrics` must not need `relay` back, or the two
    /// grow into one knot again.
    #[test]
    fn metrics_imports_nothing_of_relay() {
        for (file, text) in [
            ("metrics.rs", include_str!("metrics.rs")),
            ("metrics/lane.rs", include_str!("metrics/lane.rs")),
            ("metrics/process.rs", include_str!("metrics/process.rs")),
            (
                "metrics/prometheus.rs",
                include_str!("metrics/prometheus.rs"),
            ),
        ] {
            for (n, line) in text.lines().enumerate() {
                assert!(
                    !line.contains("crate::relay") && !line.contains("outbox_relay::relay"),
                    "src/{file}:{}: {line}",
                    n + 1
                );
            }
        }
    }
}
