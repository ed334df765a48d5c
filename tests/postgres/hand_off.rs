//! Local hand-off on PostgreSQL: a relay running on the outbox a service enqueues
//! through takes the service's keyless, undelayed, fresh messages without a claim; the
//! message is then held as a claimed one (lease, fencing, crash redelivery).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::{CallOutcome, ClaimOutcome, MessageFilter, StoreCall, StoreHook};
use outbox_relay::time::ManualClock;
use outbox_relay::time::{Clock, SystemClock};
use outbox_relay::{
    handler_fn, DeliveryError, LaneConfig, Outbox, OutboxMessage, OutboxMessageDraft, OutboxRelay,
    OutboxStatus,
};
use tokio::sync::{broadcast, mpsc, Semaphore};
use uuid::Uuid;

use super::{open, SchemaGuard};

const LANE: &str = "handoff";
const TARGET: &str = "sink";
/// A second target of the lane, whose delivery marks a point in the wake-ups' order.
const SENTINEL: &str = "sentinel";
const WAIT: Duration = Duration::from_secs(20);

/// Counts the messages the relay's claims took: a hook on the outbox.
#[derive(Debug, Default)]
struct Counting {
    claimed: AtomicUsize,
}

impl Counting {
    fn claimed(&self) -> usize {
        self.claimed.load(Ordering::SeqCst)
    }
}

impl StoreHook for Counting {
    fn finished(&self, call: &StoreCall<'_>) {
        if let CallOutcome::Claimed(batch) = call.outcome {
            self.claimed
                .fetch_add(batch.messages.len(), Ordering::SeqCst);
        }
    }
}

fn draft(value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new(LANE, TARGET, serde_json::json!({ "value": value })).expect("draft")
}

fn lane() -> LaneConfig {
    LaneConfig::new(LANE, TARGET)
        .hand_off(true)
        .lease(Duration::from_secs(30))
}

/// Waits until the lane granted credits (it is idle), so the next enqueue is handed off.
async fn credits(store: &Outbox) -> usize {
    let registry = store.hand_off().expect("PostgreSQL offers hand-off");
    tokio::time::timeout(WAIT, async {
        loop {
            let n = registry.credits(LANE, TARGET);
            if n > 0 {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the idle lane grants credits")
}

async fn delivered(events: &mut broadcast::Receiver<RelayEvent>, id: Uuid) {
    tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(RelayEvent::Delivered { outbox_id, .. }) if outbox_id == id => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(error) => panic!("events ended: {error}"),
            }
        }
    })
    .await
    .expect("delivered in time")
}

/// Waits until every one of `ids` was delivered, in any order: with two claims in flight,
/// acks come back in the order their store calls finish, not the order of the enqueue.
async fn delivered_all(events: &mut broadcast::Receiver<RelayEvent>, ids: &[Uuid]) {
    let mut waiting: HashSet<Uuid> = ids.iter().copied().collect();
    let all = tokio::time::timeout(WAIT, async {
        while !waiting.is_empty() {
            match events.recv().await {
                Ok(RelayEvent::Delivered { outbox_id, .. }) => {
                    waiting.remove(&outbox_id);
                }
                Ok(_) => {}
                Err(error) => panic!("events: {error}"),
            }
        }
    })
    .await;
    assert!(all.is_ok(), "not delivered in {WAIT:?}: {waiting:?}");
}

async fn received(rx: &mut mpsc::UnboundedReceiver<OutboxMessage>) -> OutboxMessage {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("handler called in time")
        .expect("handler alive")
}

