//! Deliveries while they run: status counts them, a lease lost under one is reported
//! once, and the lane's own lapsed claim, claimed again, is adopted by the running
//! delivery.

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::ClaimRequest;
use outbox_relay::OutboxRelay;
use tokio::sync::Notify;

use super::{lane, one_claimed, sleeping};
use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, held, memory_store, wait_delivered, wait_for};
use outbox_relay::Outbox;

#[tokio::test(start_paused = true)]
async fn status_reports_deliveries_in_flight_while_they_run() {
    let store = memory_store();
    let ids = [
        enqueue(&store, draft(1)).await,
        enqueue(&store, draft(2)).await,
    ];
    let release = Arc::new(Notify::new());
    let handler = held(&release);
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane().concurrency(3), handler.clone()))
            .await;
    wait_for(
        &mut events,
        "both claimed",
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids.len() == 2),
    )
    .await;
    let status = relay.status().await.unwrap();
    assert_eq!(status[0].in_flight, 2);
    assert_eq!(status[0].claimed, 2);
    release.notify_one();
    wait_delivered(&mut events, 1).await;
    assert_eq!(relay.status().await.unwrap()[0].in_flight, 1);
    release.notify_one();
    wait_delivered(&mut events, 1).await;
    let status = relay.status().await.unwrap();
    assert_eq!((status[0].in_flight, status[0].delivered), (0, 2));
    assert_eq!(handler.calls().len(), ids.len());
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_delivering_is_reported_expired_once() {
    // Checked every 2 s (lease 3 s, margin 1 s), delivering for 20 s.
    let (store, id, relay, mut events) = one_claimed(
        lane().concurrency(1).lease(Duration::from_secs(3)),
        Duration::from_secs(20),
    )
    .await;
    // Another holder takes the message over mid-delivery.
    let ours = store.get(id).await.unwrap().unwrap().claim().unwrap();
    store.release(&[ours]).await.unwrap();
    let rival = store
        .claim(&ClaimRequest::new(
            "canonical",
            "projector",
            1,
            Duration::from_secs(600),
            "relay-b",
        ))
        .await
        .unwrap();
    assert_eq!(rival.messages.len(), 1);
    let mut expired = 0;
    while let RelayEvent::LeaseExpired { outbox_ids, .. } =
        wait_for(&mut events, "the fenced ack", |e| {
            matches!(
                e,
                RelayEvent::LeaseExpired { .. } | RelayEvent::LostClaim { .. }
            )
        })
        .await
    {
        expired += outbox_ids.iter().filter(|o| **o == id).count();
    }
    assert_eq!(expired, 1, "one lost lease, reported {expired} times");
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn our_own_lapsed_claim_reclaimed_is_adopted_by_the_running_delivery() {
    let inner = memory_store();
    let store = Arc::new(FaultyStore::new(inner.clone()));
    let id = enqueue(&inner, draft(1)).await;
    let handler = sleeping(Duration::from_secs(20));
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&Outbox::from_arc(store.clone())).lane(
            // A free handler, so the lane can claim the message again while delivering it.
            lane().concurrency(2).lease(Duration::from_secs(3)),
            handler.clone(),
        ))
        .await;
    wait_for(&mut events, "the claim", |e| {
        matches!(e, RelayEvent::Claimed { .. })
    })
    .await;
    // The claim is handed back under the running delivery (as if it had lapsed); the lane's
    // wake-up claims it again.
    let ours = inner.get(id).await.unwrap().unwrap().claim().unwrap();
    inner.release(&[ours]).await.unwrap();
    wait_for(
        &mut events,
        "the claim again",
        |e| matches!(e, RelayEvent::Claimed { outbox_ids, .. } if outbox_ids == &vec![id]),
    )
    .await;
    // The running delivery acks with the fresh token: one delivery, no lost claim.
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    assert_eq!(handler.calls(), vec![id]);
    let status = relay.status().await.unwrap();
    assert_eq!((status[0].lost_claims, status[0].in_flight), (0, 0));
    // Nothing is left to keep a lease of: no timer may go on extending nothing.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let calls = store.extend_calls.lock().unwrap().clone();
    assert!(
        !calls.contains(&0),
        "extend_lease called with no claims: {calls:?}"
    );
    relay.shutdown(Duration::from_secs(1)).await.unwrap();
}
