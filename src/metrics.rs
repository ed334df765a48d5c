//! What the relay measures: metric names, label names and values, descriptions, and the
//! recording helpers the relay calls.
//!
//! The library only records, through the [`metrics`] facade: nothing is exported until the
//! process installs a recorder. The binary and the examples install the Prometheus
//! exporter with `http::install_prometheus_exporter` (feature `http`); an application that
//! embeds the relay may install any recorder it already uses.
//!
//! Every metric of a lane carries the labels [`LABEL_LANE`] and [`LABEL_TARGET`]; a few
//! add one label from a small fixed set ([`FailureKind`], [`StoreOp`](crate::store::StoreOp),
//! [`LaneState`]). No label ever holds a message id, an ordering key or any other unbounded
//! value, so the number of series stays (lanes × targets × a constant).
//!
//! [`ALL`] lists every metric of a lane with its kind, unit, help text and labels;
//! [`describe`] registers those descriptions with the current recorder, and the dashboard
//! test in `tests/grafana_assets.rs` checks the Grafana assets against the same list.
//! [`PROCESS`] lists the process-wide ones ([`process`]): `outbox_build_info` and
//! Prometheus' `process_*`, which the Prometheus exporter records. [`STORE_WIDE`] lists
//! those of the store as a whole, without labels: the lanes nobody serves
//! ([`UNSERVED_LANES`], [`UNSERVED_PENDING`], `store::served`).
//!
//! ## Several relay processes
//!
//! The backlog gauges ([`PENDING`], [`DEAD_LETTERS`], [`OLDEST_PENDING_AGE_SECONDS`],
//! [`BLOCKED_KEYS`]) come from the store's stats, which every relay process of a lane
//! reads from the same database: aggregate them across processes with `max`, never `sum`.
//! Counters, histograms, [`IN_FLIGHT`] and [`LANE_STATE`] describe one process: `sum`
//! them.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use metrics::Unit;

pub mod http;
// Names only, so the catalogue is whole whatever the features: the Kafka sink (feature
// `kafka-sink`) is what records them.
pub mod kafka;
mod lane;
pub mod process;
#[cfg(feature = "prometheus")]
mod prometheus;

pub use lane::{LaneMetrics, StoreCallTimer, SHARED_LANE};
pub use process::{record_build_info, BUILD_INFO, PROCESS};

use crate::delivery::FailureKind;
pub use crate::lane::LaneState;
use crate::lane::{BreakerState, GateKind};
use crate::store::{CallOutcome, Enqueued, StoreCall};
/// What `http::install_prometheus_exporter` returns: renders the metrics on demand
/// (`handle.render()`), e.g. for a service that serves `/metrics` itself.
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use metrics_exporter_prometheus::PrometheusHandle;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::prometheus_builder;

// ---- Counters -------------------------------------------------------------------------