#[tokio::test]
async fn an_idle_relay_takes_its_own_process_keyless_enqueue_without_a_claim() {
    let schema = SchemaGuard::new();
    let counting = Arc::new(Counting::default());
    let store = open(schema.config()).await.with_hook(counting.clone());
    let (tx, mut rx) = mpsc::unbounded_channel();
    // The prefetch stays at 2 (`prefetch_max` 0), so the lane's room, and with it its
    // credits, stays `concurrency + prefetch` = 4 however quick the deliveries are.
    let builder = OutboxRelay::builder(&store).lane(
        lane().concurrency(2).prefetch_max(0),
        handler_fn(move |message: OutboxMessage| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(message);
                Ok::<(), DeliveryError>(())
            }
        }),
    );
    let mut events = builder.subscribe();
    let relay = builder.start().await.expect("relay");

    // Keyless, undelayed: written claimed by the lane, handed over, no claim.
    assert_eq!(credits(&store).await, 4, "concurrency + prefetch");
    let enqueued = store.enqueue(draft(1)).await.unwrap();
    assert_eq!(enqueued.message.status, OutboxStatus::Claimed);
    assert_eq!(enqueued.message.attempt_count, 1);
    let got = received(&mut rx).await;
    assert_eq!(got.outbox_id, enqueued.message.outbox_id);
    assert_eq!(got.claim_token, enqueued.message.claim_token);
    delivered(&mut events, got.outbox_id).await;
    assert_eq!(counting.claimed(), 0, "no claim took it");
    let row = store.get(got.outbox_id).await.unwrap().unwrap();
    assert_eq!(row.status, OutboxStatus::Delivered);

    // A fresh dedupe key is handed off too; its duplicate takes nothing and gives the
    // credit back.
    credits(&store).await;
    let first = store.enqueue(draft(2).with_dedupe_key("d")).await.unwrap();
    assert_eq!(first.message.status, OutboxStatus::Claimed);
    let got = received(&mut rx).await;
    assert_eq!(got.outbox_id, first.message.outbox_id);
    delivered(&mut events, got.outbox_id).await;
    let again = store.enqueue(draft(2).with_dedupe_key("d")).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message.outbox_id, first.message.outbox_id);
    assert_eq!(counting.claimed(), 0);

    // Keyed and delayed drafts take the normal path: a claim.
    credits(&store).await;
    let keyed = store
        .enqueue(draft(3).with_ordering_key("k"))
        .await
        .unwrap();
    assert_eq!(keyed.message.status, OutboxStatus::Pending);
    assert_eq!(received(&mut rx).await.outbox_id, keyed.message.outbox_id);
    delivered(&mut events, keyed.message.outbox_id).await;
    assert_eq!(counting.claimed(), 1);
    credits(&store).await;
    let delayed = store
        .enqueue(draft(4).with_delay(Duration::from_millis(50)))
        .await
        .unwrap();
    assert_eq!(delayed.message.status, OutboxStatus::Pending);
    assert_eq!(received(&mut rx).await.outbox_id, delayed.message.outbox_id);
    delivered(&mut events, delayed.message.outbox_id).await;
    assert_eq!(counting.claimed(), 2);

    // After the duplicate's credit came back, the lane is whole again: a keyless enqueue
    // is still handed off.
    assert_eq!(credits(&store).await, 4);
    let last = store.enqueue(draft(5)).await.unwrap();
    assert_eq!(last.message.status, OutboxStatus::Claimed);
    assert_eq!(received(&mut rx).await.outbox_id, last.message.outbox_id);
    delivered(&mut events, last.message.outbox_id).await;
    assert_eq!(counting.claimed(), 2);

    relay.shutdown(Duration::from_secs(5)).await.unwrap();
    // A stopped lane's taker is gone: enqueues are plain again.
    assert_eq!(store.hand_off().unwrap().credits(LANE, TARGET), 0);
    let after = store.enqueue(draft(6)).await.unwrap();
    assert_eq!(after.message.status, OutboxStatus::Pending);
    schema.drop().await;
}

#[tokio::test]
async fn an_enqueue_past_the_credits_hands_off_only_those_and_the_lane_stays_within_its_room() {
    enqueue_past_the_credits(1).await;
}

/// As above, with two claims in flight: the lane takes the hand-offs, and claims the rest
/// with two claims out, each carrying its own acks.
#[tokio::test]
async fn with_two_claims_in_flight_an_enqueue_past_the_credits_is_handed_off_and_claimed() {
    enqueue_past_the_credits(2).await;
}

