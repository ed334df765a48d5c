//! The core relay scenarios against every store, on the real clock: what holds for the
//! in-memory store must hold for SQLite, PostgreSQL and MySQL/MariaDB over real connections.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::{ClaimRequest, MessageFilter, NackOutcome};
use outbox_relay::{LaneConfig, Outbox, OutboxRelay, OutboxStatus, RetryPolicy};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::faulty_store::FaultyStore;
use crate::{draft, enqueue, wait_delivered, wait_for, TestHandler};

fn lane() -> LaneConfig {
    LaneConfig::new("canonical", "projector")
        .retry(RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(20)).jitter(false))
        // Long enough that a loaded machine never lapses a lease mid-delivery: a lapse
        // means an (allowed) duplicate delivery, which the exact-order checks would flag.
        .lease(Duration::from_secs(10))
        .max_poll_interval(Duration::from_secs(30))
}

pub async fn delivers_acks_and_dead_letters(store: Outbox) {
    let ok = enqueue(&store, draft(1)).await;
    let poison = enqueue(&store, draft(666).with_max_attempts(2)).await;
    let handler = TestHandler::new(|m| async move {
        if m.payload.to_value().unwrap()["value"] == 666 {
            Err(outbox_relay::DeliveryError::retryable("publish failed"))
        } else {
            Ok(())
        }
    });
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), handler)).await;
    let mut delivered = Vec::new();
    let mut dead = false;
    while delivered.is_empty() || !dead {
        match wait_for(&mut events, "delivery and dead letter", |e| {
            matches!(e, RelayEvent::Delivered { .. } | RelayEvent::Failed { .. })
        })
        .await
        {
            RelayEvent::Delivered { outbox_id, .. } => delivered.push(outbox_id),
            RelayEvent::Failed { outcome, .. } => dead |= outcome == NackOutcome::DeadLettered,
            _ => {}
        }
    }
    assert_eq!(delivered, vec![ok]);
    let poisoned = store.get(poison).await.unwrap().unwrap();
    assert_eq!(poisoned.status, OutboxStatus::DeadLetter);
    assert!(poisoned.last_error.unwrap().contains("publish failed"));
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

pub async fn redelivers_after_a_crashed_claimers_lease(store: Outbox) {
    let id = enqueue(&store, draft(1)).await;
    let lease = Duration::from_millis(500);
    // Taken before the claim: the store starts the lease somewhere inside the call, so an
    // instant taken after it returns makes a slow claim look like a short lease.
    let before_claim = std::time::Instant::now();
    let crashed = store
        .claim(&ClaimRequest::new(
            "canonical",
            "projector",
            1,
            lease,
            "crashed-relay",
        ))
        .await
        .unwrap();
    assert_eq!(crashed.messages.len(), 1);
    let handler = TestHandler::ok();
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(lane(), handler.clone())).await;
    assert_eq!(wait_delivered(&mut events, 1).await, vec![id]);
    // The store's clock and ours may differ by a few milliseconds of rounding.
    let waited = before_claim.elapsed();
    assert!(
        waited >= lease - Duration::from_millis(20),
        "redelivered {waited:?} after the crashed claim started, before its {lease:?} lease lapsed"
    );
    let late = store
        .ack(&[crashed.messages[0].claim().unwrap()])
        .await
        .unwrap();
    assert_eq!(late, vec![outbox_relay::store::ClaimOutcome::LostClaim]);
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// Relay a's delivery runs longer than its 2 s lease, and relay a cannot extend the lease
/// (its extensions fail): the lease lapses mid-delivery, relay b takes the message, and
/// relay a's ack, when its delivery ends, is fenced by the store itself: relay b's claim
/// stands and its own ack goes through (relay a reaches this store through a wrapper that
/// only fails its extensions).
pub async fn late_ack_of_a_slow_relay_is_fenced(store: Outbox) {
    let id = enqueue(&store, draft(1)).await;
    let cut_off = Arc::new(FaultyStore::new(store.clone()));
    cut_off.fail_extends.store(true, Ordering::SeqCst);
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let handler_a = crate::started_then_held(&started, &release);
    let (relay_a, mut events_a) = crate::start(
        OutboxRelay::builder(&Outbox::from_arc(cut_off.clone())).lane(
            lane()
                .consumer_id("relay-a")
                .lease(Duration::from_secs(2))
                .delivery_timeout(Duration::from_secs(60)),
            handler_a.clone(),
        ),
    )
    .await;
    tokio::time::timeout(crate::EVENT_TIMEOUT, started.notified())
        .await
        .expect("relay a's delivery starts");
    // Relay a claims nothing more: relay b is the one to take the lapsed message.
    relay_a.pause("canonical", "projector").await.unwrap();
    wait_for(
        &mut events_a,
        "relay a's lapse",
        |e| matches!(e, RelayEvent::LeaseExpired { outbox_ids, .. } if outbox_ids == &vec![id]),
    )
    .await;
    // Relay b takes the lapsed message, and is still delivering it when relay a's ack lands.
    let (b_started, b_release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler_b = crate::started_then_held(&b_started, &b_release);
    let (relay_b, mut events_b) = crate::start(
        OutboxRelay::builder(&store).lane(lane().consumer_id("relay-b"), handler_b.clone()),
    )
    .await;
    tokio::time::timeout(crate::EVENT_TIMEOUT, b_started.notified())
        .await
        .expect("relay b delivers the lapsed message");
    release.notify_one();
    wait_for(
        &mut events_a,
        "the fenced ack",
        |e| matches!(e, RelayEvent::LostClaim { outbox_id, .. } if *outbox_id == id),
    )
    .await;
    let message = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (
            message.status,
            message.attempt_count,
            message.claimed_by.as_deref()
        ),
        (OutboxStatus::Claimed, 2, Some("relay-b")),
        "relay a's late ack changed nothing: relay b still holds the message"
    );
    b_release.notify_one();
    assert_eq!(wait_delivered(&mut events_b, 1).await, vec![id]);
    let message = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (message.status, message.claimed_by),
        (OutboxStatus::Delivered, None)
    );
    assert_eq!((handler_a.calls(), handler_b.calls()), (vec![id], vec![id]));
    relay_a.shutdown(Duration::from_secs(5)).await.unwrap();
    relay_b.shutdown(Duration::from_secs(5)).await.unwrap();
}