/// Counter: messages written to the outbox (a duplicate by dedupe key is not counted).
pub const ENQUEUED_TOTAL: &str = "outbox_enqueued_total";
/// Counter: messages handed out by `claim` (every attempt counts once).
pub const CLAIMED_TOTAL: &str = "outbox_claimed_total";
/// Counter: messages their target accepted and the store marked delivered.
pub const DELIVERED_TOTAL: &str = "outbox_delivered_total";
/// Counter: delivery attempts that failed, by [`LABEL_KIND`].
pub const DELIVERY_FAILURES_TOTAL: &str = "outbox_delivery_failures_total";
/// Counter: dead letters an operator moved back to pending (retries of failed deliveries
/// are `outbox_delivery_failures_total` less the dead-lettered).
pub const REQUEUED_TOTAL: &str = "outbox_requeued_total";
/// Counter: messages moved to the dead letter.
pub const DEAD_LETTERED_TOTAL: &str = "outbox_dead_lettered_total";
/// Counter: acks, nacks, extensions or releases refused because the claim was no longer
/// this relay's (its lease lapsed and another claim took the message).
pub const LOST_CLAIMS_TOTAL: &str = "outbox_lost_claims_total";
/// Counter: claimed messages whose lease lapsed before the relay was done with them.
pub const LEASE_EXPIRED_TOTAL: &str = "outbox_lease_expired_total";
/// Counter: claimed messages whose lease was extended because delivery was still running.
pub const LEASE_EXTENDED_TOTAL: &str = "outbox_lease_extended_total";
/// Counter: claims of a message that had been claimed before (an attempt after the first).
pub const REDELIVERIES_TOTAL: &str = "outbox_redeliveries_total";
/// Counter: restarts of a lane relay by its supervisor.
pub const RELAY_RESTARTS_TOTAL: &str = "outbox_relay_restarts_total";
/// Counter: store calls that returned an error, by [`LABEL_OP`].
pub const STORE_ERRORS_TOTAL: &str = "outbox_store_errors_total";
/// Counter: delivered and dead-lettered messages deleted by automatic retention.
pub const PURGED_TOTAL: &str = "outbox_purged_total";
/// Counter: failed deliveries whose target asked for a `Retry-After` longer than the
/// lane's [`retry_after_max`](crate::LaneConfig::retry_after_max), retried at the ceiling
/// instead.
pub const RETRY_AFTER_CLAMPED_TOTAL: &str = "outbox_retry_after_clamped_total";

// ---- Histograms -----------------------------------------------------------------------

/// Histogram, seconds: how long one `DeliveryHandler::deliver` call took, success or not.
pub const DELIVERY_DURATION_SECONDS: &str = "outbox_delivery_duration_seconds";
/// Histogram, seconds: from enqueue to delivered, retries included.
pub const END_TO_END_LATENCY_SECONDS: &str = "outbox_end_to_end_latency_seconds";
/// Histogram, messages: how many messages one claim returned (empty claims included).
pub const CLAIM_BATCH_SIZE: &str = "outbox_claim_batch_size";
/// Histogram, seconds: how long one store call of a lane took, success or error, by
/// [`LABEL_OP`] (a claim that also acks, `ack_and_claim`, counts as `claim`).
pub const STORE_CALL_DURATION_SECONDS: &str = "outbox_store_call_duration_seconds";
/// Histogram, seconds: each spell a lane wanted to claim but a claim gate held it back, by
/// [`LABEL_GATE`]. Its `_sum` is the time throttled (a counter of seconds, exact to the
/// microsecond, where an integer counter would round a rate limit's millisecond waits
/// away); its `_count` the number of waits.
pub const THROTTLED_SECONDS: &str = "outbox_throttled_seconds";

// ---- Gauges ---------------------------------------------------------------------------

/// Gauge: deliveries running now in this process.
pub const IN_FLIGHT: &str = "outbox_in_flight";
/// Gauge: pending messages in the store, due or not (from the store's stats).
pub const PENDING: &str = "outbox_pending";
/// Gauge: messages in the dead letter (from the store's stats).
pub const DEAD_LETTERS: &str = "outbox_dead_letters";
/// Gauge, seconds: how long the oldest pending message has waited; 0 when none waits.
pub const OLDEST_PENDING_AGE_SECONDS: &str = "outbox_oldest_pending_age_seconds";
/// Gauge: ordering keys held back behind a dead-lettered message (from the store's stats).
pub const BLOCKED_KEYS: &str = "outbox_blocked_keys";
/// Gauge: 1 for the lane relay's current [`LaneState`], 0 for every other, by
/// [`LABEL_STATE`].
pub const LANE_STATE: &str = "outbox_lane_state";
/// Gauge: 1 for the lane's circuit breaker's current [`BreakerState`], 0 for every other,
/// by [`LABEL_STATE`] (a lane without a breaker stays `closed`).
pub const BREAKER_STATE: &str = "outbox_breaker_state";

