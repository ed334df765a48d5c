//! Turns relay events into metrics, so the lane and the supervisor record in one place.

use crate::lane::RelayEvent;
use crate::metrics::LaneMetrics;
use crate::relay::status::LaneCounters;
use crate::store::NackOutcome;

/// Records the metrics an event stands for.
pub(crate) fn record(metrics: &LaneMetrics, event: &RelayEvent) {
    match event {
        RelayEvent::Claimed {
            outbox_ids,
            redeliveries,
            ..
        } => {
            metrics.claimed(outbox_ids.len() as u64);
            metrics.redeliveries(*redeliveries as u64);
        }
        RelayEvent::LeaseLapsedDeadLettered { outbox_ids, .. } => {
            metrics.dead_lettered(outbox_ids.len() as u64);
            metrics.lease_expired(outbox_ids.len() as u64);
        }
        RelayEvent::UnreadableDeadLettered { rows, .. } => metrics.dead_lettered(rows.len() as u64),
        RelayEvent::Delivered {
            duration,
            end_to_end,
            ..
        } => metrics.delivered(*duration, *end_to_end),
        RelayEvent::Failed {
            kind,
            outcome,
            duration,
            ..
        } => {
            metrics.failure(*kind, *duration);
            match outcome {
                // A retry scheduled by the nack: the failure counter above has it.
                // `outbox_requeued_total` counts only dead letters an operator moves back,
                // which `Outbox::requeue_dead_letters` records (`metrics::record_requeued`).
                NackOutcome::Requeued => {}
                NackOutcome::DeadLettered => metrics.dead_lettered(1),
                NackOutcome::LostClaim => metrics.lost_claims(1),
            }
        }
        RelayEvent::LostClaim { .. } => metrics.lost_claims(1),
        RelayEvent::LeaseExtended { count, .. } => metrics.lease_extended(*count as u64),
        RelayEvent::RetryAfterClamped { .. } => metrics.retry_after_clamped(),
        RelayEvent::LeaseExpired { outbox_ids, .. } => {
            metrics.lease_expired(outbox_ids.len() as u64)
        }
        RelayEvent::StoreError { op, .. } => metrics.store_error(*op),
        RelayEvent::LaneRestarting { .. } => metrics.restart(),
        RelayEvent::LaneStateChanged { state, .. } => metrics.lane_state(*state),
        RelayEvent::BreakerChanged { state, .. } => metrics.breaker_state(*state),
        _ => {}
    }
}

/// Updates the lane's status counters for an event of its own (not the supervisor's).
pub(crate) fn count(counters: &LaneCounters, event: &RelayEvent) {
    match event {
        RelayEvent::Claimed { outbox_ids, .. } => {
            LaneCounters::add(&counters.claimed, outbox_ids.len())
        }
        RelayEvent::LeaseLapsedDeadLettered { outbox_ids, .. } => {
            LaneCounters::add(&counters.dead_lettered, outbox_ids.len())
        }
        RelayEvent::UnreadableDeadLettered { rows, .. } => {
            LaneCounters::add(&counters.dead_lettered, rows.len())
        }
        RelayEvent::Delivered { .. } => LaneCounters::add(&counters.delivered, 1),
        RelayEvent::LostClaim { .. } => LaneCounters::add(&counters.lost_claims, 1),
        RelayEvent::Failed { outcome, .. } => {
            LaneCounters::add(&counters.failed, 1);
            match outcome {
                NackOutcome::DeadLettered => LaneCounters::add(&counters.dead_lettered, 1),
                NackOutcome::LostClaim => LaneCounters::add(&counters.lost_claims, 1),
                NackOutcome::Requeued => {}
            }
        }
        RelayEvent::StoreError { op, error, .. } => {
            counters.set_last_error(format!("{op}: {error}"))
        }
        RelayEvent::BreakerChanged { state, .. } => counters.set_breaker(Some(*state)),
        _ => {}
    }
}
