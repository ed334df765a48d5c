//! `LaneMetrics`: the one place where the relay's events become metric updates, so label
//! handling is written once.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, Label};

use super::*;
use crate::store::{LaneStats, StoreOp};

/// The `lane` label of the histograms lanes share ([`LaneMetrics::of`]).
pub const SHARED_LANE: &str = "*";

/// The store calls a lane makes: the `op` values of its `outbox_store_errors_total`, each
/// registered at the lane's start.
const LANE_OPS: [StoreOp; 8] = [
    StoreOp::Enqueue,
    StoreOp::Claim,
    StoreOp::Ack,
    StoreOp::Nack,
    StoreOp::ExtendLease,
    StoreOp::Release,
    StoreOp::NextDue,
    StoreOp::Stats,
];

/// Where `op` stands in [`LANE_OPS`]; anything else counts as the call it stands in for,
/// so no lane series appears that was not registered at the lane's start.
fn lane_op_index(op: StoreOp) -> usize {
    LANE_OPS.iter().position(|&o| o == op).unwrap_or(match op {
        StoreOp::AckAndClaim => 2,
        _ => 1,
    })
}

/// The metrics of one (lane, target), with every handle registered up front.
///
/// Registering once and keeping the handles makes each update an atomic operation, with
/// no label allocation on the delivery path; it also makes every series exist, at zero,
/// from the moment the lane starts, so dashboards and `absent()` alerts see a lane before
/// its first event.
///
/// Handles belong to the recorder that was current when [`LaneMetrics::new`] ran: create
/// it after installing the exporter (or inside `metrics::with_local_recorder` in a test).
/// Cloning is cheap and shares the handles.
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::delivery::FailureKind;
/// use outbox_relay::metrics::LaneMetrics;
/// use outbox_relay::metrics::LaneState;
///
/// let metrics = LaneMetrics::new("orders", "webhook");
/// metrics.lane_state(LaneState::Running);
/// metrics.claimed(3);
/// metrics.delivered(Duration::from_millis(12), Duration::from_millis(40));
/// metrics.failure(FailureKind::Retryable, Duration::from_millis(800));
/// ```
#[derive(Clone)]
pub struct LaneMetrics {
    lane: String,
    target: String,
    enqueued: Counter,
    claimed: Counter,
    delivered: Counter,
    failures: [Counter; FailureKind::ALL.len()],
    requeued: Counter,
    dead_lettered: Counter,
    lost_claims: Counter,
    lease_expired: Counter,
    lease_extended: Counter,
    retry_after_clamped: Counter,
    redeliveries: Counter,
    restarts: Counter,
    store_errors: [Counter; LANE_OPS.len()],
    store_calls: StoreCallTimer,
    delivery_duration: Histogram,
    end_to_end_latency: Histogram,
    claim_batch_size: Histogram,
    in_flight: Gauge,
    pending: Gauge,
    dead_letters: Gauge,
    oldest_pending_age: Gauge,
    blocked_keys: Gauge,
    lane_state: [Gauge; LaneState::ALL.len()],
    breaker_state: [Gauge; BreakerState::ALL.len()],
    throttled: [Histogram; GateKind::ALL.len()],
}

impl LaneMetrics {
    /// Registers every metric of `lane` and `target` with the current recorder.
    pub fn new(lane: &str, target: &str) -> Self {
        Self::registered(lane, target, false)
    }

    /// Registers the metrics of a lane as its config asks: with
    /// [`LaneConfig::shared_histograms`](crate::LaneConfig::shared_histograms), its
    /// histograms are the series every such lane of its target shares, labelled
    /// `lane="*"`.
    pub fn of(config: &crate::LaneConfig) -> Self {
        Self::registered(&config.name, &config.target, config.shared_histograms)
    }