/// Gauge: (lane, target) pairs holding pending messages that no running relay serves
/// (`store::served`; at most [`UNSERVED_LIMIT`](crate::store::served::UNSERVED_LIMIT)).
/// Store-wide, no labels: every relay reports the same; aggregate with max.
pub const UNSERVED_LANES: &str = "outbox_unserved_lanes";
/// Gauge: pending messages in those pairs (each pair counted up to
/// [`UNSERVED_COUNT_CAP`](crate::store::served::UNSERVED_COUNT_CAP)).
pub const UNSERVED_PENDING: &str = "outbox_unserved_pending";
/// Gauge: the lanes a lane pattern runs now in this process, labelled with the pattern
/// (`lane="tenant-*"`) and its target (`relay/supervisor/patterns.rs`).
pub const PATTERN_LANES: &str = "outbox_pattern_lanes";
/// Gauge: the lanes matching a lane pattern that hold pending messages but were not
/// started, the pattern running `max_lanes` already; labelled as [`PATTERN_LANES`].
pub const PATTERN_LANES_OVER_LIMIT: &str = "outbox_pattern_lanes_over_limit";

// ---- Labels ---------------------------------------------------------------------------

/// Label on every metric: the lane.
pub const LABEL_LANE: &str = "lane";
/// Label on every metric: the target within the lane.
pub const LABEL_TARGET: &str = "target";
/// Label of [`DELIVERY_FAILURES_TOTAL`]: a [`FailureKind`].
pub const LABEL_KIND: &str = "kind";
/// Label of [`STORE_ERRORS_TOTAL`] and [`STORE_CALL_DURATION_SECONDS`]: a
/// [`StoreOp`](crate::store::StoreOp).
pub const LABEL_OP: &str = "op";
/// Label of [`LANE_STATE`] (a [`LaneState`]) and [`BREAKER_STATE`] (a [`BreakerState`]).
pub const LABEL_STATE: &str = "state";
/// Label of [`THROTTLED_SECONDS`]: a [`GateKind`].
pub const LABEL_GATE: &str = "gate";

const LANE_TARGET: &[&str] = &[LABEL_LANE, LABEL_TARGET];

// ---- Exporter defaults ----------------------------------------------------------------

/// Where the Prometheus exporter listens unless told otherwise: loopback only, port 9464.
/// Bind `0.0.0.0:9464` (or a specific interface) to let a Prometheus on another host
/// scrape it.
pub const DEFAULT_EXPORTER_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9464));

/// Bucket bounds, in seconds, for [`DELIVERY_DURATION_SECONDS`]: from half a millisecond
/// (an in-process projector) to a minute (a slow webhook at its timeout).
pub const DELIVERY_DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Bucket bounds, in seconds, for [`END_TO_END_LATENCY_SECONDS`]: the delivery buckets,
/// then up to an hour, because end-to-end latency includes retry backoff.
pub const END_TO_END_LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Bucket bounds, in seconds, for [`STORE_CALL_DURATION_SECONDS`]: from 0.1 ms (an
/// in-memory or SQLite call) to 10 s (a PostgreSQL call waiting on locks or a failover).
pub const STORE_CALL_DURATION_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Bucket bounds, in messages, for [`CLAIM_BATCH_SIZE`]: 0 (an empty claim), then powers
/// of two up to 1024.
pub const CLAIM_BATCH_SIZE_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// Bucket bounds, in seconds, for [`THROTTLED_SECONDS`]: from a rate limit's millisecond
/// waits to a breaker's longest cool-downs.
pub const THROTTLED_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 1800.0,
];

// ---- The catalogue --------------------------------------------------------------------

/// The kind of a metric, as Prometheus names it in `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// Only goes up (resets when the process restarts).
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of observations, exported as cumulative buckets.
    Histogram,
}

/// One metric of the relay: what [`describe`] registers and what the Grafana assets may use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricInfo {
    /// The full name, as exported.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The unit of its values.
    pub unit: Unit,
    /// One line for `# HELP`.
    pub help: &'static str,
    /// Its label names: in [`ALL`], always starting with [`LABEL_LANE`] and
    /// [`LABEL_TARGET`]; in [`PATTERNS`], the same with the pattern as the lane; in
    /// [`PROCESS`] and [`STORE_WIDE`], none of those; in
    /// [`http::HTTP`], a reason or a kind; in [`kafka::KAFKA`], the sink's name.
    pub labels: &'static [&'static str],
}

