//! Lane patterns: lanes that come and go. A lane a producer writes to for the first time is
//! started with the pattern's settings within the pattern's poll interval, up to its
//! `max_lanes` (the rest stay unserved and are reported so), a lane of its own wins over
//! the pattern, and an idle pattern lane drains and stops, to start again on its next
//! message. End to end on SQLite; the timing on the paused clock with the memory store.

#![cfg(feature = "sqlite")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use outbox_relay::config::{LanePattern, RateLimit};
use outbox_relay::metrics;
use outbox_relay::relay::{LaneKey, LaneState, RelayEvent};
use outbox_relay::store::{StoreCall, StoreHook, StoreOp, UnservedLane};
use outbox_relay::{LaneConfig, OutboxMessageDraft, OutboxRelay};
use serde_json::json;
use tokio::sync::mpsc;

use crate::{enqueue, memory_store, start, wait_delivered, wait_for, TestHandler};

/// What the test's log subscriber wrote; clones share the buffer.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn to(lane: &str, target: &str) -> OutboxMessageDraft {
    OutboxMessageDraft::new(lane, target, json!({ "lane": lane })).unwrap()
}

fn tenants(max_lanes: usize) -> LanePattern {
    LanePattern::new(
        LaneConfig::new("tenant-*", "billing")
            .max_poll_interval(Duration::from_millis(50))
            .rate_limit(Some(RateLimit::new(500, Duration::from_secs(1)))),
    )
    .max_lanes(max_lanes)
}

fn started(event: &RelayEvent, lane: &str) -> bool {
    matches!(event, RelayEvent::LaneStateChanged { lane: key, state: LaneState::Running }
        if key.name == lane)
}

/// The rate limit a running lane has, as its status shows it.
async fn rate_limit_of(relay: &outbox_relay::RelayHandle, lane: &str) -> Option<String> {
    let status = relay.status().await.unwrap();
    let lane = status
        .iter()
        .find(|s| s.lane.name == lane)
        .expect("lane runs");
    lane.gates.rate_limit.clone()
}

/// Each finished `record_served` call: the unserved report that follows sees its record.
#[derive(Debug)]
struct Recorded(mpsc::UnboundedSender<()>);