pub async fn keeps_per_key_order_with_concurrency(store: Outbox) {
    let mut expected: HashMap<String, Vec<Uuid>> = HashMap::new();
    let mut drafts = Vec::new();
    for i in 0..20 {
        for k in 0..10 {
            drafts.push(draft(i).with_ordering_key(format!("key-{k}")));
        }
    }
    for answer in store.enqueue_many(drafts).await.unwrap() {
        let key = answer.message.ordering_key.clone().unwrap();
        expected
            .entry(key)
            .or_default()
            .push(answer.message.outbox_id);
    }
    let seen: Arc<Mutex<HashMap<String, Vec<Uuid>>>> = Arc::default();
    let handler = {
        let seen = seen.clone();
        TestHandler::new(move |m| {
            let seen = seen.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                let key = m.ordering_key.clone().unwrap_or_default();
                seen.lock()
                    .unwrap()
                    .entry(key)
                    .or_default()
                    .push(m.outbox_id);
                Ok(())
            }
        })
    };
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store)
            .lane(lane().concurrency(8), handler)
            .event_capacity(10_000),
    )
    .await;
    wait_delivered(&mut events, 200).await;
    assert_eq!(*seen.lock().unwrap(), expected);
    let stats = store
        .stats(&MessageFilter::lane("canonical", "projector"))
        .await
        .unwrap();
    assert_eq!(stats[0].delivered, 200);
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

pub async fn wakes_on_enqueue_without_polling(store: Outbox) {
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store)
            // A poll this long would fail the test's timeout: only a wake-up can deliver.
            .lane(
                lane().max_poll_interval(Duration::from_secs(3600)),
                TestHandler::ok(),
            ),
    )
    .await;
    wait_for(&mut events, "the lane to go idle", |e| {
        matches!(e, RelayEvent::Idle { .. })
    })
    .await;
    let id = enqueue(&store, draft(1)).await;
    let delivered = tokio::time::timeout(Duration::from_secs(20), wait_delivered(&mut events, 1))
        .await
        .expect("an enqueue must wake the idle lane");
    assert_eq!(delivered, vec![id]);
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
}