const fn info(
    name: &'static str,
    kind: MetricKind,
    unit: Unit,
    help: &'static str,
    labels: &'static [&'static str],
) -> MetricInfo {
    MetricInfo {
        name,
        kind,
        unit,
        help,
        labels,
    }
}

use MetricKind::{Counter, Gauge, Histogram};

/// Every metric the relay records per lane, each once (the process-wide ones are in
/// [`PROCESS`]).
#[rustfmt::skip] // one metric per line reads as a table
pub const ALL: &[MetricInfo] = &[
    info(ENQUEUED_TOTAL, Counter, Unit::Count, "Messages written to the outbox (duplicates by dedupe key not counted).", LANE_TARGET),
    info(CLAIMED_TOTAL, Counter, Unit::Count, "Messages handed out by claim; every attempt counts once.", LANE_TARGET),
    info(DELIVERED_TOTAL, Counter, Unit::Count, "Messages their target accepted and the store marked delivered.", LANE_TARGET),
    info(DELIVERY_FAILURES_TOTAL, Counter, Unit::Count, "Delivery attempts that failed, by kind.", &[LABEL_LANE, LABEL_TARGET, LABEL_KIND]),
    info(REQUEUED_TOTAL, Counter, Unit::Count, "Dead letters moved back to pending by an operator.", LANE_TARGET),
    info(DEAD_LETTERED_TOTAL, Counter, Unit::Count, "Messages moved to the dead letter.", LANE_TARGET),
    info(LOST_CLAIMS_TOTAL, Counter, Unit::Count, "Acks, nacks, extensions or releases refused because the claim was no longer this relay's.", LANE_TARGET),
    info(LEASE_EXPIRED_TOTAL, Counter, Unit::Count, "Claimed messages whose lease lapsed before the relay was done with them.", LANE_TARGET),
    info(LEASE_EXTENDED_TOTAL, Counter, Unit::Count, "Claimed messages whose lease was extended while delivery ran.", LANE_TARGET),
    info(REDELIVERIES_TOTAL, Counter, Unit::Count, "Claims of a message that had been claimed before.", LANE_TARGET),
    info(RELAY_RESTARTS_TOTAL, Counter, Unit::Count, "Restarts of a lane relay by its supervisor.", LANE_TARGET),
    info(STORE_ERRORS_TOTAL, Counter, Unit::Count, "Store calls that returned an error, by operation.", &[LABEL_LANE, LABEL_TARGET, LABEL_OP]),
    info(PURGED_TOTAL, Counter, Unit::Count, "Delivered and dead-lettered messages deleted by automatic retention.", LANE_TARGET),
    info(RETRY_AFTER_CLAMPED_TOTAL, Counter, Unit::Count, "Failed deliveries whose target's Retry-After was longer than the lane's retry_after_max, retried at the ceiling instead.", LANE_TARGET),
    info(DELIVERY_DURATION_SECONDS, Histogram, Unit::Seconds, "Time one delivery handler call took, success or failure.", LANE_TARGET),
    info(END_TO_END_LATENCY_SECONDS, Histogram, Unit::Seconds, "Time from enqueue to delivered, retries included.", LANE_TARGET),
    info(CLAIM_BATCH_SIZE, Histogram, Unit::Count, "Messages returned by one claim, empty claims included.", LANE_TARGET),
    info(STORE_CALL_DURATION_SECONDS, Histogram, Unit::Seconds, "Time one store call of a lane took, success or error, by operation.", &[LABEL_LANE, LABEL_TARGET, LABEL_OP]),
    info(IN_FLIGHT, Gauge, Unit::Count, "Deliveries running now in this process.", LANE_TARGET),
    info(PENDING, Gauge, Unit::Count, "Pending messages in the store, due or not (store-wide: aggregate with max).", LANE_TARGET),
    info(DEAD_LETTERS, Gauge, Unit::Count, "Messages in the dead letter (store-wide: aggregate with max).", LANE_TARGET),
    info(OLDEST_PENDING_AGE_SECONDS, Gauge, Unit::Seconds, "How long the oldest pending message has waited; 0 when none (store-wide: aggregate with max).", LANE_TARGET),
    info(BLOCKED_KEYS, Gauge, Unit::Count, "Ordering keys held back behind a dead-lettered message (store-wide: aggregate with max).", LANE_TARGET),
    info(LANE_STATE, Gauge, Unit::Count, "1 for the lane relay's current state, 0 for the others.", &[LABEL_LANE, LABEL_TARGET, LABEL_STATE]),
    info(THROTTLED_SECONDS, Histogram, Unit::Seconds, "Spells a lane wanted to claim but a claim gate held it back, by gate; the sum is the time throttled.", &[LABEL_LANE, LABEL_TARGET, LABEL_GATE]),
    info(BREAKER_STATE, Gauge, Unit::Count, "1 for the lane's circuit breaker's current state, 0 for the others.", &[LABEL_LANE, LABEL_TARGET, LABEL_STATE]),
];