impl StoreHook for Recorded {
    fn finished(&self, call: &StoreCall<'_>) {
        if call.op == StoreOp::RecordServed {
            let _ = self.0.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_that_appears_is_served_with_the_patterns_settings() {
    let (store, _dir) = crate::stores::sqlite().await;
    lane_appears(store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lane_that_appears_is_served_with_the_patterns_settings() {
    use crate::stores::Cleanup;
    let (store, schema) = crate::stores::postgres().await;
    lane_appears(store).await;
    schema.cleanup().await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_lane_that_appears_is_served_with_the_patterns_settings() {
    use crate::stores::Cleanup;
    let (store, db) = crate::stores::mysql().await;
    lane_appears(store).await;
    db.cleanup().await;
}

async fn lane_appears(store: outbox_relay::Outbox) {
    let handler = TestHandler::ok();
    let builder = OutboxRelay::builder(&store).lane_pattern(tenants(10), handler.clone());
    let (relay, mut events) = start(builder).await;
    assert!(
        relay.status().await.unwrap().is_empty(),
        "no lane before a message"
    );

    let id = enqueue(&store, to("tenant-7", "billing")).await;
    wait_for(&mut events, "tenant-7 started", |e| started(e, "tenant-7")).await;
    assert_eq!(wait_delivered(&mut events, 1).await, [id]);
    assert_eq!(
        rate_limit_of(&relay, "tenant-7").await.as_deref(),
        Some("500/1s (burst 500)"),
        "the pattern's settings"
    );
    // Another target, and a lane the pattern does not match, are not the pattern's.
    enqueue(&store, to("tenant-7", "audit")).await;
    enqueue(&store, to("other", "billing")).await;
    let second = enqueue(&store, to("tenant-8", "billing")).await;
    wait_for(&mut events, "tenant-8 started", |e| started(e, "tenant-8")).await;
    assert_eq!(wait_delivered(&mut events, 1).await, [second]);
    let mut lanes: Vec<LaneKey> = relay
        .status()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.lane)
        .collect();
    lanes.sort();
    assert_eq!(
        lanes,
        [
            LaneKey::new("tenant-7", "billing"),
            LaneKey::new("tenant-8", "billing")
        ]
    );
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// The pattern gauges labelled `lane="tenant-*",target="billing"`, by name, as one
/// snapshot holds them (a snapshot drains the recorder).
fn pattern_gauges(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            match value {
                DebugValue::Gauge(value)
                    if labels == [("lane", "tenant-*"), ("target", "billing")] =>
                {
                    Some((key.name().to_owned(), value.into_inner()))
                }
                _ => None,
            }
        })
        .collect()
}

/// On one thread, so the relay's actors record into this test's metrics recorder and log
/// into its subscriber.
#[tokio::test]
async fn a_pattern_runs_at_most_max_lanes_the_rest_reported_unserved() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = ::metrics::set_default_local_recorder(&recorder);
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);

    let (store, _dir) = crate::stores::sqlite().await;
    let (tx, mut recorded) = mpsc::unbounded_channel();
    let store = store.with_hook(Arc::new(Recorded(tx)));
    for lane in ["tenant-1", "tenant-2", "tenant-3", "tenant-9"] {
        enqueue(&store, to(lane, "billing")).await;
    }
    // tenant-9 has a lane of its own: it wins over the pattern and takes none of its limit.
    let own = LaneConfig::new("tenant-9", "billing")
        .rate_limit(Some(RateLimit::new(7, Duration::from_secs(1))));
    let builder = OutboxRelay::builder(&store)
        .lane(own, TestHandler::ok())
        .lane_pattern(tenants(2), TestHandler::ok());
    let (relay, mut events) = start(builder).await;
    wait_delivered(&mut events, 3).await;
    let mut lanes: Vec<String> = relay
        .status()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.lane.name)
        .collect();
    lanes.sort();
    assert_eq!(lanes, ["tenant-1", "tenant-2", "tenant-9"]);
    assert_eq!(
        rate_limit_of(&relay, "tenant-9").await.as_deref(),
        Some("7/1s (burst 7)")
    );
    // The supervisor answered status after the pass that started the pattern's lanes: that
    // pass set the pattern's gauges and logged the lane left out.
    assert_eq!(
        pattern_gauges(&snapshotter),
        BTreeMap::from([
            // The pattern's running lanes, the explicit tenant-9 not among them.
            (metrics::PATTERN_LANES.to_owned(), 2.0),
            // tenant-3, past max_lanes.
            (metrics::PATTERN_LANES_OVER_LIMIT.to_owned(), 1.0),
        ])
    );
    let warnings: Vec<String> = log
        .text()
        .lines()
        .filter(|line| line.contains("not started"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "logged once, not again on each pass: {warnings:?}"
    );
    assert!(
        warnings[0].contains("pattern=tenant-*")
            && warnings[0].contains("max_lanes=2")
            && warnings[0].contains("lanes=tenant-3"),
        "{}",
        warnings[0]
    );

    // The relay recorded its lanes, pattern lanes among them, at start: only the lane past
    // the limit is unserved.
    tokio::time::timeout(crate::EVENT_TIMEOUT, recorded.recv())
        .await
        .expect("the served lanes are recorded at start");
    assert_eq!(
        store.unserved_lanes(10).await.unwrap(),
        [UnservedLane {
            lane: "tenant-3".to_owned(),
            target: "billing".to_owned(),
            pending: 1,
        }]
    );
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_added_explicitly_takes_over_from_the_pattern() {
    let (store, _dir) = crate::stores::sqlite().await;
    enqueue(&store, to("tenant-1", "billing")).await;
    let builder = OutboxRelay::builder(&store).lane_pattern(tenants(10), TestHandler::ok());
    let (relay, mut events) = start(builder).await;
    wait_delivered(&mut events, 1).await;

    let own = LaneConfig::new("tenant-1", "billing")
        .rate_limit(Some(RateLimit::new(7, Duration::from_secs(1))));
    relay.add_lane(own, TestHandler::ok()).await.unwrap();
    assert_eq!(
        rate_limit_of(&relay, "tenant-1").await.as_deref(),
        Some("7/1s (burst 7)")
    );
    let id = enqueue(&store, to("tenant-1", "billing")).await;
    assert_eq!(wait_delivered(&mut events, 1).await, [id]);
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pattern_lane_drains_and_stops_and_its_next_message_starts_it_again() {
    let (store, _dir) = crate::stores::sqlite().await;
    let pattern = tenants(10).idle_stop(Some(Duration::from_millis(200)));
    let builder = OutboxRelay::builder(&store).lane_pattern(pattern, TestHandler::ok());
    let (relay, mut events) = start(builder).await;

    enqueue(&store, to("tenant-5", "billing")).await;
    wait_delivered(&mut events, 1).await;
    let stopped = wait_for(
        &mut events,
        "tenant-5 stopped",
        |e| matches!(e, RelayEvent::LaneStopped { lane, .. } if lane.name == "tenant-5"),
    )
    .await;
    let RelayEvent::LaneStopped { report, .. } = stopped else {
        unreachable!()
    };
    assert!(report.is_clean(), "{report:?}");

    let id = enqueue(&store, to("tenant-5", "billing")).await;
    wait_for(&mut events, "tenant-5 started again", |e| {
        started(e, "tenant-5")
    })
    .await;
    assert_eq!(wait_delivered(&mut events, 1).await, [id]);
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// On the paused clock: a lane's first message is claimed within one of the pattern's poll
/// intervals, however long its own wake-ups would take (the store tells no lane of it).
#[tokio::test(start_paused = true)]
async fn a_new_lane_is_served_within_one_poll_interval() {
    let store = memory_store();
    let every = Duration::from_secs(3);
    let pattern = LanePattern::new(LaneConfig::new("tenant-*", "billing").max_poll_interval(every));
    let builder = OutboxRelay::builder(&store).lane_pattern(pattern, TestHandler::ok());
    let (relay, mut events) = start(builder).await;
    // Between two passes.
    tokio::time::sleep(every / 3).await;
    let written = tokio::time::Instant::now();
    enqueue(&store, to("tenant-1041", "billing")).await;
    wait_delivered(&mut events, 1).await;
    assert!(
        written.elapsed() <= every,
        "served {:?} after the write, over the poll interval {every:?}",
        written.elapsed()
    );
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}
