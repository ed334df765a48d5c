#![cfg(feature = "prometheus")]
//! End to end: a relay that delivers, fails, retries, dead-letters, panics, extends and
//! loses leases, meets a store error and restarts a lane records its metrics; the
//! Prometheus exporter serves them; a real Prometheus (`/usr/bin/prometheus`) scrapes
//! them; and then every metric of `outbox_relay::metrics::ALL` has series that moved,
//! every query of every panel of `grafana/outbox-relay.json` returns data, and every rule
//! of `grafana/alerts.yml` evaluates without error.
//!
//! One test function in a binary of its own: `install_prometheus_exporter` installs the
//! process's global recorder, and a process gets one. The relay runs on the real clock
//! (Prometheus scrapes in real time); the scenario waits on `RelayEvent`s and on what
//! Prometheus answers, never on sleeps.
//!
//! Prometheus is required, never skipped: without `/usr/bin/prometheus` (Debian's
//! `prometheus` package, which `.ci/run` installs) or `$PROMETHEUS` the test fails.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use outbox_relay::config::RateLimit;
use outbox_relay::metrics::{
    install_prometheus_exporter, FailureKind, MetricKind, StoreOp, ALL, LABEL_LANE, LABEL_TARGET,
    REQUEUED_TOTAL,
};
use outbox_relay::relay::{LaneKey, RelayEvent};
use outbox_relay::retention::{RetentionConfig, RetentionTask};
use outbox_relay::store::{
    ClaimOutcome, ClaimRef, ClaimRequest, MessageFilter, NackOutcome, OrderingPolicy,
};
use outbox_relay::{
    DeliveryError, DeliveryHandler, InMemoryOutboxStore, LaneConfig, OutboxMessage,
    OutboxMessageDraft, OutboxRelay, OutboxStore, RelayHandle, RetryPolicy,
};
use serde_json::json;
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;
use uuid::Uuid;

#[path = "support/dashboard.rs"]
mod dashboard;
#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "support/prometheus.rs"]
mod prometheus;

use faulty_store::FaultyStore;
use prometheus::Prometheus;

/// The scrape job; `grafana/alerts.yml`'s `OutboxRelayDown` matches this name.
const JOB: &str = "outbox-relay";

/// How long any one wait may take: an event, a scrape, a rule evaluation. Generous,
/// because other builds share this machine; a passing run waits far less.
const WAIT: Duration = Duration::from_secs(60);

/// Lane one: fast deliveries with every kind of failure, lease extension, a restart.
const WEBHOOK: (&str, &str) = ("orders", "webhook");
/// Lane two: one delivery at a time, no lease extension, a blocked ordering key.
const LEDGER: (&str, &str) = ("billing", "ledger");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_panel_and_alert_rule_works_against_a_real_prometheus() {
    let started = Instant::now();
    let exporter = install_exporter();
    let alerts = dashboard::repo_path("grafana/alerts.yml");
    // Killed, its data removed, when `server` drops, also when an assertion panics.
    let server = Prometheus::start(JOB, exporter, &[alerts.as_path()]).await;
    let prometheus = &server;
    eprintln!(
        "exporter on {exporter}, Prometheus on {} (ready after {:?})",
        prometheus.addr(),
        started.elapsed()
    );

    let relay = run_scenario(prometheus).await;
    let scenario_done = unix_seconds();
    eprintln!("scenario done after {:?}", started.elapsed());

    // Rates need two samples after the last events: wait for two scrapes that started
    // after the scenario ended.
    until(
        prometheus,
        "two scrapes after the scenario",
        || async move {
            let window_ms = ((unix_seconds() - scenario_done) * 1000.0).ceil() as u64;
            let promql = format!("count_over_time(up{{job=\"{JOB}\"}}[{window_ms}ms])");
            let scrapes = prometheus.query(&promql).await.ok()?;
            (scrapes.first()?.1 >= 2.0).then_some(())
        },
    )
    .await;
    let up = prometheus
        .query(&format!("up{{job=\"{JOB}\"}}"))
        .await
        .expect("query up");
    assert_eq!(up.len(), 1, "one scrape target: {up:?}");
    assert_eq!(up[0].1, 1.0, "the exporter's scrape failed: {up:?}");

    let metrics = check_every_metric(prometheus).await;
    let queries = check_every_panel_query(prometheus).await;
    let rules = check_every_alert_rule(prometheus).await;
    eprintln!(
        "checked {metrics} metrics, {queries} panel queries and {rules} alert rules \
         against Prometheus in {:?}",
        started.elapsed()
    );
    relay
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shut the relay down");
}

