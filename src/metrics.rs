//! Metric names (temporary: replaced by the metrics module being written alongside).
#![allow(missing_docs)]
pub const LABEL_LANE: &str = "lane";
pub const LABEL_TARGET: &str = "target";
pub const LABEL_KIND: &str = "kind";
pub const LABEL_OP: &str = "op";
pub const LABEL_STATE: &str = "state";
pub const ENQUEUED_TOTAL: &str = "outbox_enqueued_total";
pub const CLAIMED_TOTAL: &str = "outbox_claimed_total";
pub const DELIVERED_TOTAL: &str = "outbox_delivered_total";
pub const DELIVERY_FAILURES_TOTAL: &str = "outbox_delivery_failures_total";
pub const REQUEUED_TOTAL: &str = "outbox_requeued_total";
pub const DEAD_LETTERED_TOTAL: &str = "outbox_dead_lettered_total";
pub const LOST_CLAIMS_TOTAL: &str = "outbox_lost_claims_total";
pub const LEASE_EXPIRED_TOTAL: &str = "outbox_lease_expired_total";
pub const LEASE_EXTENDED_TOTAL: &str = "outbox_lease_extended_total";
pub const REDELIVERIES_TOTAL: &str = "outbox_redeliveries_total";
pub const RELAY_RESTARTS_TOTAL: &str = "outbox_relay_restarts_total";
pub const STORE_ERRORS_TOTAL: &str = "outbox_store_errors_total";
pub const DELIVERY_DURATION_SECONDS: &str = "outbox_delivery_duration_seconds";
pub const END_TO_END_LATENCY_SECONDS: &str = "outbox_end_to_end_latency_seconds";
pub const CLAIM_BATCH_SIZE: &str = "outbox_claim_batch_size";
pub const IN_FLIGHT: &str = "outbox_in_flight";
pub const PENDING: &str = "outbox_pending";
pub const DEAD_LETTERS: &str = "outbox_dead_letters";
pub const OLDEST_PENDING_AGE_SECONDS: &str = "outbox_oldest_pending_age_seconds";
pub const BLOCKED_KEYS: &str = "outbox_blocked_keys";
pub const LANE_STATE: &str = "outbox_lane_state";