    fn registered(lane: &str, target: &str, shared_histograms: bool) -> Self {
        let labels_of = |lane: &str| {
            vec![
                Label::new(LABEL_LANE, lane.to_owned()),
                Label::new(LABEL_TARGET, target.to_owned()),
            ]
        };
        let labels = labels_of(lane);
        let histogram_labels = labels_of(if shared_histograms { SHARED_LANE } else { lane });
        // Each labelled family gets one handle per fixed value: `extra` adds that label.
        let with = |labels: &Vec<Label>, extra: &'static str, value: &'static str| {
            let mut labels = labels.clone();
            labels.push(Label::from_static_parts(extra, value));
            labels
        };
        let counter = |name: &'static str| metrics::counter!(name, labels.clone());
        let gauge = |name: &'static str| metrics::gauge!(name, labels.clone());
        let histogram = |name: &'static str| metrics::histogram!(name, histogram_labels.clone());
        // Retention records through `record_purged`; registered here so every lane has its
        // series, at 0, from its start (a rate over a missing series is no data, not 0).
        let _ = counter(PURGED_TOTAL);
        LaneMetrics {
            lane: lane.to_owned(),
            target: target.to_owned(),
            enqueued: counter(ENQUEUED_TOTAL),
            claimed: counter(CLAIMED_TOTAL),
            delivered: counter(DELIVERED_TOTAL),
            failures: std::array::from_fn(|i| {
                let kind = FailureKind::ALL[i].as_str();
                metrics::counter!(DELIVERY_FAILURES_TOTAL, with(&labels, LABEL_KIND, kind))
            }),
            requeued: counter(REQUEUED_TOTAL),
            dead_lettered: counter(DEAD_LETTERED_TOTAL),
            lost_claims: counter(LOST_CLAIMS_TOTAL),
            lease_expired: counter(LEASE_EXPIRED_TOTAL),
            lease_extended: counter(LEASE_EXTENDED_TOTAL),
            retry_after_clamped: counter(RETRY_AFTER_CLAMPED_TOTAL),
            redeliveries: counter(REDELIVERIES_TOTAL),
            restarts: counter(RELAY_RESTARTS_TOTAL),
            store_errors: std::array::from_fn(|i| {
                let op = LANE_OPS[i].as_str();
                metrics::counter!(STORE_ERRORS_TOTAL, with(&labels, LABEL_OP, op))
            }),
            store_calls: StoreCallTimer(Arc::new(std::array::from_fn(|i| {
                let op = LANE_OPS[i].as_str();
                metrics::histogram!(
                    STORE_CALL_DURATION_SECONDS,
                    with(&histogram_labels, LABEL_OP, op)
                )
            }))),
            delivery_duration: histogram(DELIVERY_DURATION_SECONDS),
            end_to_end_latency: histogram(END_TO_END_LATENCY_SECONDS),
            claim_batch_size: histogram(CLAIM_BATCH_SIZE),
            in_flight: gauge(IN_FLIGHT),
            pending: gauge(PENDING),
            dead_letters: gauge(DEAD_LETTERS),
            oldest_pending_age: gauge(OLDEST_PENDING_AGE_SECONDS),
            blocked_keys: gauge(BLOCKED_KEYS),
            lane_state: std::array::from_fn(|i| {
                let state = LaneState::ALL[i].as_str();
                metrics::gauge!(LANE_STATE, with(&labels, LABEL_STATE, state))
            }),
            breaker_state: std::array::from_fn(|i| {
                let state = BreakerState::ALL[i].as_str();
                metrics::gauge!(BREAKER_STATE, with(&labels, LABEL_STATE, state))
            }),
            throttled: std::array::from_fn(|i| {
                let gate = GateKind::ALL[i].as_str();
                metrics::histogram!(THROTTLED_SECONDS, with(&histogram_labels, LABEL_GATE, gate))
            }),
        }
    }

    /// The lane these metrics are labelled with.
    pub fn lane(&self) -> &str {
        &self.lane
    }

    /// The target these metrics are labelled with.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// `n` messages were enqueued (not counting duplicates by dedupe key).
    pub fn enqueued(&self, n: u64) {
        self.enqueued.increment(n);
    }

    /// One claim returned `n` messages (call it for empty claims too).
    pub fn claimed(&self, n: u64) {
        self.claimed.increment(n);
        self.claim_batch_size.record(n as f64);
    }

    /// One message was delivered: its handler call took `duration`, and the store accepted
    /// the ack `end_to_end` after the message was enqueued. Call it once the ack
    /// succeeded; a refused ack is a [lost claim](Self::lost_claims), not a delivery.
    pub fn delivered(&self, duration: Duration, end_to_end: Duration) {
        self.delivered.increment(1);
        self.delivery_duration.record(duration);
        self.end_to_end_latency.record(end_to_end);
    }

    /// One delivery attempt failed with `kind` after `duration` (for a timeout, the
    /// timeout; for a panic, the time until it).
    pub fn failure(&self, kind: FailureKind, duration: Duration) {
        self.failures[kind.index()].increment(1);
        self.delivery_duration.record(duration);
    }

    /// An operator moved `n` dead letters back to pending.
    pub fn requeued(&self, n: u64) {
        self.requeued.increment(n);
    }

