//! Idle lanes cost the store nothing of their own: the relay's due watcher asks for all of
//! them in one call per pass and pokes the lane whose message falls due. On SQLite, on the
//! wall clock; the assertions are on counts and order, never on speed.

#![cfg(feature = "sqlite")]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::{ClaimRequest, Nack, NackDisposition, StoreCall, StoreHook, StoreOp};
use outbox_relay::{LaneConfig, Outbox, OutboxRelay};
use tokio::sync::mpsc;

use crate::{draft, enqueue, start, wait_delivered, wait_for, TestHandler, EVENT_TIMEOUT};

/// Every store call through an outbox, by its operation.
#[derive(Debug)]
struct Calls(mpsc::UnboundedSender<StoreOp>);

impl StoreHook for Calls {
    fn finished(&self, call: &StoreCall<'_>) {
        let _ = self.0.send(call.op);
    }
}

async fn sqlite_counted() -> (Outbox, mpsc::UnboundedReceiver<StoreOp>, tempfile::TempDir) {
    let (store, dir) = crate::stores::sqlite().await;
    let (tx, calls) = mpsc::unbounded_channel();
    (store.with_hook(Arc::new(Calls(tx))), calls, dir)
}

fn is_claim(op: StoreOp) -> bool {
    matches!(op, StoreOp::Claim | StoreOp::AckAndClaim)
}

/// The claims `lanes` idle lanes make while the due watcher makes `passes` passes (each
/// pass one `next_due` call for all lanes).
async fn claims_while_idle(lanes: usize, passes: usize) -> usize {
    let (store, mut calls, _dir) = sqlite_counted().await;
    let every = Duration::from_millis(50);
    let mut builder = OutboxRelay::builder(&store);
    for n in 0..lanes {
        builder = builder.lane(
            LaneConfig::new(format!("lane-{n}"), "projector").max_poll_interval(every),
            TestHandler::ok(),
        );
    }
    let (relay, mut events) = start(builder).await;
    let mut idle = HashSet::new();
    while idle.len() < lanes {
        if let RelayEvent::Idle { lane, .. } = wait_for(&mut events, "every lane idle", |e| {
            matches!(e, RelayEvent::Idle { .. })
        })
        .await
        {
            idle.insert(lane);
        }
    }
    // The window opens once every lane sleeps: the calls before do not count.
    while calls.try_recv().is_ok() {}
    let (mut seen, mut claims) = (0, 0);
    while seen < passes {
        let op = tokio::time::timeout(EVENT_TIMEOUT, calls.recv())
            .await
            .expect("the due watcher's passes")
            .expect("the hook lives");
        match op {
            StoreOp::NextDue => seen += 1,
            op if is_claim(op) => claims += 1,
            _ => {}
        }
    }
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
    claims
}

#[tokio::test]
async fn idle_lanes_make_no_claims_whatever_their_number() {
    // A lane polling on its `max_poll_interval` would make a claim per lane per pass: 32
    // lanes, 6 passes, ~190 claims. Watched, none; one `next_due` call a pass for all.
    let one = claims_while_idle(1, 6).await;
    let many = claims_while_idle(32, 6).await;
    assert_eq!(
        (one, many),
        (0, 0),
        "claims over six passes: 1 lane, 32 lanes"
    );
}

#[tokio::test]
async fn a_retry_another_relay_scheduled_is_claimed_when_it_falls_due() {
    let (store, mut calls, _dir) = sqlite_counted().await;
    // Another relay holds the message under a long lease when this one starts: the lane's
    // first claim finds nothing and it sleeps until that lease lapses, ten minutes away
    // (longer than the test waits for the delivery).
    let id = enqueue(&store, draft(1)).await;
    let lease = Duration::from_secs(600);
    let request = ClaimRequest::new("canonical", "projector", 1, lease, "relay-b");
    let theirs = store.claim(&request).await.unwrap();
    assert_eq!(theirs.messages.len(), 1);
    let builder = OutboxRelay::builder(&store).lane(
        LaneConfig::new("canonical", "projector").max_poll_interval(Duration::from_millis(200)),
        TestHandler::ok(),
    );
    let (relay, mut events) = start(builder).await;
    wait_for(&mut events, "the lane idle", |e| {
        matches!(e, RelayEvent::Idle { .. })
    })
    .await;
    while calls.try_recv().is_ok() {}
    // The other relay's delivery fails: a retry in a second, which nothing announces to
    // this relay (a nack wakes no one). Only the due watcher's pass sees it.
    let retry = Duration::from_secs(1);
    store
        .nack(&[Nack {
            claim: theirs.messages[0].claim().unwrap(),
            error: "failed".into(),
            disposition: NackDisposition::Retry(retry),
        }])
        .await
        .unwrap();
    // Delivered long before the lease the lane slept on would have lapsed.
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    let mut claims = 0;
    while let Ok(op) = calls.try_recv() {
        claims += usize::from(is_claim(op));
    }
    // One claim at the due time (one more if the poke came a moment early); a lane
    // polling every 200 ms would have claimed about five times.
    assert!(
        (1..=2).contains(&claims),
        "{claims} claims between the nack and the delivery"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}
