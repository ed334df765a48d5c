//! The scenario: two lanes that deliver, fail in every handled way, retry, dead-letter,
//! panic, extend and lose leases, meet a store error, restart, and have their delivered
//! messages purged, each step waited for on the relay's events.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::{LanePattern, RateLimit};
use outbox_relay::delivery::FailureKind;
use outbox_relay::message::ClaimRef;
use outbox_relay::relay::{LaneKey, RelayEvent};
use outbox_relay::retention::{RetentionConfig, RetentionTask};
use outbox_relay::store::StoreOp;
use outbox_relay::store::{ClaimOutcome, ClaimRequest, MessageFilter, NackOutcome, OrderingPolicy};
use outbox_relay::{
    InMemoryOutboxStore, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay, RelayHandle,
    RetryPolicy,
};
use serde_json::json;
use tokio::sync::broadcast;
use tokio::time::Instant;
use uuid::Uuid;

use crate::faulty_store::FaultyStore;
use crate::handler::ScenarioHandler;
use crate::prometheus::Prometheus;
use crate::{until, LEDGER, UNSERVED, WAIT, WEBHOOK};

pub(crate) async fn run_scenario(prometheus: &Prometheus) -> RelayHandle {
    // The scenario enqueues and requeues through `inner`; the relay's calls go through an
    // outbox over the fault injector. Both record the store metrics.
    let inner = Outbox::new(InMemoryOutboxStore::new());
    // A producer's typo of lane `orders`: no relay serves it, and its message waits there
    // (the lanes nobody serves, `OutboxLaneUnserved`). The producer is another service,
    // whose enqueue counts in its own metrics, not in this process's.
    enqueue(
        &inner.clone().without_metrics(),
        OutboxMessageDraft::new(UNSERVED.0, UNSERVED.1, json!({ "do": "ok" }))
            .expect("valid draft"),
    )
    .await;
    let store = Arc::new(FaultyStore::new(inner.clone()));
    let handler = ScenarioHandler::default();
    let stats_interval = Duration::from_millis(200);
    let relay = OutboxRelay::builder(&Outbox::from_arc(store.clone()))
        .lane(
            LaneConfig::new(WEBHOOK.0, WEBHOOK.1)
                .concurrency(4)
                // Two claims at once, 50 a second: step 1's backlog waits for tokens, so the
                // throttled-time histogram moves.
                .rate_limit(Some(RateLimit::new(50, Duration::from_secs(1)).burst(2)))
                // Extended a third of the lease before it lapses, so about every 1.3 s.
                .lease(Duration::from_secs(2))
                .retry(
                    RetryPolicy::new(Duration::from_millis(50), Duration::from_millis(200))
                        .jitter(false),
                )
                // A target's hour-long Retry-After is honoured for 100 ms.
                .retry_after_max(Duration::from_millis(100))
                .max_poll_interval(Duration::from_millis(500))
                .stats_interval(stats_interval),
            handler.clone(),
        )
        .lane(
            LaneConfig::new(LEDGER.0, LEDGER.1)
                .concurrency(1)
                // One claim waits behind the one handler. A delivery starts only while its
                // lease holds for the extension margin; it lapses when the extension due a
                // second before the lease's end fails (step 4), long before its timeout.
                .prefetch(1)
                .lease(Duration::from_secs(4))
                .lease_extend_margin(Some(Duration::from_secs(1)))
                .delivery_timeout(Duration::from_secs(30))
                .ordering(OrderingPolicy::Block)
                .retry(
                    RetryPolicy::new(Duration::from_millis(50), Duration::from_millis(200))
                        .jitter(false),
                )
                .max_poll_interval(Duration::from_millis(500))
                .stats_interval(stats_interval),
            handler.clone(),
        )
        // A lane pattern no message matches: each pass of its watcher records its gauges
        // (no lanes running, none over its limit), which the dashboard's pattern panel shows.
        .lane_pattern(
            LanePattern::new(
                LaneConfig::new("tenant-*", WEBHOOK.1)
                    .max_poll_interval(Duration::from_millis(500)),
            ),
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
    let asked_an_hour = send(&inner, WEBHOOK, "retry_after_once").await;
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
        failed(
            asked_an_hour,
            FailureKind::RetryAfter,
            NackOutcome::Requeued,
        ),
        Expect::new(
            "a Retry-After held to the ceiling",
            move |e| matches!(e, RelayEvent::RetryAfterClamped { outbox_id, .. } if *outbox_id == asked_an_hour),
        ),
        failed(dead_head, FailureKind::Permanent, NackOutcome::DeadLettered),
        Expect::new(
            "a lease extension on the webhook lane",
            move |e| matches!(e, RelayEvent::LeaseExtended { lane, .. } if lane.name == WEBHOOK.0),
        ),
        delivered(retried),
        delivered(panicked),
        delivered(asked_an_hour),
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
        | RelayEvent::LaneStarted { lane, .. } => lane.name == WEBHOOK.0,
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

    // 4. A ledger delivery outlives its lease, whose extension fails: it waited behind a
    //    2 s one claimed with it, so it starts 2 s into its 4 s lease. The lane is paused
    //    once it runs, so a rival takes the lapsed message and delivers it; the relay's
    //    late ack is a lost claim. The delivery is held until Prometheus has scraped it in
    //    flight.
    store.fail_extends.store(true, Ordering::SeqCst);
    let pair = inner
        .enqueue_many(
            ["take:2000", "hold:lapse"]
                .map(|action| {
                    OutboxMessageDraft::new(LEDGER.0, LEDGER.1, json!({ "do": action }))
                        .expect("valid draft")
                })
                .into(),
        )
        .await
        .expect("enqueue");
    let lapsing = pair[1].message.outbox_id;
    expect_events(
        &mut events,
        "the held message's claim",
        vec![Expect::new("its claim", move |e| {
            matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids.contains(&lapsing))
        })],
    )
    .await;
    // Paused once the held delivery runs: a pause hands back what has not started.
    tokio::time::timeout(crate::WAIT, handler.held("lapse").notified())
        .await
        .expect("the held delivery starts");
    relay
        .pause(LEDGER.0, LEDGER.1)
        .await
        .expect("pause the ledger");
    expect_events(
        &mut events,
        "the ledger lease to lapse",
        vec![Expect::new("a lease expiry", move |e| {
            matches!(e, RelayEvent::LeaseExpired { outbox_ids, .. } if outbox_ids.contains(&lapsing))
        })],
    )
    .await;
    store.fail_extends.store(false, Ordering::SeqCst);
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
    relay
        .resume(LEDGER.0, LEDGER.1)
        .await
        .expect("resume the ledger");

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
    let retention = RetentionConfig::keep_all().delivered(Some(Duration::ZERO));
    let lanes = [WEBHOOK, LEDGER].map(|(lane, target)| (LaneKey::new(lane, target), retention));
    let purged = RetentionTask::new(inner.clone(), lanes.into())
        .purge_once()
        .await;
    for (lane, count) in &purged {
        let count = count.expect("purge");
        assert!(count > 0, "{lane}: retention purged nothing");
    }

    // The relay keeps running, its gauges sampled, while Prometheus is queried.
    relay
}

/// Enqueues a message of `lane` whose payload tells the handler what to do.
async fn send(store: &Outbox, lane: (&str, &str), action: &str) -> Uuid {
    let draft =
        OutboxMessageDraft::new(lane.0, lane.1, json!({ "do": action })).expect("valid draft");
    enqueue(store, draft).await
}

async fn enqueue(store: &Outbox, draft: OutboxMessageDraft) -> Uuid {
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