    /// `n` messages went to the dead letter.
    pub fn dead_lettered(&self, n: u64) {
        self.dead_lettered.increment(n);
    }

    /// The store refused `n` acks, nacks, extensions or releases: the claims were lost.
    pub fn lost_claims(&self, n: u64) {
        self.lost_claims.increment(n);
    }

    /// The leases of `n` claimed messages lapsed before the relay was done with them.
    pub fn lease_expired(&self, n: u64) {
        self.lease_expired.increment(n);
    }

    /// The leases of `n` claimed messages were extended.
    pub fn lease_extended(&self, n: u64) {
        self.lease_extended.increment(n);
    }

    /// A target's Retry-After was longer than the lane's ceiling and was held to it.
    pub fn retry_after_clamped(&self) {
        self.retry_after_clamped.increment(1);
    }

    /// `n` of the messages just claimed had been claimed before (attempt count above 1).
    pub fn redeliveries(&self, n: u64) {
        self.redeliveries.increment(n);
    }

    /// The supervisor restarted this lane's relay.
    pub fn restart(&self) {
        self.restarts.increment(1);
    }

    /// A store call failed.
    pub fn store_error(&self, op: StoreOp) {
        self.store_errors[lane_op_index(op)].increment(1);
    }

    /// A store call `op` took `elapsed`, whether it succeeded or not.
    pub fn store_call(&self, op: StoreOp, elapsed: Duration) {
        self.store_calls.record(op, elapsed);
    }

    /// A cheap handle that records store call durations into these metrics, for a store
    /// call that runs off the lane's actor.
    pub fn store_call_timer(&self) -> StoreCallTimer {
        self.store_calls.clone()
    }

    /// The lane's circuit breaker is now in `state` (1 for it, 0 for the others).
    pub fn breaker_state(&self, state: BreakerState) {
        for (i, gauge) in self.breaker_state.iter().enumerate() {
            gauge.set(if i == state.index() { 1.0 } else { 0.0 });
        }
    }

    /// `gate` held the lane back from claiming for `duration`.
    pub fn throttled(&self, gate: GateKind, duration: Duration) {
        self.throttled[gate.index()].record(duration);
    }

    /// `n` deliveries are running now in this process.
    pub fn in_flight(&self, n: u64) {
        self.in_flight.set(n as f64);
    }

    /// Sets the backlog gauges from the store's stats of this (lane, target): pending,
    /// dead letters, oldest pending age (0 when nothing is pending) and blocked keys.
    pub fn backlog(&self, stats: &LaneStats) {
        self.pending.set(stats.pending as f64);
        self.dead_letters.set(stats.dead_letter as f64);
        self.oldest_pending_age
            .set(stats.oldest_pending_age.unwrap_or(Duration::ZERO));
        self.blocked_keys.set(stats.blocked_keys as f64);
    }

    /// The lane relay is now in `state`: its gauge goes to 1, every other state's to 0.
    pub fn lane_state(&self, state: LaneState) {
        for (index, gauge) in self.lane_state.iter().enumerate() {
            gauge.set(if index == state.index() { 1.0 } else { 0.0 });
        }
    }
}

/// Records how long a lane's store calls take into `outbox_store_call_duration_seconds{op}`
/// of one (lane, target); a clone shares the histograms (one reference count, no label
/// allocation).
#[derive(Clone)]
pub struct StoreCallTimer(Arc<[Histogram; LANE_OPS.len()]>);

impl StoreCallTimer {
    /// A store call `op` took `elapsed`.
    pub fn record(&self, op: StoreOp, elapsed: Duration) {
        self.0[lane_op_index(op)].record(elapsed);
    }

    /// Awaits `call` and records how long it took as `op`, success or error.
    pub async fn time<T>(&self, op: StoreOp, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let answer = call.await;
        self.record(op, started.elapsed());
        answer
    }
}

impl fmt::Debug for StoreCallTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreCallTimer").finish_non_exhaustive()
    }
}