/// One `#[tokio::test]` per scenario for a store factory.
/// A lane with `keep_delivered = false` deletes each delivered row at its ack, keyed or
/// not, in per-key order, and keeps its dead letters; the store counts none delivered.
pub async fn a_lane_that_keeps_no_history_deletes_delivered_rows(store: Outbox) {
    let mut ids = Vec::new();
    for i in 0..20 {
        let draft = draft(i);
        ids.push(
            enqueue(
                &store,
                if i % 2 == 0 {
                    draft.with_ordering_key(format!("k{}", i % 3))
                } else {
                    draft
                },
            )
            .await,
        );
    }
    let poison = enqueue(&store, draft(666).with_max_attempts(1)).await;
    let handler = TestHandler::new(|m| async move {
        if m.payload.to_value().unwrap()["value"] == 666 {
            Err(outbox_relay::DeliveryError::permanent("rejected"))
        } else {
            Ok(())
        }
    });
    let (relay, mut events) = crate::start(
        OutboxRelay::builder(&store).lane(lane().concurrency(4).keep_delivered(false), handler),
    )
    .await;
    let mut delivered = Vec::new();
    let mut dead = false;
    while delivered.len() < ids.len() || !dead {
        match wait_for(&mut events, "every delivery and the dead letter", |e| {
            matches!(e, RelayEvent::Delivered { .. } | RelayEvent::Failed { .. })
        })
        .await
        {
            RelayEvent::Delivered { outbox_id, .. } => delivered.push(outbox_id),
            RelayEvent::Failed { outcome, .. } => dead |= outcome == NackOutcome::DeadLettered,
            _ => {}
        }
    }
    relay.shutdown(Duration::from_secs(5)).await.unwrap();
    delivered.sort();
    ids.sort();
    assert_eq!(delivered, ids);
    for id in &ids {
        assert_eq!(
            store.get(*id).await.unwrap(),
            None,
            "{id} deleted at its ack"
        );
    }
    let dead = store
        .get(poison)
        .await
        .unwrap()
        .expect("the dead letter is kept");
    assert_eq!(dead.status, OutboxStatus::DeadLetter);
    let stats = store
        .stats(&MessageFilter::lane("canonical", "projector"))
        .await
        .unwrap();
    assert_eq!(
        (
            stats[0].delivered,
            stats[0].dead_letter,
            stats[0].pending,
            stats[0].claimed
        ),
        (0, 1, 0, 0),
        "{stats:?}"
    );
}

/// A fleet-wide pause stops what the lane holds and has not started: with concurrency 1
/// and prefetch 4, one delivery runs while four wait in the buffer; the pause hands those
/// four back (pending again, attempt not counted) and only the running one finishes.
pub async fn a_fleet_wide_pause_releases_the_buffered_claims(store: Outbox) {
    use outbox_relay::relay::LaneState;
    use outbox_relay::store::LanePauseRequest;

    let ids = [
        enqueue(&store, draft(1)).await,
        enqueue(&store, draft(2)).await,
        enqueue(&store, draft(3)).await,
        enqueue(&store, draft(4)).await,
        enqueue(&store, draft(5)).await,
    ];
    let started = Arc::new(Notify::new());
    let finish = Arc::new(Notify::new());
    let handler = {
        let (started, finish) = (started.clone(), finish.clone());
        TestHandler::new(move |_| {
            let (started, finish) = (started.clone(), finish.clone());
            async move {
                started.notify_one();
                finish.notified().await;
                Ok(())
            }
        })
    };
    let config = lane()
        .concurrency(1)
        .prefetch(4)
        .claims_in_flight(1)
        .hand_off(false);
    let (relay, mut events) =
        crate::start(OutboxRelay::builder(&store).lane(config, handler.clone())).await;
    // The first delivery runs; the claim that brought it took the other four too.
    tokio::time::timeout(crate::EVENT_TIMEOUT, started.notified())
        .await
        .expect("the first delivery starts");
    let held = store
        .stats(&MessageFilter::lane("canonical", "projector"))
        .await
        .unwrap();
    assert_eq!(held[0].claimed, 5, "one running, four buffered: {held:?}");
    store
        .pause_lane(&LanePauseRequest::new("canonical", "projector", "test"))
        .await
        .unwrap();
    wait_for(&mut events, "the lane paused", |e| {
        matches!(
            e,
            RelayEvent::LaneStateChanged {
                state: LaneState::Paused,
                ..
            }
        )
    })
    .await;
    // The running delivery finishes; nothing starts after it.
    finish.notify_one();
    let delivered = wait_delivered(&mut events, 1).await;
    // The shutdown's drain waits for the pause's release to be recorded.
    relay.shutdown(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        handler.calls(),
        delivered,
        "one delivery ran: the one running when the pause came"
    );
    let page = store
        .list(
            &MessageFilter::lane("canonical", "projector"),
            outbox_relay::store::PageRequest {
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    for message in &page.messages {
        if message.outbox_id == delivered[0] {
            assert_eq!(message.status, OutboxStatus::Delivered);
        } else {
            assert!(ids.contains(&message.outbox_id));
            assert_eq!(
                (message.status, message.attempt_count),
                (OutboxStatus::Pending, 0),
                "{} went back unused",
                message.outbox_id
            );
        }
    }
    assert_eq!(page.messages.len(), 5);
}

macro_rules! relay_on_store {
    ($module:ident, $make:path) => {
        mod $module {
            $crate::stores::relay_on_store!(@case $make;
                delivers_acks_and_dead_letters,
                redelivers_after_a_crashed_claimers_lease,
                late_ack_of_a_slow_relay_is_fenced,
                keeps_per_key_order_with_concurrency,
                wakes_on_enqueue_without_polling,
                a_lane_that_keeps_no_history_deletes_delivered_rows,
                a_fleet_wide_pause_releases_the_buffered_claims,
            );
        }
    };
    (@case $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (store, guard) = $make().await;
                $crate::stores::$case(store).await;
                $crate::stores::Cleanup::cleanup(guard).await;
            }
        )*
    };
}
pub(crate) use relay_on_store;

