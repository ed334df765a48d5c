//! The lane as a pipeline, seen from outside: what a crash costs in redeliveries now that
//! a lane claims ahead of need, and how few store calls an idle lane makes per message.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::MessageFilter;
use outbox_relay::time::{Clock, ManualClock, SystemClock};
use outbox_relay::{InMemoryOutboxStore, LaneConfig, Outbox, OutboxRelay};
use uuid::Uuid;

use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, memory_store, wait_delivered, wait_for, TestHandler, EVENT_TIMEOUT};

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector").lease(Duration::from_secs(30))
}

/// A relay with concurrency C and prefetch P is aborted like a SIGKILL (its runtime is
/// dropped: no shutdown, no release, no further ack) while C deliveries hang and P messages
/// wait in its buffer. A second relay on the same store takes over when the leases lapse.
/// Only what the first relay held may be delivered again: at most C+P messages. (The
/// prefetch stays at P here, `prefetch_max` 0; the chaos test `claim_bound` kills a relay
/// process whose prefetch grew.)
#[test]
fn after_an_abort_at_most_concurrency_plus_prefetch_messages_are_delivered_again() {
    abort_redelivers_at_most_concurrency_plus_prefetch(1);
}

/// As above, with two claims in flight (PostgreSQL's default): the claims out never ask
/// for room another may fill, so the bound is the same.
#[test]
fn with_two_claims_in_flight_an_abort_delivers_again_at_most_concurrency_plus_prefetch() {
    abort_redelivers_at_most_concurrency_plus_prefetch(2);
}