/// The metrics of the store as a whole that no lane owns, so without labels: the lanes
/// nobody serves. Every relay on the store reports the same values; aggregate with max.
#[rustfmt::skip] // one metric per line reads as a table
pub const STORE_WIDE: &[MetricInfo] = &[
    info(UNSERVED_LANES, Gauge, Unit::Count, "Lanes (lane, target) holding pending messages that no running relay serves (store-wide: aggregate with max).", &[]),
    info(UNSERVED_PENDING, Gauge, Unit::Count, "Pending messages in lanes that no running relay serves, up to 10000 per lane (store-wide: aggregate with max).", &[]),
];

/// The metrics of a lane pattern, labelled `lane` with the pattern (`tenant-*`) and
/// `target`: they describe the pattern, not one lane, so they are not in [`ALL`].
#[rustfmt::skip] // one metric per line reads as a table
pub const PATTERNS: &[MetricInfo] = &[
    info(PATTERN_LANES, Gauge, Unit::Count, "Lanes a lane pattern runs in this process (lane is the pattern).", LANE_TARGET),
    info(PATTERN_LANES_OVER_LIMIT, Gauge, Unit::Count, "Lanes matching a lane pattern that hold pending messages but are not started: the pattern runs max_lanes already (lane is the pattern).", LANE_TARGET),
];

/// Sets the gauges of the lanes nobody serves from one report.
pub fn record_unserved(unserved: &[crate::store::UnservedLane]) {
    metrics::gauge!(UNSERVED_LANES).set(unserved.len() as f64);
    metrics::gauge!(UNSERVED_PENDING)
        .set(unserved.iter().map(|lane| lane.pending as f64).sum::<f64>());
}

/// Sets a lane pattern's gauges (`pattern` as configured, `tenant-*`, and its target): the
/// lanes it runs, and those it matched past its limit.
pub(crate) fn record_pattern(pattern: &str, target: &str, running: usize, over_limit: usize) {
    let labels = [
        (LABEL_LANE, pattern.to_owned()),
        (LABEL_TARGET, target.to_owned()),
    ];
    metrics::gauge!(PATTERN_LANES, &labels).set(running as f64);
    metrics::gauge!(PATTERN_LANES_OVER_LIMIT, &labels).set(over_limit as f64);
}