/// The in-memory store on the wall clock.
pub async fn memory() -> (Outbox, ()) {
    (Outbox::new(outbox_relay::InMemoryOutboxStore::new()), ())
}

/// A SQLite store in its own temporary directory (kept alive by the guard).
#[cfg(feature = "sqlite")]
pub async fn sqlite() -> (Outbox, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = outbox_relay::SqliteOutboxStore::open(dir.path().join("outbox.db"))
        .await
        .unwrap();
    (Outbox::new(store), dir)
}

/// What a store factory leaves to clean up once a scenario passed.
#[allow(async_fn_in_trait)]
pub trait Cleanup {
    async fn cleanup(self);
}

impl Cleanup for () {
    async fn cleanup(self) {}
}

impl Cleanup for tempfile::TempDir {
    async fn cleanup(self) {}
}

/// A PostgreSQL schema of one test.
#[cfg(feature = "postgres")]
pub struct PgSchema(String);

#[cfg(feature = "postgres")]
impl PgSchema {
    /// A fresh schema name, dropped by [`Cleanup::cleanup`].
    pub fn new() -> Self {
        Self(format!("r_{}", Uuid::new_v4().simple()))
    }

    pub fn name(&self) -> String {
        self.0.clone()
    }
}

#[cfg(feature = "postgres")]
impl Cleanup for PgSchema {
    async fn cleanup(self) {
        let pool = sqlx::PgPool::connect(&pg_url()).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.0
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
}

#[cfg(feature = "postgres")]
pub fn pg_url() -> String {
    std::env::var("OUTBOX_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A PostgreSQL store in a schema of its own, on the database's clock. PostgreSQL must be
/// reachable: the test fails, never skips, when it is not.
#[cfg(feature = "postgres")]
pub async fn postgres() -> (Outbox, PgSchema) {
    use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
    let schema = format!("r_{}", Uuid::new_v4().simple());
    let url = pg_url();
    let store =
        PostgresOutboxStore::connect_with(&url, PostgresConfig::default().schema(schema.clone()))
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is required at {url}: {e}"));
    (Outbox::new(store), PgSchema(schema))
}

/// A MySQL/MariaDB store in a database of its own on `OUTBOX_TEST_MYSQL_URL` (dropped by
/// [`Cleanup::cleanup`]); the server must be reachable.
#[cfg(feature = "mysql")]
pub async fn mysql() -> (Outbox, crate::mysql_support::TestDatabase) {
    use outbox_relay::store::mysql::MysqlConfig;
    let db = crate::mysql_support::TestDatabase::create().await;
    let store = crate::mysql_support::open(&db, MysqlConfig::default()).await;
    (Outbox::new(store), db)
}

#[cfg(feature = "mysql")]
impl Cleanup for crate::mysql_support::TestDatabase {
    async fn cleanup(self) {
        self.drop_now().await;
    }
}

relay_on_store!(memory_store, crate::stores::memory);
#[cfg(feature = "sqlite")]
relay_on_store!(sqlite_store, crate::stores::sqlite);
#[cfg(feature = "postgres")]
relay_on_store!(postgres_store, crate::stores::postgres);
#[cfg(feature = "mysql")]
relay_on_store!(mysql_store, crate::stores::mysql);