impl fmt::Debug for LaneMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneMetrics")
            .field("lane", &self.lane)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use metrics_util::MetricKind as Kind;
    use std::collections::BTreeMap;

    /// A change seen in a snapshot: (name, extra label as "key=value" or "") → value.
    type Changes = BTreeMap<(String, String), Moved>;

    #[derive(Debug, Clone, PartialEq)]
    enum Moved {
        Counter(u64),
        Gauge(f64),
        Histogram(Vec<f64>),
    }

    /// Runs `f` against fresh `LaneMetrics` of ("orders", "webhook") on a local debugging
    /// recorder and returns what moved. Every series is also checked to carry exactly the
    /// lane and target labels plus the family's fixed label.
    fn moved_by(f: impl FnOnce(&LaneMetrics)) -> Changes {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let lane = LaneMetrics::new("orders", "webhook");
            // The debugging snapshot reports counters and gauges as deltas since the last
            // snapshot (it swaps them to zero), so this one sets the baseline.
            let registered = snapshot(&snapshotter, false);
            assert_eq!(
                registered.len(),
                ALL.iter()
                    .map(|m| match m.name {
                        DELIVERY_FAILURES_TOTAL => FailureKind::ALL.len(),
                        STORE_ERRORS_TOTAL | STORE_CALL_DURATION_SECONDS => LANE_OPS.len(),
                        LANE_STATE => LaneState::ALL.len(),
                        BREAKER_STATE => BreakerState::ALL.len(),
                        THROTTLED_SECONDS => GateKind::ALL.len(),
                        _ => 1,
                    })
                    .sum::<usize>(),
                "every series is registered up front"
            );
            f(&lane);
        });
        snapshot(&snapshotter, true)
    }

    fn snapshot(snapshotter: &Snapshotter, only_moved: bool) -> Changes {
        let mut changes = Changes::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            let name = key.name().to_owned();
            let info = ALL.iter().find(|m| m.name == name).expect("declared");
            let expected_kind = match info.kind {
                MetricKind::Counter => Kind::Counter,
                MetricKind::Gauge => Kind::Gauge,
                MetricKind::Histogram => Kind::Histogram,
            };
            assert_eq!(kind, expected_kind, "{name}");
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(
                labels.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
                info.labels,
                "{name}"
            );
            assert_eq!(&labels[..2], &[("lane", "orders"), ("target", "webhook")]);
            let extra = labels
                .get(2)
                .map(|(k, v)| format!("{k}={v}"))
                .unwrap_or_default();
            let moved = match value {
                DebugValue::Counter(0) if only_moved => continue,
                DebugValue::Counter(n) => Moved::Counter(n),
                DebugValue::Gauge(v) if only_moved && v.0 == 0.0 => continue,
                DebugValue::Gauge(v) => Moved::Gauge(v.0),
                DebugValue::Histogram(v) if only_moved && v.is_empty() => continue,
                DebugValue::Histogram(v) => Moved::Histogram(v.into_iter().map(|x| x.0).collect()),
            };
            changes.insert((name, extra), moved);
        }
        changes
    }

    fn one(name: &str, moved: Moved) -> Changes {
        [((name.to_owned(), String::new()), moved)].into()
    }

    fn labelled(entries: &[(&str, &str, Moved)]) -> Changes {
        entries
            .iter()
            .map(|(name, extra, moved)| ((name.to_string(), extra.to_string()), moved.clone()))
            .collect()
    }

    #[test]
    fn each_counter_helper_moves_only_its_counter() {
        type Helper = fn(&LaneMetrics);
        let cases: [(Helper, &str, u64); 10] = [
            (|m| m.enqueued(4), ENQUEUED_TOTAL, 4),
            (|m| m.requeued(2), REQUEUED_TOTAL, 2),
            (|m| m.dead_lettered(3), DEAD_LETTERED_TOTAL, 3),
            (|m| m.lost_claims(5), LOST_CLAIMS_TOTAL, 5),
            (|m| m.lease_expired(6), LEASE_EXPIRED_TOTAL, 6),
            (|m| m.lease_extended(7), LEASE_EXTENDED_TOTAL, 7),
            (|m| m.redeliveries(8), REDELIVERIES_TOTAL, 8),
            (|m| m.retry_after_clamped(), RETRY_AFTER_CLAMPED_TOTAL, 1),
            (|m| m.restart(), RELAY_RESTARTS_TOTAL, 1),
            (
                |m| {
                    m.restart();
                    m.restart();
                },
                RELAY_RESTARTS_TOTAL,
                2,
            ),
        ];
        for (helper, name, n) in cases {
            assert_eq!(moved_by(helper), one(name, Moved::Counter(n)), "{name}");
        }
    }

    #[test]
    fn throttled_spells_are_recorded_by_gate_to_the_millisecond() {
        let moved = moved_by(|m| {
            m.throttled(GateKind::RateLimit, Duration::from_millis(5));
            m.throttled(GateKind::RateLimit, Duration::from_millis(3));
            m.throttled(GateKind::Breaker, Duration::from_millis(2_500));
        });
        assert_eq!(
            moved,
            labelled(&[
                (
                    THROTTLED_SECONDS,
                    "gate=rate_limit",
                    Moved::Histogram(vec![0.005, 0.003])
                ),
                (
                    THROTTLED_SECONDS,
                    "gate=breaker",
                    Moved::Histogram(vec![2.5])
                ),
            ])
        );
    }

    #[test]
    fn claimed_counts_messages_and_records_the_batch_size() {
        let moved = moved_by(|m| {
            m.claimed(3);
            m.claimed(0);
        });
        assert_eq!(
            moved,
            labelled(&[
                (CLAIMED_TOTAL, "", Moved::Counter(3)),
                (CLAIM_BATCH_SIZE, "", Moved::Histogram(vec![3.0, 0.0])),
            ])
        );
    }

    #[test]
    fn lanes_sharing_histograms_record_into_one_series_and_keep_their_own_counters() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let shared = |lane: &str| {
                let config = crate::LaneConfig::new(lane, "webhook").shared_histograms(true);
                LaneMetrics::of(&config)
            };
            let ms = Duration::from_millis;
            shared("tenant-a").delivered(ms(250), ms(2_000));
            shared("tenant-b").delivered(ms(500), ms(1_000));
            LaneMetrics::of(&crate::LaneConfig::new("orders", "webhook"))
                .delivered(ms(100), ms(3_000));
        });
        let mut delivered = BTreeMap::new();
        let mut durations = BTreeMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let (_, key) = key.into_parts();
            let label = |name: &str| {
                key.labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_owned())
            };
            assert_eq!(label(LABEL_TARGET).as_deref(), Some("webhook"));
            let lane = label(LABEL_LANE).expect("every series has its lane label");
            match (key.name(), value) {
                (DELIVERED_TOTAL, DebugValue::Counter(n)) => {
                    delivered.insert(lane, n);
                }
                (DELIVERY_DURATION_SECONDS, DebugValue::Histogram(v)) => {
                    durations.insert(lane, v.into_iter().map(|x| x.0).collect::<Vec<_>>());
                }
                _ => {}
            }
        }
        let lanes = |entries: &[(&str, u64)]| -> BTreeMap<String, u64> {
            entries.iter().map(|(l, n)| (l.to_string(), *n)).collect()
        };
        assert_eq!(
            delivered,
            lanes(&[("orders", 1), ("tenant-a", 1), ("tenant-b", 1)]),
            "counters stay per lane"
        );
        assert_eq!(
            durations,
            [
                (SHARED_LANE.to_owned(), vec![0.25, 0.5]),
                ("orders".to_owned(), vec![0.1]),
            ]
            .into(),
            "the sharing lanes have no histogram of their own"
        );
    }

    #[test]
    fn delivered_counts_and_records_both_latencies() {
        let moved = moved_by(|m| m.delivered(Duration::from_millis(250), Duration::from_secs(2)));
        assert_eq!(
            moved,
            labelled(&[
                (DELIVERED_TOTAL, "", Moved::Counter(1)),
                (DELIVERY_DURATION_SECONDS, "", Moved::Histogram(vec![0.25])),
                (END_TO_END_LATENCY_SECONDS, "", Moved::Histogram(vec![2.0])),
            ])
        );
    }

    #[test]
    fn failure_counts_by_kind_and_records_the_duration() {
        for &kind in FailureKind::ALL {
            let moved = moved_by(|m| m.failure(kind, Duration::from_millis(1500)));
            let label = format!("kind={kind}");
            assert_eq!(
                moved,
                labelled(&[
                    (DELIVERY_FAILURES_TOTAL, &label, Moved::Counter(1)),
                    (DELIVERY_DURATION_SECONDS, "", Moved::Histogram(vec![1.5])),
                ]),
                "{kind}"
            );
        }
    }

    #[test]
    fn store_error_counts_by_op() {
        for &op in &LANE_OPS {
            let moved = moved_by(|m| m.store_error(op));
            let label = format!("op={op}");
            assert_eq!(
                moved,
                labelled(&[(STORE_ERRORS_TOTAL, &label, Moved::Counter(1))]),
                "{op}"
            );
        }
    }

    #[test]
    fn store_call_records_its_duration_by_op() {
        for &op in &LANE_OPS {
            let moved = moved_by(|m| {
                m.store_call(op, Duration::from_micros(150));
                m.store_call_timer().record(op, Duration::from_secs(3));
            });
            let label = format!("op={op}");
            assert_eq!(
                moved,
                labelled(&[(
                    STORE_CALL_DURATION_SECONDS,
                    &label,
                    Moved::Histogram(vec![0.00015, 3.0])
                )]),
                "{op}"
            );
        }
    }

    #[tokio::test]
    async fn the_timer_measures_the_call_it_awaits() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let timer = metrics::with_local_recorder(&recorder, || {
            LaneMetrics::new("orders", "webhook").store_call_timer()
        });
        let answer = timer
            .time(StoreOp::Claim, async {
                std::thread::sleep(Duration::from_millis(20));
                7
            })
            .await;
        assert_eq!(answer, 7);
        let recorded = snapshot(&snapshotter, true).remove(&(
            STORE_CALL_DURATION_SECONDS.to_owned(),
            "op=claim".to_owned(),
        ));
        let Some(Moved::Histogram(seconds)) = recorded else {
            panic!("no claim duration recorded: {recorded:?}")
        };
        assert_eq!(seconds.len(), 1);
        assert!(
            (0.02..5.0).contains(&seconds[0]),
            "a 20 ms call recorded as {} s",
            seconds[0]
        );
    }

    #[test]
    fn in_flight_sets_its_gauge() {
        assert_eq!(
            moved_by(|m| m.in_flight(12)),
            one(IN_FLIGHT, Moved::Gauge(12.0))
        );
    }

    #[test]
    fn backlog_sets_the_four_store_gauges() {
        let stats = LaneStats {
            lane: "orders".into(),
            target: "webhook".into(),
            pending: 40,
            claimed: 7,
            delivered: 1000,
            dead_letter: 3,
            oldest_pending_age: Some(Duration::from_millis(90_500)),
            blocked_keys: 2,
        };
        assert_eq!(
            moved_by(|m| m.backlog(&stats)),
            labelled(&[
                (PENDING, "", Moved::Gauge(40.0)),
                (DEAD_LETTERS, "", Moved::Gauge(3.0)),
                (OLDEST_PENDING_AGE_SECONDS, "", Moved::Gauge(90.5)),
                (BLOCKED_KEYS, "", Moved::Gauge(2.0)),
            ])
        );
    }

    #[test]
    fn backlog_with_nothing_pending_reports_age_zero() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let lane = LaneMetrics::new("orders", "webhook");
            let mut stats = LaneStats {
                lane: "orders".into(),
                target: "webhook".into(),
                pending: 1,
                claimed: 0,
                delivered: 0,
                dead_letter: 0,
                oldest_pending_age: Some(Duration::from_secs(30)),
                blocked_keys: 0,
            };
            lane.backlog(&stats);
            stats.pending = 0;
            stats.oldest_pending_age = None;
            lane.backlog(&stats);
        });
        let age = snapshot(&snapshotter, false)
            .remove(&(OLDEST_PENDING_AGE_SECONDS.to_owned(), String::new()));
        assert_eq!(age, Some(Moved::Gauge(0.0)));
    }

    #[test]
    fn lane_state_raises_the_current_state_and_lowers_the_others() {
        for &state in LaneState::ALL {
            let recorder = DebuggingRecorder::new();
            let snapshotter = recorder.snapshotter();
            metrics::with_local_recorder(&recorder, || {
                let lane = LaneMetrics::new("orders", "webhook");
                // Raise every state first, so lowering is observable.
                for &other in LaneState::ALL {
                    lane.lane_state(other);
                }
                lane.lane_state(LaneState::Running);
                lane.lane_state(state);
            });
            let states: BTreeMap<String, Moved> = snapshot(&snapshotter, false)
                .into_iter()
                .filter(|((name, _), _)| name == LANE_STATE)
                .map(|((_, extra), moved)| (extra, moved))
                .collect();
            let expected: BTreeMap<String, Moved> = LaneState::ALL
                .iter()
                .map(|&s| {
                    let value = if s == state { 1.0 } else { 0.0 };
                    (format!("state={s}"), Moved::Gauge(value))
                })
                .collect();
            assert_eq!(states, expected, "{state}");
        }
    }

    #[test]
    fn debug_names_the_lane_and_target_only() {
        let text = format!("{:?}", LaneMetrics::new("orders", "webhook"));
        assert_eq!(
            text,
            r#"LaneMetrics { lane: "orders", target: "webhook", .. }"#
        );
    }
}
