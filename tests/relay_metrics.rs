//! Each relay happening moves exactly the metrics it should, read through `metrics-util`'s
//! debugging recorder.
//!
//! The recorder is global and a snapshot drains what it reads, so the scenarios run one
//! after another in a single test of their own binary, each in its own lane, and each
//! snapshot shows only what that scenario moved.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use outbox_relay::relay::{RelayBuilder, RelayEvent, RelayHandle};
use outbox_relay::store::ClaimRequest;
use outbox_relay::time::TokioClock;
use outbox_relay::{
    DeliveryError, InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay,
    RetryPolicy,
};
use serde_json::json;
use tokio::sync::broadcast;

#[path = "support/faulty_store.rs"]
mod faulty_store;

use faulty_store::FaultyStore;

mod handler {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;

    use async_trait::async_trait;
    use outbox_relay::{DeliveryError, DeliveryHandler, OutboxMessage};

    type Deliver =
        dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), DeliveryError>> + Send>> + Send + Sync;

    /// A handler from a closure.
    #[derive(Clone)]
    pub struct Scripted(pub Arc<Deliver>);

    impl Scripted {
        pub fn new<F, Fut>(f: F) -> Self
        where
            F: Fn() -> Fut + Send + Sync + 'static,
            Fut: Future<Output = Result<(), DeliveryError>> + Send + 'static,
        {
            Self(Arc::new(move || Box::pin(f())))
        }
    }

    #[async_trait]
    impl DeliveryHandler for Scripted {
        async fn deliver(&self, _message: &OutboxMessage) -> Result<(), DeliveryError> {
            (self.0)().await
        }
    }
}
use handler::Scripted;

/// The store call durations, by op: every store call a scenario makes moves one (claims,
/// idle polls, stats samples), whatever the happening.
const STORE_CALLS: &str = "outbox_store_call_duration_seconds";

/// Counters and histogram sample counts that moved, for one lane, as `name{extra labels}`,
/// store call durations left out (see [`moved_with_store_calls`]).
fn moved(snapshotter: &Snapshotter, lane: &str) -> BTreeMap<String, u64> {
    let mut moved = moved_with_store_calls(snapshotter, lane);
    moved.retain(|name, _| !name.starts_with(STORE_CALLS));
    moved
}

/// [`moved`], store call durations included.
fn moved_with_store_calls(snapshotter: &Snapshotter, lane: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if !key.labels().any(|l| l.key() == "lane" && l.value() == lane) {
            continue;
        }
        let extra: Vec<String> = key
            .labels()
            .filter(|l| l.key() != "lane" && l.key() != "target")
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = if extra.is_empty() {
            key.name().to_owned()
        } else {
            format!("{}{{{}}}", key.name(), extra.join(","))
        };
        let n = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(samples) => samples.len() as u64,
            DebugValue::Gauge(_) => continue,
        };
        if n > 0 {
            out.insert(name, n);
        }
    }
    out
}

fn expect(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn lane(name: &str) -> LaneConfig {
    LaneConfig::new(name, "sink")
        .retry(RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(10)).jitter(false))
        .lease(Duration::from_secs(3))
        // One stats sample at start only: backlog gauges are not what this test reads.
        .stats_interval(Duration::from_secs(3600))
        .max_poll_interval(Duration::from_secs(3600))
}

fn draft(lane: &str) -> OutboxMessageDraft {
    OutboxMessageDraft::new(lane, "sink", json!({})).unwrap()
}

async fn start(builder: RelayBuilder) -> (RelayHandle, broadcast::Receiver<RelayEvent>) {
    let events = builder.subscribe();
    (builder.start().await.unwrap(), events)
}

async fn wait_for(
    events: &mut broadcast::Receiver<RelayEvent>,
    mut pred: impl FnMut(&RelayEvent) -> bool,
) {
    tokio::time::timeout(Duration::from_secs(600), async {
        loop {
            if pred(&events.recv().await.unwrap()) {
                return;
            }
        }
    })
    .await
    .expect("the awaited event");
}

fn memory() -> Outbox {
    Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(TokioClock::new())))
}