async fn enqueue_past_the_credits(claims_in_flight: usize) {
    const C: usize = 2;
    const P: usize = 1;
    let schema = SchemaGuard::new();
    let counting = Arc::new(Counting::default());
    let store = open(schema.config()).await.with_hook(counting.clone());
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (gate, started) = (gate.clone(), started.clone());
        handler_fn(move |_message: OutboxMessage| {
            let (gate, started) = (gate.clone(), started.clone());
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.expect("gate").forget();
                Ok::<(), DeliveryError>(())
            }
        })
    };
    // A second lane, without hand-off: what reaches it goes through the wake-ups, in the
    // order PostgreSQL notified them.
    let builder = OutboxRelay::builder(&store)
        .lane(
            lane()
                .concurrency(C)
                .prefetch(P)
                .claims_in_flight(claims_in_flight),
            handler,
        )
        .lane(
            LaneConfig::new(LANE, SENTINEL).hand_off(false),
            handler_fn(|_message: OutboxMessage| async { Ok::<(), DeliveryError>(()) }),
        )
        .event_capacity(10_000);
    let mut events = builder.subscribe();
    let relay = builder.start().await.expect("relay");
    assert_eq!(credits(&store).await, C + P);

    let written = store
        .enqueue_many((0..6).map(draft).collect())
        .await
        .unwrap();
    let claimed_at_once = written
        .iter()
        .filter(|e| e.message.status == OutboxStatus::Claimed)
        .count();
    assert_eq!(claimed_at_once, C + P, "only the credits are handed off");

    // C deliveries hang and P wait: the wake-up of the pending three claims nothing more.
    tokio::time::timeout(WAIT, async {
        while started.load(Ordering::SeqCst) < C {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("deliveries start");
    // The window: the saturated lane has had the wake-up of the three. A message for the
    // second lane, committed after them, is notified after them, and the lanes' wake-up
    // tasks read one broadcast in that order: once it is delivered, the first lane's
    // wake-up came and went. Then look: never more than C+P claimed.
    let sentinel = store
        .enqueue(OutboxMessageDraft::new(LANE, SENTINEL, serde_json::json!({})).expect("draft"))
        .await
        .unwrap();
    delivered(&mut events, sentinel.message.outbox_id).await;
    let stats = store
        .stats(&MessageFilter::lane(LANE, TARGET))
        .await
        .unwrap();
    assert_eq!(stats[0].claimed as usize, C + P, "{stats:?}");
    assert_eq!(stats[0].pending, 3, "{stats:?}");
    assert_eq!(
        counting.claimed(),
        1,
        "only the second lane's message was claimed"
    );

    gate.add_permits(100);
    let ids: Vec<Uuid> = written.iter().map(|e| e.message.outbox_id).collect();
    delivered_all(&mut events, &ids).await;
    assert_eq!(counting.claimed(), 1 + 3, "the rest were claimed normally");
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
    schema.drop().await;
}

/// A handed-off message whose relay dies (its runtime dropped: no shutdown, no release,
/// no ack) stays claimed until its lease lapses; another relay then delivers it, and the
/// dead relay's late ack is a lost claim.
#[test]
fn a_handed_off_message_of_a_dead_relay_is_redelivered_after_its_lease() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_millis()));
    let schema = SchemaGuard::new();
    let config = schema.config().clock(clock.clone());
    let runtime_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (held, id) = runtime_a.block_on(async {
        let store = open(config.clone()).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handler = handler_fn(move |message: OutboxMessage| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(message);
                std::future::pending::<()>().await;
                Ok::<(), DeliveryError>(())
            }
        });
        let relay = OutboxRelay::builder(&store)
            .lane(lane().consumer_id("relay-a"), handler)
            .start()
            .await
            .expect("relay a");
        credits(&store).await;
        let enqueued = store.enqueue(draft(1)).await.unwrap();
        assert_eq!(enqueued.message.status, OutboxStatus::Claimed);
        let held = received(&mut rx).await;
        drop(relay);
        (held, enqueued.message.outbox_id)
    });
    runtime_a.shutdown_background();
    assert_eq!(held.outbox_id, id);
    assert_eq!(held.claimed_by.as_deref(), Some("relay-a"));

    let runtime_b = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime_b.block_on(async {
        let store = open(config).await;
        let row = store.get(id).await.unwrap().unwrap();
        assert_eq!(
            row.status,
            OutboxStatus::Claimed,
            "still held by the dead relay"
        );
        clock.advance(Duration::from_secs(31));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handler = handler_fn(move |message: OutboxMessage| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(message);
                Ok::<(), DeliveryError>(())
            }
        });
        let builder = OutboxRelay::builder(&store).lane(
            LaneConfig::new(LANE, TARGET).consumer_id("relay-b"),
            handler,
        );
        let mut events = builder.subscribe();
        let relay = builder.start().await.expect("relay b");
        let again = received(&mut rx).await;
        assert_eq!(again.outbox_id, id);
        assert_eq!(again.attempt_count, 2);
        assert_ne!(again.claim_token, held.claim_token);
        delivered(&mut events, id).await;
        let late = store.ack(&[held.claim().unwrap()]).await.unwrap();
        assert_eq!(late, vec![ClaimOutcome::LostClaim]);
        relay.shutdown(Duration::from_secs(5)).await.unwrap();
        schema.drop().await;
    });
}