// ---- The exporter ----------------------------------------------------------------------

/// Installs the exporter on a free loopback port, trying another if it was taken meanwhile.
fn install_exporter() -> SocketAddr {
    for _ in 0..5 {
        let addr = prometheus::free_loopback_addr();
        match install_prometheus_exporter(addr) {
            Ok(_handle) => return addr,
            Err(error) if !error.recorder_already_installed() => {
                eprintln!("{error}; trying another port")
            }
            Err(error) => panic!("{error}: this test must be alone in its binary"),
        }
    }
    panic!("no free loopback port for the exporter after 5 attempts");
}

// ---- The scenario ----------------------------------------------------------------------

async fn run_scenario(prometheus: &Prometheus) -> RelayHandle {
    let inner = Arc::new(InMemoryOutboxStore::new());
    let store = Arc::new(FaultyStore::new(inner.clone()));
    let handler = ScenarioHandler::default();
    let stats_interval = Duration::from_millis(200);
    let relay = OutboxRelay::builder(store.clone())
        .lane(
            LaneConfig::new(WEBHOOK.0, WEBHOOK.1)
                .concurrency(4)
                // Two claims at once, 50 a second: step 1's backlog waits for tokens, so the
                // throttled-time histogram moves.
                .rate_limit(Some(RateLimit::new(50, Duration::from_secs(1)).burst(2)))
                // Extended a third of the lease before it lapses, so about every 1.3 s.
                .lease(Duration::from_secs(2))
                .retry(RetryPolicy::new(
                    Duration::from_millis(50),
                    Duration::from_millis(200),
                ))
                .max_poll_interval(Duration::from_millis(500))
                .stats_interval(stats_interval),
            handler.clone(),
        )
        .lane(
            LaneConfig::new(LEDGER.0, LEDGER.1)
                .concurrency(1)
                // No claims ahead of the one handler: while it holds the lapsing delivery
                // the lane claims nothing, so the rival (step 4) is the one that takes the
                // lapsed message, not the lane itself (which would adopt it).
                .prefetch(0)
                .lease(Duration::from_secs(1))
                .lease_extend_margin(None)
                .ordering(OrderingPolicy::Block)
                .retry(RetryPolicy::new(
                    Duration::from_millis(50),
                    Duration::from_millis(200),
                ))
                .max_poll_interval(Duration::from_millis(500))
                .stats_interval(stats_interval),
            handler.clone(),
        )
        .event_capacity(100_000)
        .start()
        .await
        .expect("start the relay");
    let mut events = relay.subscribe();
    // Every series exists, at zero, from a lane's start. Let Prometheus scrape those zeros
    // before anything moves: a counter first scraped at 1 shows no increase, and the
    // dead-letter alert below would never fire.
    until(
        prometheus,
        "a scrape of both lanes before any event",
        || async move {
            let lanes = prometheus
                .query("count(outbox_dead_lettered_total)")
                .await
                .ok()?;
            (lanes.first()?.1 == 2.0).then_some(())
        },
    )
    .await;

    // 1. Deliveries, failures of every handled kind, a dead letter on each lane, a store
    //    error, a lease extension; on the ledger, a dead head that blocks its key.
    store.unavailable.store(1, Ordering::SeqCst);
    let mut ok = Vec::new();
    for _ in 0..3 {
        ok.push(send(&inner, WEBHOOK, "ok").await);
    }
    let retried = send(&inner, WEBHOOK, "retry_once").await;
    let rejected = send(&inner, WEBHOOK, "permanent_once").await;
    let panicked = send(&inner, WEBHOOK, "panic_once").await;
    let slow = send(&inner, WEBHOOK, "hold:extend").await;
    for _ in 0..2 {
        ok.push(send(&inner, LEDGER, "ok").await);
    }
    let keyed = |action: &str| {
        OutboxMessageDraft::new(LEDGER.0, LEDGER.1, json!({ "do": action }))
            .expect("valid draft")
            .with_ordering_key("account-7")
    };
    let dead_head = enqueue(&inner, keyed("permanent")).await;
    let _blocked = enqueue(&inner, keyed("ok")).await;

    let mut expected = vec![
        Expect::new("a store error on claim", |e| {
            matches!(
                e,
                RelayEvent::StoreError {
                    op: StoreOp::Claim,
                    ..
                }
            )
        }),
        failed(retried, FailureKind::Retryable, NackOutcome::Requeued),
        failed(rejected, FailureKind::Permanent, NackOutcome::DeadLettered),
        failed(panicked, FailureKind::Panic, NackOutcome::Requeued),
        failed(dead_head, FailureKind::Permanent, NackOutcome::DeadLettered),
        Expect::new(
            "a lease extension on the webhook lane",
            move |e| matches!(e, RelayEvent::LeaseExtended { lane, .. } if lane.lane == WEBHOOK.0),
        ),
        delivered(retried),
        delivered(panicked),
    ];
    expected.extend(ok.iter().map(|&id| delivered(id)));
    expect_events(
        &mut events,
        "deliveries, failures and a lease extension",
        expected,
    )
    .await;
    handler.gate("extend").notify_one();
    expect_events(&mut events, "the slow delivery", vec![delivered(slow)]).await;

    // 2. An operator requeues the webhook's dead letter; it is delivered this time.
    let requeued = inner
        .requeue_dead_letters(&MessageFilter::lane(WEBHOOK.0, WEBHOOK.1))
        .await
        .expect("requeue");
    assert_eq!(requeued, 1);
    expect_events(
        &mut events,
        "the requeued message",
        vec![delivered(rejected)],
    )
    .await;

    // 3. An ack panics: the webhook lane crashes and is restarted, and the message is
    //    redelivered once its lease lapses.
    store.panic_acks.store(1, Ordering::SeqCst);
    let crashed_on = send(&inner, WEBHOOK, "ok").await;
    let on_webhook = |e: &RelayEvent| match e {
        RelayEvent::LaneCrashed { lane, .. }
        | RelayEvent::LaneRestarting { lane, .. }
        | RelayEvent::LaneStarted { lane, .. } => lane.lane == WEBHOOK.0,
        _ => false,
    };
    expect_events(
        &mut events,
        "a lane restart",
        vec![
            Expect::new("the crash", move |e| {
                on_webhook(e) && matches!(e, RelayEvent::LaneCrashed { .. })
            }),
            Expect::new("the restart", move |e| {
                on_webhook(e) && matches!(e, RelayEvent::LaneRestarting { .. })
            }),
            Expect::new("the second incarnation", move |e| {
                on_webhook(e) && matches!(e, RelayEvent::LaneStarted { incarnation: 2, .. })
            }),
            delivered(crashed_on),
        ],
    )
    .await;

    // 4. A ledger delivery outlives its lease (no extension there); a rival takes the
    //    message and delivers it; the relay's late ack is a lost claim. The delivery is
    //    held until Prometheus has scraped it in flight.
    let lapsing = send(&inner, LEDGER, "hold:lapse").await;
    expect_events(
        &mut events,
        "the ledger lease to lapse",
        vec![Expect::new("a lease expiry", move |e| {
            matches!(e, RelayEvent::LeaseExpired { outbox_ids, .. } if outbox_ids.contains(&lapsing))
        })],
    )
    .await;
    let rival = inner
        .claim(
            &ClaimRequest::new(LEDGER.0, LEDGER.1, 1, Duration::from_secs(60), "rival")
                .with_ordering(OrderingPolicy::Block),
        )
        .await
        .expect("the rival's claim");
    let taken: Vec<ClaimRef> = rival.messages.iter().filter_map(|m| m.claim()).collect();
    assert_eq!(
        rival
            .messages
            .iter()
            .map(|m| m.outbox_id)
            .collect::<Vec<_>>(),
        vec![lapsing],
        "the rival should take exactly the lapsed message"
    );
    assert_eq!(
        inner.ack(&taken).await.expect("the rival's ack"),
        vec![ClaimOutcome::Applied]
    );
    until(
        prometheus,
        "Prometheus to scrape a delivery in flight",
        || async move {
            let promql = format!(
                "max_over_time(outbox_in_flight{{lane=\"{}\"}}[5m])",
                LEDGER.0
            );
            let in_flight = prometheus.query(&promql).await.ok()?;
            (in_flight.first()?.1 >= 1.0).then_some(())
        },
    )
    .await;
    handler.gate("lapse").notify_one();
    expect_events(
        &mut events,
        "the late ack",
        vec![Expect::new(
            "a lost claim",
            move |e| matches!(e, RelayEvent::LostClaim { outbox_id, .. } if *outbox_id == lapsing),
        )],
    )
    .await;

    // 5. Fresh deliveries on both lanes, so the latency histograms' rates are recent.
    let last = [
        send(&inner, WEBHOOK, "ok").await,
        send(&inner, LEDGER, "ok").await,
    ];
    expect_events(
        &mut events,
        "the last deliveries",
        last.map(delivered).into(),
    )
    .await;

    // 6. Automatic retention, with no delay for delivered messages (the validated config
    //    would refuse that; the task takes what it is given), purges both lanes'
    //    delivered messages and keeps their dead letters.
    let retention = RetentionConfig {
        delivered: Some(Duration::ZERO),
        dead_letter: None,
    };
    let lanes = [WEBHOOK, LEDGER].map(|(lane, target)| (LaneKey::new(lane, target), retention));
    let purged = RetentionTask::new(inner.clone(), lanes.into())
        .purge_once()
        .await;
    for (lane, result) in &purged {
        let count = result.as_ref().expect("purge");
        assert!(*count > 0, "{lane}: retention purged nothing");
    }

    // The relay keeps running, its gauges sampled, while Prometheus is queried.
    relay
}