fn abort_redelivers_at_most_concurrency_plus_prefetch(claims_in_flight: usize) {
    const C: usize = 4;
    const P: usize = 3;
    const TOTAL: usize = 40;
    const FIRST: usize = 10;
    let clock = Arc::new(ManualClock::new(SystemClock.now_millis()));
    let store = Outbox::new(InMemoryOutboxStore::with_clock(clock.clone()));
    let runtime_b = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime_b.block_on(async {
        for i in 0..TOTAL {
            enqueue(&store, draft(i as i64)).await;
        }
    });

    // Relay A: the first FIRST deliveries succeed, every later one hangs for good.
    let started = Arc::new(AtomicUsize::new(0));
    let handler_a = {
        let started = started.clone();
        TestHandler::new(move |_| {
            let n = started.fetch_add(1, Ordering::SeqCst);
            async move {
                if n >= FIRST {
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        })
    };
    let runtime_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let held_by_a = runtime_a.block_on(async {
        let (relay, mut events) = crate::start(
            OutboxRelay::builder(&store).lane(
                lane()
                    .consumer_id("relay-a")
                    .concurrency(C)
                    .prefetch(P)
                    .prefetch_max(0)
                    .claims_in_flight(claims_in_flight),
                handler_a.clone(),
            ),
        )
        .await;
        // Wait until A holds what it can: C hung deliveries and a full buffer.
        let mut claimed = HashSet::new();
        let mut delivered = HashSet::new();
        while !(delivered.len() == FIRST && claimed.len() - delivered.len() == C + P) {
            match wait_for(&mut events, "relay A to fill up", |e| {
                matches!(e, RelayEvent::Claimed { .. } | RelayEvent::Delivered { .. })
            })
            .await
            {
                RelayEvent::Claimed { outbox_ids, .. } => claimed.extend(outbox_ids),
                RelayEvent::Delivered { outbox_id, .. } => {
                    delivered.insert(outbox_id);
                }
                _ => {}
            }
        }
        // Dropping the handle stops nothing: the abort below is all relay A gets.
        drop(relay);
        claimed.len() - delivered.len()
    });
    runtime_a.shutdown_background();
    let calls_a = handler_a.calls();

    runtime_b.block_on(async {
        let stats = store
            .stats(&MessageFilter::lane("canonical", "projector"))
            .await
            .unwrap();
        assert_eq!(stats[0].claimed as usize, held_by_a, "{stats:?}");
        assert_eq!(held_by_a, C + P);
        // A's leases lapse.
        clock.advance(Duration::from_secs(31));
        let handler_b = TestHandler::ok();
        let (relay, mut events) = crate::start(
            OutboxRelay::builder(&store)
                .lane(
                    lane()
                        .consumer_id("relay-b")
                        .concurrency(C)
                        .prefetch(P)
                        .prefetch_max(0)
                        .claims_in_flight(claims_in_flight),
                    handler_b.clone(),
                )
                .event_capacity(10_000),
        )
        .await;
        let mut redelivered = 0;
        let mut delivered = HashSet::new();
        let drained = tokio::time::timeout(EVENT_TIMEOUT, async {
            while delivered.len() < TOTAL - FIRST {
                match events.recv().await.unwrap() {
                    RelayEvent::Claimed { redeliveries, .. } => redelivered += redeliveries,
                    RelayEvent::Delivered { outbox_id, .. } => {
                        delivered.insert(outbox_id);
                    }
                    _ => {}
                }
            }
        })
        .await;
        let calls_b = handler_b.calls();
        let a: HashSet<Uuid> = calls_a.iter().copied().collect();
        let twice: Vec<&Uuid> = calls_b.iter().filter(|id| a.contains(id)).collect();
        let report = format!(
            "A called {} handlers, B {}; delivered twice: {}; B's redeliveries: {redelivered}",
            calls_a.len(),
            calls_b.len(),
            twice.len()
        );
        println!("{report}");
        assert!(drained.is_ok(), "B did not finish: {report}");
        assert!(twice.len() <= C + P, "{report}");
        assert!(redelivered <= C + P, "{report}");
        let stats = store
            .stats(&MessageFilter::lane("canonical", "projector"))
            .await
            .unwrap();
        assert_eq!(stats[0].delivered as usize, TOTAL, "{report}; {stats:?}");
        relay.shutdown(Duration::from_secs(5)).await.unwrap();
    });
}

/// An idle lane picks up messages enqueued one at a time: a wake-up makes one claim, which
/// comes back short and so also says when the next message is due; after the ack the lane
/// sleeps on that answer. At most two store calls per message, counting claims, `next_due`
/// calls and acks.
#[tokio::test(start_paused = true)]
async fn an_idle_lane_picks_up_each_message_with_few_store_calls() {
    const MESSAGES: u32 = 100;
    let store = Arc::new(FaultyStore::new(memory_store()));
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .lane(lane().concurrency(8), TestHandler::ok())
            .event_capacity(10_000),
    )
    .await;
    let idle = |e: &RelayEvent| matches!(e, RelayEvent::Idle { .. });
    wait_for(&mut events, "the lane to go idle", idle).await;
    let before = (
        store.calls.claims.load(Ordering::SeqCst),
        store.calls.next_dues.load(Ordering::SeqCst),
        store.calls.acks.load(Ordering::SeqCst),
    );
    for i in 0..MESSAGES {
        enqueue(&store.inner, draft(i64::from(i))).await;
        wait_delivered(&mut events, 1).await;
        wait_for(&mut events, "the lane to go idle again", idle).await;
    }
    let claims = store.calls.claims.load(Ordering::SeqCst) - before.0;
    let next_dues = store.calls.next_dues.load(Ordering::SeqCst) - before.1;
    let acks = store.calls.acks.load(Ordering::SeqCst) - before.2;
    let calls = claims + next_dues + acks;
    let report = format!(
        "{MESSAGES} messages: {claims} claims, {next_dues} next_due, {acks} acks \
         ({:.2} store calls per message)",
        f64::from(calls) / f64::from(MESSAGES)
    );
    println!("{report}");
    // The quiet idle path: the wake-up's claim (short, so it also answers next_due) and
    // the ack. The lane then sleeps on the claim's answer without asking the store again.
    assert!(calls <= 2 * MESSAGES, "{report}");
    assert!(claims <= MESSAGES, "{report}");
    assert!(acks <= MESSAGES, "{report}");
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// A claim stuck in the store does not hold up the lane's mailbox: a drain still ends at its
/// deadline (an await inside the actor's handler would have blocked it until the store
/// answered).
#[tokio::test(start_paused = true)]
async fn a_stuck_claim_does_not_delay_a_drain() {
    let store = Arc::new(FaultyStore::new(memory_store()));
    store.stall_claims.store(true, Ordering::SeqCst);
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone())).lane(lane(), TestHandler::ok()),
    )
    .await;
    wait_for(&mut events, "the lane to start", |e| {
        matches!(e, RelayEvent::LaneStarted { .. })
    })
    .await;
    let started = tokio::time::Instant::now();
    let removed = relay
        .remove_lane("canonical", "projector", Duration::from_secs(1))
        .await;
    let took = started.elapsed();
    assert!(removed.is_ok(), "{removed:?} after {took:?}");
    assert!(
        took <= Duration::from_secs(2),
        "the drain waited for the store: {took:?}"
    );
    assert_eq!(
        store.calls.claims.load(Ordering::SeqCst),
        1,
        "the claim was made"
    );
    store.claim_gate.notify_waiters();
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// Shutdown hands the buffered messages back: pending again, due at once for any relay.
#[tokio::test(start_paused = true)]
async fn shutdown_releases_the_prefetch_buffer() {
    let store = memory_store();
    let ids = [
        enqueue(&store, draft(1)).await,
        enqueue(&store, draft(2)).await,
        enqueue(&store, draft(3)).await,
    ];
    let handler = TestHandler::new(|_| async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(())
    });
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(lane().concurrency(1).prefetch(2), handler.clone()),
    )
    .await;
    wait_for(
        &mut events,
        "all three claimed",
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids.len() == 3),
    )
    .await;
    let report = relay.shutdown(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        (report.completed(), report.released()),
        (1, 2),
        "{report:?}"
    );
    assert_eq!(handler.calls(), vec![ids[0]]);
    for id in &ids[1..] {
        let message = store.get(*id).await.unwrap().unwrap();
        assert_eq!(
            message.status,
            outbox_relay::OutboxStatus::Pending,
            "{message:?}"
        );
    }
}