#[tokio::test(start_paused = true)]
async fn each_happening_moves_exactly_its_metrics() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this binary");

    // A delivery.
    let store = memory();
    store.enqueue(draft("deliver")).await.unwrap();
    let (relay, mut events) = start(
        OutboxRelay::builder(&store).lane(lane("deliver"), Scripted::new(|| async { Ok(()) })),
    )
    .await;
    wait_for(&mut events, |e| matches!(e, RelayEvent::Delivered { .. })).await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    let mut got = moved_with_store_calls(&snapshotter, "deliver");
    let timed: BTreeMap<String, u64> = got
        .iter()
        .filter_map(|(name, n)| Some((name.strip_prefix(STORE_CALLS)?.to_owned(), *n)))
        .collect();
    // The claim and the start's stats sample were timed, each under its op, and so was the
    // ack: alone, or in a claim that also acked (`ack_and_claim` counts as claim).
    let calls = |op: &str| timed.get(&format!("{{op={op}}}")).copied().unwrap_or(0);
    assert!(calls("claim") >= 1 && calls("stats") >= 1, "{timed:?}");
    assert!(
        calls("ack") >= 1 || calls("claim") >= 2,
        "no ack timed: {timed:?}"
    );
    got.retain(|name, _| !name.starts_with(STORE_CALLS));
    let batches = got["outbox_claim_batch_size"];
    assert_eq!(
        got,
        expect(&[
            ("outbox_enqueued_total", 1),
            ("outbox_claimed_total", 1),
            ("outbox_delivered_total", 1),
            ("outbox_delivery_duration_seconds", 1),
            ("outbox_end_to_end_latency_seconds", 1),
            // The claim of one, and the empty claims of the idle lane after it.
            ("outbox_claim_batch_size", batches),
        ])
    );
    assert!(batches >= 1);

    // A failure, then a dead letter.
    let store = memory();
    store
        .enqueue(draft("fail").with_max_attempts(2))
        .await
        .unwrap();
    let (relay, mut events) = start(OutboxRelay::builder(&store).lane(
        lane("fail"),
        Scripted::new(|| async { Err(DeliveryError::retryable("down")) }),
    ))
    .await;
    wait_for(&mut events, |e| {
        matches!(
            e,
            RelayEvent::Failed {
                outcome: outbox_relay::store::NackOutcome::DeadLettered,
                ..
            }
        )
    })
    .await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    let mut got = moved(&snapshotter, "fail");
    got.remove("outbox_claim_batch_size");
    assert_eq!(
        got,
        expect(&[
            ("outbox_enqueued_total", 1),
            ("outbox_claimed_total", 2),
            ("outbox_redeliveries_total", 1),
            ("outbox_delivery_failures_total{kind=retryable}", 2),
            ("outbox_delivery_duration_seconds", 2),
            ("outbox_dead_lettered_total", 1),
        ])
    );

    // An operator's requeue of that dead letter.
    let requeued = store
        .requeue_dead_letters(&outbox_relay::store::MessageFilter::lane("fail", "sink"))
        .await
        .unwrap();
    assert_eq!(requeued, 1);
    assert_eq!(
        moved(&snapshotter, "fail"),
        expect(&[("outbox_requeued_total", 1)])
    );

    // A lease expiry, and the lost claim of the late ack. A delivery starts only while its
    // lease holds for the start margin, so it lapses only when an extension fails: two are
    // claimed under a 3 s lease whose extensions (due 0.9 s before its end) all fail; the
    // first takes 2 s, the second starts at 2 s with 1 s left, runs until released, and
    // lapses at 3 s.
    let inner = memory();
    let faulty = Arc::new(FaultyStore::new(inner.clone()));
    faulty.fail_extends.store(true, Ordering::SeqCst);
    let store = Outbox::from_arc(faulty.clone());
    let first = inner
        .enqueue(draft("lapse"))
        .await
        .unwrap()
        .message
        .outbox_id;
    let id = inner
        .enqueue(draft("lapse"))
        .await
        .unwrap()
        .message
        .outbox_id;
    let release = Arc::new(tokio::sync::Notify::new());
    let holding = Arc::new(tokio::sync::Notify::new());
    let slow = {
        let (release, holding) = (release.clone(), holding.clone());
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        Scripted::new(move || {
            let (release, holding) = (release.clone(), holding.clone());
            let call = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if call == 0 {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                } else {
                    holding.notify_one();
                    release.notified().await;
                }
                Ok(())
            }
        })
    };
    let (relay, mut events) = start(
        OutboxRelay::builder(&store).lane(
            lane("lapse")
                .concurrency(1)
                .prefetch(1)
                .lease_extend_margin(Some(Duration::from_millis(900)))
                .delivery_timeout(Duration::from_millis(2_900)),
            slow,
        ),
    )
    .await;
    wait_for(
        &mut events,
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids.len() == 2),
    )
    .await;
    // The lane claims nothing more: the rival below is the one to take the lapse (paused
    // once the second delivery runs: a pause hands back what has not started).
    holding.notified().await;
    relay.pause("lapse", "sink").await.unwrap();
    wait_for(&mut events, |e| {
        matches!(e, RelayEvent::LeaseExpired { .. })
    })
    .await;
    // Another relay (here, the store directly) takes the lapsed message and acks it.
    let rival = inner
        .claim(&ClaimRequest::new(
            "lapse",
            "sink",
            1,
            Duration::from_secs(60),
            "rival",
        ))
        .await
        .unwrap();
    assert_eq!(rival.messages[0].outbox_id, id);
    assert_ne!(id, first);
    inner
        .ack(&[rival.messages[0].claim().unwrap()])
        .await
        .unwrap();
    release.notify_one();
    wait_for(&mut events, |e| matches!(e, RelayEvent::LostClaim { .. })).await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    let mut got = moved(&snapshotter, "lapse");
    got.remove("outbox_claim_batch_size");
    // The failing extensions are retried by the lane's backoff until the lapse: at least one.
    let failed_extensions = got.remove("outbox_store_errors_total{op=extend_lease}");
    assert!(
        failed_extensions.is_some_and(|n| n >= 1),
        "failed extensions: {failed_extensions:?}, all moved: {got:?}"
    );
    assert_eq!(
        got,
        expect(&[
            ("outbox_enqueued_total", 2),
            ("outbox_claimed_total", 2),
            // The first message, delivered within its lease.
            ("outbox_delivered_total", 1),
            ("outbox_delivery_duration_seconds", 1),
            ("outbox_end_to_end_latency_seconds", 1),
            ("outbox_lease_expired_total", 1),
            ("outbox_lost_claims_total", 1),
        ])
    );

    // A lease extension.
    let store = memory();
    store.enqueue(draft("extend")).await.unwrap();
    let (relay, mut events) = start(OutboxRelay::builder(&store).lane(
        lane("extend").delivery_timeout(Duration::from_secs(600)),
        Scripted::new(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        }),
    ))
    .await;
    wait_for(&mut events, |e| matches!(e, RelayEvent::Delivered { .. })).await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    let mut got = moved(&snapshotter, "extend");
    got.remove("outbox_claim_batch_size");
    // A 3 s lease extended at 2 s and again at 4 s, then delivered at 5 s.
    assert_eq!(
        got,
        expect(&[
            ("outbox_enqueued_total", 1),
            ("outbox_claimed_total", 1),
            ("outbox_lease_extended_total", 2),
            ("outbox_delivered_total", 1),
            ("outbox_delivery_duration_seconds", 1),
            ("outbox_end_to_end_latency_seconds", 1),
        ])
    );

    // A store error and a restart.
    let inner = memory();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    inner.enqueue(draft("crash")).await.unwrap();
    store.unavailable.store(1, Ordering::SeqCst);
    store.panic_acks.store(1, Ordering::SeqCst);
    let (relay, mut events) = start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .lane(lane("crash"), Scripted::new(|| async { Ok(()) })),
    )
    .await;
    wait_for(&mut events, |e| matches!(e, RelayEvent::Delivered { .. })).await;
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    let mut got = moved(&snapshotter, "crash");
    got.remove("outbox_claim_batch_size");
    assert_eq!(
        got,
        expect(&[
            ("outbox_enqueued_total", 1),
            ("outbox_store_errors_total{op=claim}", 1),
            // Delivered by the first incarnation, which panicked acking it; redelivered by
            // the second once the lease lapsed.
            ("outbox_claimed_total", 2),
            ("outbox_redeliveries_total", 1),
            // Durations are recorded with the ack's outcome: the crashed ack recorded none.
            ("outbox_delivery_duration_seconds", 1),
            ("outbox_relay_restarts_total", 1),
            ("outbox_delivered_total", 1),
            ("outbox_end_to_end_latency_seconds", 1),
        ])
    );

    // The backlog gauges are sampled when the lane starts, not one `stats_interval` later:
    // two messages due in a day are pending, and the gauge says so long before the lane's
    // hour-long interval (on the paused clock, time only moves while this test waits).
    let store = memory();
    for _ in 0..2 {
        store
            .enqueue(draft("sampled").with_delay(Duration::from_secs(86_400)))
            .await
            .unwrap();
    }
    let started = tokio::time::Instant::now();
    let (relay, _events) = start(
        OutboxRelay::builder(&store).lane(lane("sampled"), Scripted::new(|| async { Ok(()) })),
    )
    .await;
    let mut seen = None;
    while started.elapsed() < Duration::from_secs(60) {
        seen = gauge(&snapshotter, "outbox_pending", "sampled");
        if seen == Some(2.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        seen,
        Some(2.0),
        "outbox_pending of lane `sampled` after {:?} (its stats_interval is 1 h)",
        started.elapsed()
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// The value of gauge `name` of `lane`, if it was set.
fn gauge(snapshotter: &Snapshotter, name: &str, lane: &str) -> Option<f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let key = key.key();
            let ours =
                key.name() == name && key.labels().any(|l| l.key() == "lane" && l.value() == lane);
            match value {
                DebugValue::Gauge(value) if ours => Some(value.into_inner()),
                _ => None,
            }
        })
}
