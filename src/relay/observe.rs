//! Turns relay events into metrics, so the lane and the supervisor record in one place.

use crate::metrics as names;
use crate::relay::{LaneKey, LaneState, RelayEvent};
use crate::store::{LaneStats, NackOutcome};

fn labels(lane: &LaneKey) -> [(&'static str, String); 2] {
    [
        (names::LABEL_LANE, lane.lane.clone()),
        (names::LABEL_TARGET, lane.target.clone()),
    ]
}

/// Records the metrics an event stands for.
pub(crate) fn record_event(event: &RelayEvent) {
    match event {
        RelayEvent::Claimed {
            lane,
            outbox_ids,
            redeliveries,
        } => {
            let l = labels(lane);
            metrics::counter!(names::CLAIMED_TOTAL, &l).increment(outbox_ids.len() as u64);
            metrics::counter!(names::REDELIVERIES_TOTAL, &l).increment(*redeliveries as u64);
            metrics::histogram!(names::CLAIM_BATCH_SIZE, &l).record(outbox_ids.len() as f64);
        }
        RelayEvent::LeaseLapsedDeadLettered { lane, outbox_ids } => {
            let l = labels(lane);
            metrics::counter!(names::DEAD_LETTERED_TOTAL, &l).increment(outbox_ids.len() as u64);
            metrics::counter!(names::LEASE_EXPIRED_TOTAL, &l).increment(outbox_ids.len() as u64);
        }
        RelayEvent::Delivered {
            lane,
            duration,
            end_to_end,
            ..
        } => {
            let l = labels(lane);
            metrics::counter!(names::DELIVERED_TOTAL, &l).increment(1);
            metrics::histogram!(names::DELIVERY_DURATION_SECONDS, &l)
                .record(duration.as_secs_f64());
            metrics::histogram!(names::END_TO_END_LATENCY_SECONDS, &l)
                .record(end_to_end.as_secs_f64());
        }
        RelayEvent::Failed {
            lane,
            kind,
            outcome,
            ..
        } => {
            let l = labels(lane);
            let [lane_label, target_label] = l.clone();
            metrics::counter!(
                names::DELIVERY_FAILURES_TOTAL,
                &[
                    lane_label,
                    target_label,
                    (names::LABEL_KIND, (*kind).to_owned())
                ]
            )
            .increment(1);
            match outcome {
                NackOutcome::Requeued => metrics::counter!(names::REQUEUED_TOTAL, &l).increment(1),
                NackOutcome::DeadLettered => {
                    metrics::counter!(names::DEAD_LETTERED_TOTAL, &l).increment(1)
                }
                NackOutcome::LostClaim => {
                    metrics::counter!(names::LOST_CLAIMS_TOTAL, &l).increment(1)
                }
            }
        }
        RelayEvent::LostClaim { lane, .. } => {
            metrics::counter!(names::LOST_CLAIMS_TOTAL, &labels(lane)).increment(1);
        }
        RelayEvent::LeaseExtended { lane, count } => {
            metrics::counter!(names::LEASE_EXTENDED_TOTAL, &labels(lane)).increment(*count as u64);
        }
        RelayEvent::LeaseExpired { lane, outbox_ids } => {
            metrics::counter!(names::LEASE_EXPIRED_TOTAL, &labels(lane))
                .increment(outbox_ids.len() as u64);
        }
        RelayEvent::StoreError { lane, op, .. } => {
            let [lane_label, target_label] = labels(lane);
            metrics::counter!(
                names::STORE_ERRORS_TOTAL,
                &[
                    lane_label,
                    target_label,
                    (names::LABEL_OP, (*op).to_owned())
                ]
            )
            .increment(1);
        }
        RelayEvent::LaneRestarting { lane, .. } => {
            metrics::counter!(names::RELAY_RESTARTS_TOTAL, &labels(lane)).increment(1);
        }
        _ => {}
    }
}

/// Sets the in-flight gauge.
pub(crate) fn set_in_flight(lane: &LaneKey, n: u64) {
    metrics::gauge!(names::IN_FLIGHT, &labels(lane)).set(n as f64);
}

/// Sets the backlog gauges from a stats sample (all zero when the lane has no rows).
pub(crate) fn set_backlog(lane: &LaneKey, stats: Option<&LaneStats>) {
    let l = labels(lane);
    let stats = stats.cloned().unwrap_or_default();
    metrics::gauge!(names::PENDING, &l).set(stats.pending as f64);
    metrics::gauge!(names::DEAD_LETTERS, &l).set(stats.dead_letter as f64);
    metrics::gauge!(names::OLDEST_PENDING_AGE_SECONDS, &l).set(
        stats
            .oldest_pending_age
            .map_or(0.0, |age| age.as_secs_f64()),
    );
    metrics::gauge!(names::BLOCKED_KEYS, &l).set(stats.blocked_keys as f64);
}

/// Shows `state` as 1 and every other state as 0; `None` zeroes them all (lane removed).
pub(crate) fn set_lane_state(lane: &LaneKey, state: Option<LaneState>) {
    for candidate in LaneState::ALL {
        let [lane_label, target_label] = labels(lane);
        let value = if Some(candidate) == state { 1.0 } else { 0.0 };
        metrics::gauge!(
            names::LANE_STATE,
            &[
                lane_label,
                target_label,
                (names::LABEL_STATE, candidate.as_str().to_owned())
            ]
        )
        .set(value);
    }
}