/// Enqueues a message of `lane` whose payload tells the handler what to do.
async fn send(store: &InMemoryOutboxStore, lane: (&str, &str), action: &str) -> Uuid {
    let draft =
        OutboxMessageDraft::new(lane.0, lane.1, json!({ "do": action })).expect("valid draft");
    enqueue(store, draft).await
}

async fn enqueue(store: &InMemoryOutboxStore, draft: OutboxMessageDraft) -> Uuid {
    store
        .enqueue(draft)
        .await
        .expect("enqueue")
        .message
        .outbox_id
}

/// An event the scenario waits for.
struct Expect {
    what: String,
    matches: Box<dyn Fn(&RelayEvent) -> bool + Send>,
}

impl Expect {
    fn new(what: &str, matches: impl Fn(&RelayEvent) -> bool + Send + 'static) -> Self {
        Self {
            what: what.to_owned(),
            matches: Box::new(matches),
        }
    }
}

fn delivered(id: Uuid) -> Expect {
    Expect::new(
        &format!("{id} delivered"),
        move |e| matches!(e, RelayEvent::Delivered { outbox_id, .. } if *outbox_id == id),
    )
}

fn failed(id: Uuid, kind: FailureKind, outcome: NackOutcome) -> Expect {
    Expect::new(&format!("{id} failed ({kind}, {outcome:?})"), move |e| {
        matches!(e, RelayEvent::Failed { outbox_id, kind: k, outcome: o, .. }
            if *outbox_id == id && *k == kind && *o == outcome)
    })
}