/// Registers the description and unit of every metric in [`ALL`], [`STORE_WIDE`], [`PATTERNS`] and
/// [`http::HTTP`] (and in `kafka::KAFKA` with feature `kafka-sink`) with the current recorder (the thread's local one inside [`metrics::with_local_recorder`], else the
/// global one).
///
/// Idempotent: describing a metric again replaces its description with the same text.
/// It is deliberately not guarded by a `std::sync::Once`: descriptions go to whichever
/// recorder is current *at the call*, so a guard would make a call made before the
/// exporter was installed swallow the one made after. `install_prometheus_exporter`
/// calls it; call it yourself after installing another recorder.
pub fn describe() {
    metrics::with_recorder(|recorder| {
        for metric in described() {
            let name = metrics::KeyName::from_const_str(metric.name);
            let help = metrics::SharedString::const_str(metric.help);
            let unit = Some(metric.unit);
            match metric.kind {
                MetricKind::Counter => recorder.describe_counter(name, unit, help),
                MetricKind::Gauge => recorder.describe_gauge(name, unit, help),
                MetricKind::Histogram => recorder.describe_histogram(name, unit, help),
            }
        }
    });
}

/// Every metric [`describe`] registers: [`ALL`], the HTTP surface's ([`http::HTTP`]),
/// then the Kafka sink's with its feature.
fn described() -> impl Iterator<Item = &'static MetricInfo> {
    #[cfg(feature = "kafka-sink")]
    let sinks: &[MetricInfo] = kafka::KAFKA;
    #[cfg(not(feature = "kafka-sink"))]
    let sinks: &[MetricInfo] = &[];
    ALL.iter()
        .chain(STORE_WIDE)
        .chain(PATTERNS)
        .chain(http::HTTP)
        .chain(sinks)
}

// ---- Label values ---------------------------------------------------------------------

/// Records a finished store call in the store's metrics: `outbox_enqueued_total` and
/// `outbox_requeued_total` per lane and target. Every [`Outbox`](crate::Outbox) does, unless
/// built [`without_metrics`](crate::Outbox::without_metrics). (The lanes time their own
/// store calls, [`STORE_CALL_DURATION_SECONDS`], with their lane and target.)
pub(crate) fn record_store_call(call: &StoreCall<'_>) {
    match call.outcome {
        CallOutcome::Enqueued(answers) => record_enqueued(answers),
        CallOutcome::Requeued(lanes) => record_requeued(lanes.iter().flat_map(|lane| {
            let n = usize::try_from(lane.count).unwrap_or(usize::MAX);
            std::iter::repeat_n((lane.lane.as_str(), lane.target.as_str()), n)
        })),
        _ => {}
    }
}

/// Counts newly written messages (not duplicates) into `outbox_enqueued_total`, per lane
/// and target. Every `Outbox` calls it for every enqueue through it, the transactions a
/// caller holds included.
pub fn record_enqueued(enqueued: &[Enqueued]) {
    count_per_lane(
        ENQUEUED_TOTAL,
        enqueued
            .iter()
            .filter(|answer| !answer.duplicate)
            .map(|answer| (answer.message.lane.as_str(), answer.message.target.as_str())),
    );
}

/// Counts dead letters an operator moved back to pending into `outbox_requeued_total`,
/// one `(lane, target)` per requeued message. Every `Outbox` calls it once a requeue
/// through it committed. (A retry after a
/// failed delivery is not a requeue: `outbox_delivery_failures_total` counts those.)
pub fn record_requeued<'a>(requeued: impl IntoIterator<Item = (&'a str, &'a str)>) {
    count_per_lane(REQUEUED_TOTAL, requeued);
}

/// Adds `purged` to `outbox_purged_total` of one lane. Automatic retention calls it after
/// each lane's purge.
pub fn record_purged(lane: &str, target: &str, purged: u64) {
    metrics::counter!(
        PURGED_TOTAL,
        LABEL_LANE => lane.to_owned(),
        LABEL_TARGET => target.to_owned()
    )
    .increment(purged);
}