/// An enqueue that commits while an idle lane's claim is out: the claim read the store
/// before the row existed and comes back empty ("nothing due"), but the wake-up the enqueue
/// sent came meanwhile, so the lane claims again at once instead of sleeping on that stale
/// answer until its poll ceiling (600 s here). Paused time: every ready task runs before the
/// clock moves, so "at once" is exact.
#[tokio::test(start_paused = true)]
async fn an_enqueue_while_the_idle_lanes_claim_is_out_is_picked_up_at_once() {
    let store = Arc::new(FaultyStore::new(memory_store()));
    store.stall_answers.store(true, Ordering::SeqCst);
    let lane = lane().max_poll_interval(Duration::from_secs(600));
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone())).lane(lane, TestHandler::ok()),
    )
    .await;
    wait_for(&mut events, "the lane to start", |e| {
        matches!(e, RelayEvent::LaneStarted { .. })
    })
    .await;
    // Every ready task runs first: the lane's first claim has read the empty store and
    // waits to answer.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(store.calls.claims.load(Ordering::SeqCst), 1);
    store.stall_answers.store(false, Ordering::SeqCst);
    let id = enqueue(&store.inner, draft(1)).await;
    // The wake-up reaches the lane while its claim is still out.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let answered = tokio::time::Instant::now();
    store.claim_gate.notify_waiters();
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    let took = answered.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the message waited {took:?} for a poll: the wake-up was lost"
    );
    assert_eq!(
        store.calls.claims.load(Ordering::SeqCst),
        2,
        "one claim more"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

/// A lane whose quick deliveries grew its prefetch (`prefetch_max`), then turn to 1 s each
/// at concurrency 16: the prefetch falls back to the configured one, and what the grown one
/// buffered starts within its lease. No lease lapses (extension is off, so a lapse would
/// show), no claim handed back and taken again, and after the slowdown no claim asks for
/// more than `concurrency + prefetch`. Claims take 2 ms, on tokio's paused clock.
#[tokio::test(start_paused = true)]
async fn slow_deliveries_after_quick_ones_shrink_the_prefetch_and_no_lease_lapses() {
    const C: usize = 16;
    const QUICK: usize = 600;
    const TOTAL: usize = 1_000;
    let store = Arc::new(FaultyStore::new(memory_store()));
    for i in 0..TOTAL {
        enqueue(&store.inner, draft(i as i64)).await;
    }
    store.claim_delay_ms.store(2, Ordering::SeqCst);
    let started = Arc::new(AtomicUsize::new(0));
    let slow_done = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (started, slow_done) = (started.clone(), slow_done.clone());
        TestHandler::new(move |_| {
            let n = started.fetch_add(1, Ordering::SeqCst);
            let slow_done = slow_done.clone();
            async move {
                if n >= QUICK {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    slow_done.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            }
        })
    };
    let config = lane()
        .concurrency(C)
        .lease_extend_margin(None)
        .delivery_timeout(Duration::from_secs(5))
        .prefetch_max(128);
    assert_eq!((config.prefetch, config.most_held()), (C, C + 128));
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(store.clone()))
            .lane(config, handler.clone())
            .event_capacity(100_000),
    )
    .await;
    let mut claimed: Vec<Uuid> = Vec::new();
    let (mut largest_quick, mut largest_slow) = (0, 0);
    let mut delivered = HashSet::new();
    let mut lapsed = Vec::new();
    let mut redeliveries = 0;
    while delivered.len() < TOTAL {
        match wait_for(&mut events, "every message delivered", |e| {
            matches!(
                e,
                RelayEvent::Claimed { .. }
                    | RelayEvent::Delivered { .. }
                    | RelayEvent::LeaseExpired { .. }
            )
        })
        .await
        {
            RelayEvent::Claimed {
                outbox_ids,
                redeliveries: again,
                ..
            } => {
                redeliveries += again;
                // Sent after a slow delivery finished: the lane had timed the slowdown.
                if slow_done.load(Ordering::SeqCst) >= 2 * C {
                    largest_slow = largest_slow.max(outbox_ids.len());
                } else {
                    largest_quick = largest_quick.max(outbox_ids.len());
                }
                claimed.extend(outbox_ids);
            }
            RelayEvent::Delivered { outbox_id, .. } => {
                delivered.insert(outbox_id);
            }
            RelayEvent::LeaseExpired { outbox_ids, .. } => lapsed.extend(outbox_ids),
            _ => {}
        }
    }
    let distinct: HashSet<&Uuid> = claimed.iter().collect();
    let report = format!(
        "largest claim while quick {largest_quick}, after the slowdown {largest_slow}; \
         {} claimed, {} distinct; {} lapsed, {redeliveries} redeliveries",
        claimed.len(),
        distinct.len(),
        lapsed.len()
    );
    println!("{report}");
    assert!(lapsed.is_empty(), "{report}");
    assert_eq!(redeliveries, 0, "{report}");
    assert_eq!(
        claimed.len(),
        TOTAL,
        "none handed back and claimed again: {report}"
    );
    assert!(largest_quick > 2 * C, "the prefetch grew: {report}");
    assert!(largest_slow <= 2 * C, "and shrank back: {report}");
    assert_eq!(
        handler.calls().len(),
        TOTAL,
        "each delivered once: {report}"
    );
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}