/// Waits until every expectation has been met by some event, in any order.
async fn expect_events(
    events: &mut broadcast::Receiver<RelayEvent>,
    step: &str,
    mut expected: Vec<Expect>,
) {
    let deadline = Instant::now() + WAIT;
    while !expected.is_empty() {
        let event = match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(event)) => event,
            Ok(Err(error)) => panic!("{step}: the event stream broke: {error}"),
            Err(_) => {
                let missing: Vec<&str> = expected.iter().map(|e| e.what.as_str()).collect();
                panic!("{step}: no event within {WAIT:?} for {missing:?}");
            }
        };
        expected.retain(|e| !(e.matches)(&event));
    }
}

/// Polls `check` every 200 ms until it answers, for at most [`WAIT`].
async fn until<T, F, Fut>(prometheus: &Prometheus, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(answer) = check().await {
            return answer;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {WAIT:?} waiting for {what}; Prometheus's log ends:\n{}",
                prometheus.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

// ---- The checks ------------------------------------------------------------------------

/// Every metric has a series for both lanes, and the scenario moved it: a counter or a
/// histogram's count is above zero, a gauge was above zero in some scrape. Returns how
/// many metrics were checked.
async fn check_every_metric(prometheus: &Prometheus) -> usize {
    let lanes: BTreeSet<(String, String)> = [WEBHOOK, LEDGER]
        .iter()
        .map(|(l, t)| (l.to_string(), t.to_string()))
        .collect();
    let mut problems = Vec::new();
    for metric in ALL {
        let (series, moved) = match metric.kind {
            MetricKind::Counter => (metric.name.to_owned(), format!("sum({})", metric.name)),
            MetricKind::Histogram => {
                let count = format!("{}_count", metric.name);
                (count.clone(), format!("sum({count})"))
            }
            MetricKind::Gauge => (
                metric.name.to_owned(),
                format!("max(max_over_time({}[10m]))", metric.name),
            ),
        };
        let found = prometheus.query(&series).await.expect("query a metric");
        let labelled: BTreeSet<(String, String)> = found
            .iter()
            .map(|(labels, _)| {
                let label = |name: &str| labels[name].as_str().unwrap_or_default().to_owned();
                (label(LABEL_LANE), label(LABEL_TARGET))
            })
            .collect();
        if labelled != lanes {
            problems.push(format!(
                "{series}: series for lanes {labelled:?}, expected {lanes:?}"
            ));
        }
        let value = prometheus.query(&moved).await.expect("query a metric");
        if !value.first().is_some_and(|(_, v)| *v > 0.0) {
            problems.push(format!("{moved} = {value:?}: the scenario did not move it"));
        }
    }
    // Only the operator's requeue counts as one; the retries after the retryable failure
    // and the handler panic do not.
    let requeued = format!("sum by (lane) ({REQUEUED_TOTAL})");
    let by_lane = prometheus.query(&requeued).await.expect("query requeues");
    let by_lane: Vec<(&str, f64)> = by_lane
        .iter()
        .map(|(labels, n)| (labels[LABEL_LANE].as_str().unwrap_or_default(), *n))
        .filter(|(_, n)| *n != 0.0)
        .collect();
    if by_lane != [(WEBHOOK.0, 1.0)] {
        problems.push(format!(
            "{requeued} = {by_lane:?}, expected the one operator requeue on {}",
            WEBHOOK.0
        ));
    }
    assert!(
        problems.is_empty(),
        "metrics missing or unmoved in Prometheus:\n  {}",
        problems.join("\n  ")
    );
    ALL.len()
}

/// Every query of every dashboard panel returns at least one series, and at least one of
/// them has a number (not NaN: Grafana shows NaN as no data). Returns how many queries.
async fn check_every_panel_query(prometheus: &Prometheus) -> usize {
    let queries = dashboard::panel_queries(&dashboard::dashboard());
    assert!(queries.len() >= 20, "only {} panel queries", queries.len());
    let mut problems = Vec::new();
    for query in &queries {
        let name = format!(
            "panel {} {:?} query {}",
            query.panel_id, query.panel_title, query.ref_id
        );
        assert!(
            !query.expr.contains('$'),
            "{name}: a variable is left unsubstituted in {}",
            query.expr
        );
        match prometheus.query(&query.expr).await {
            Err(error) => problems.push(format!("{name}: {error}")),
            Ok(series) if series.is_empty() => {
                problems.push(format!("{name} returned no series: {}", query.expr))
            }
            Ok(series) if series.iter().all(|(_, v)| v.is_nan()) => problems.push(format!(
                "{name} returned only NaN ({series:?}): {}",
                query.expr
            )),
            Ok(_) => {}
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} dashboard queries show no data:\n  {}",
        problems.len(),
        queries.len(),
        problems.join("\n  ")
    );
    queries.len()
}

/// Every alert rule of `grafana/alerts.yml` is loaded and has been evaluated without
/// error, and the dead-letter alert fires on the scenario's dead letters. Returns how many
/// rules.
async fn check_every_alert_rule(prometheus: &Prometheus) -> usize {
    let declared = dashboard::read("grafana/alerts.yml")
        .lines()
        .filter(|line| line.trim_start().starts_with("- alert:"))
        .count();
    let rules = until(
        prometheus,
        "every alert rule to be evaluated",
        || async move {
            let data = prometheus.api("rules", &[]).await.ok()?;
            let rules: Vec<serde_json::Value> = data["groups"]
                .as_array()?
                .iter()
                .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            let evaluated =
                rules.len() == declared && rules.iter().all(|r| r["health"] != "unknown");
            evaluated.then_some(rules)
        },
    )
    .await;
    let unhealthy: Vec<String> = rules
        .iter()
        .filter(|r| r["health"] != "ok" || r["lastError"].as_str().is_some_and(|e| !e.is_empty()))
        .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
        .collect();
    assert!(
        unhealthy.is_empty(),
        "alert rules failed to evaluate:\n  {}",
        unhealthy.join("\n  ")
    );

    let firing = until(
        prometheus,
        "OutboxDeadLettersGrowing to fire",
        || async move {
            let data = prometheus.api("alerts", &[]).await.ok()?;
            let lanes: BTreeSet<String> = data["alerts"]
                .as_array()?
                .iter()
                .filter(|a| a["labels"]["alertname"] == "OutboxDeadLettersGrowing")
                .filter(|a| a["state"] == "firing")
                .filter_map(|a| a["labels"]["lane"].as_str().map(str::to_owned))
                .collect();
            (lanes.len() == 2).then_some(lanes)
        },
    )
    .await;
    assert_eq!(
        firing,
        BTreeSet::from([WEBHOOK.0.to_owned(), LEDGER.0.to_owned()])
    );
    rules.len()
}

// ---- The handler -----------------------------------------------------------------------

/// Does what the payload's `do` says: `ok`; `retry_once`, `permanent_once`, `panic_once`
/// (fail that way on the first call, succeed after); `permanent`; `hold:<gate>` (wait
/// until the test opens the gate, then succeed).
#[derive(Clone, Default)]
struct ScenarioHandler {
    called: Arc<Mutex<HashSet<Uuid>>>,
    gates: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl ScenarioHandler {
    fn gate(&self, name: &str) -> Arc<Notify> {
        self.gates
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }
}

#[async_trait]
impl DeliveryHandler for ScenarioHandler {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let first_call = self.called.lock().unwrap().insert(message.outbox_id);
        let body = message.payload.to_value().unwrap();
        let action = body["do"].as_str().unwrap_or("ok");
        match action {
            "retry_once" if first_call => Err(DeliveryError::retryable("busy, try later")),
            "permanent_once" if first_call => Err(DeliveryError::permanent("bad request")),
            "permanent" => Err(DeliveryError::permanent("bad request")),
            "panic_once" if first_call => panic!("injected handler panic"),
            _ => {
                if let Some(gate) = action.strip_prefix("hold:") {
                    self.gate(gate).notified().await;
                }
                Ok(())
            }
        }
    }
}