/// Adds one to counter `name` of each `(lane, target)` given, one update per lane.
fn count_per_lane<'a>(name: &'static str, lanes: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let mut counts: std::collections::BTreeMap<(&str, &str), u64> = Default::default();
    for lane in lanes {
        *counts.entry(lane).or_default() += 1;
    }
    for ((lane, target), n) in counts {
        metrics::counter!(
            name,
            LABEL_LANE => lane.to_owned(),
            LABEL_TARGET => target.to_owned()
        )
        .increment(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOp;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_prometheus_names_with_lane_and_target() {
        let mut seen = HashSet::new();
        for metric in ALL {
            assert!(seen.insert(metric.name), "{} listed twice", metric.name);
            assert!(metric.name.starts_with("outbox_"), "{}", metric.name);
            assert!(
                metric
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}",
                metric.name
            );
            assert_eq!(
                metric.kind == MetricKind::Counter,
                metric.name.ends_with("_total"),
                "{}: counters, and only counters, end in _total",
                metric.name
            );
            assert_eq!(&metric.labels[..2], LANE_TARGET, "{}", metric.name);
            assert!(!metric.help.is_empty());
        }
        assert_eq!(ALL.len(), 26);
    }

    #[test]
    fn label_values_are_snake_case_and_indexed_in_order() {
        let values: Vec<(usize, usize, &str)> = FailureKind::ALL
            .iter()
            .enumerate()
            .map(|(i, v)| (i, v.index(), v.as_str()))
            .chain(
                StoreOp::ALL
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i, v.index(), v.as_str())),
            )
            .chain(
                LaneState::ALL
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i, v.index(), v.as_str())),
            )
            .collect();
        for (position, index, text) in values {
            assert_eq!(position, index, "{text}");
            assert!(text.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
        }
        assert_eq!(LaneState::Failed.to_string(), "failed");
    }

    #[test]
    fn record_requeued_counts_per_lane_and_target() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            record_requeued([("orders", "webhook"), ("billing", "ledger")]);
            record_requeued([("orders", "webhook")]);
            record_requeued([]);
        });
        let mut counts: Vec<(String, Vec<String>, u64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let labels = key.labels().map(|l| format!("{}={}", l.key(), l.value()));
                let DebugValue::Counter(n) = value else {
                    panic!("{key:?} is not a counter")
                };
                (key.name().to_owned(), labels.collect(), n)
            })
            .collect();
        counts.sort();
        let series = |lane: &str, target: &str, n| {
            let labels = vec![format!("lane={lane}"), format!("target={target}")];
            (REQUEUED_TOTAL.to_owned(), labels, n)
        };
        assert_eq!(
            counts,
            vec![
                series("billing", "ledger", 1),
                series("orders", "webhook", 2)
            ]
        );
    }

    #[test]
    fn failure_kind_follows_the_delivery_error() {
        use crate::DeliveryError;
        use std::time::Duration;
        assert_eq!(
            FailureKind::from(&DeliveryError::retryable("x")),
            FailureKind::Retryable
        );
        assert_eq!(
            FailureKind::from(&DeliveryError::permanent("x")),
            FailureKind::Permanent
        );
        assert_eq!(
            FailureKind::from(&DeliveryError::retry_after(Duration::from_secs(1), "x")),
            FailureKind::RetryAfter
        );
    }

    #[test]
    fn describe_gives_every_metric_its_unit_and_help_and_can_be_repeated() {
        use metrics_util::debugging::DebuggingRecorder;
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            describe();
            describe();
            // The debugging recorder reports only metrics that exist, so create each.
            for metric in described() {
                match metric.kind {
                    MetricKind::Counter => {
                        let _ = metrics::counter!(metric.name);
                    }
                    MetricKind::Gauge => {
                        let _ = metrics::gauge!(metric.name);
                    }
                    MetricKind::Histogram => {
                        let _ = metrics::histogram!(metric.name);
                    }
                }
            }
        });
        let snapshot = snapshotter.snapshot().into_vec();
        assert_eq!(snapshot.len(), described().count());
        for (key, unit, help, _) in snapshot {
            let name = key.key().name();
            let metric = described().find(|m| m.name == name).expect("listed");
            assert_eq!(unit, Some(metric.unit), "{name}");
            assert_eq!(help.as_deref(), Some(metric.help), "{name}");
        }
    }
}
