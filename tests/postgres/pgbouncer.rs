//! Through a real PgBouncer in `pool_mode = transaction` (`Pooler::Transaction`): a relay
//! and a service that enqueues in its own transactions, both connected through the
//! pooler, with fewer server connections than clients so that clients really share them.
//! Enqueue, delivery in order per key, a rolled-back enqueue, a lease lapse and its
//! redelivery, a fleet-wide pause; wake-ups over a direct `listen_url`, and the poll
//! without one. And why the setting is needed: the startup `options` are refused, and
//! named statements collide on shared server connections.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_relay::relay::RelayEvent;
use outbox_relay::store::postgres::{Pooler, PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::{ClaimOutcome, LanePauseRequest, MessageFilter, WakeUp};
use outbox_relay::time::ManualClock;
use outbox_relay::time::{Clock, SystemClock};
use outbox_relay::{
    handler_fn, DeliveryError, LaneConfig, Outbox, OutboxMessage, OutboxMessageDraft, OutboxRelay,
    OutboxStatus,
};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, Row};
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use crate::pgbouncer_process::PgBouncer;
use crate::{database_url, SchemaGuard};

const TARGET: &str = "sink";
/// Generous: a loaded CI machine.
const WAIT: Duration = Duration::from_secs(30);
/// Server connections PgBouncer opens per database and user: fewer than the clients below.
const SERVER_CONNECTIONS: u32 = 2;

/// A pool through `bouncer` as a client of the pooler would build it: the connect options
/// from `config` (no startup `options`, no statement cache under `Pooler::Transaction`).
async fn pool_through(bouncer: &PgBouncer, config: &PostgresConfig, size: u32) -> PgPool {
    let options = config
        .connect_options(&bouncer.url("postgres", "test"))
        .expect("connect options");
    PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(WAIT)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("connect through PgBouncer: {e}\n{}", bouncer.log()))
}

/// A migrated outbox through `bouncer`.
async fn open_through(bouncer: &PgBouncer, config: PostgresConfig) -> Outbox {
    let pool = pool_through(bouncer, &config, 4).await;
    let store = PostgresOutboxStore::new(pool, config)
        .await
        .expect("store through PgBouncer");
    store.migrate().await.expect("migrate through PgBouncer");
    Outbox::new(store)
}

fn pooled(schema: &SchemaGuard) -> PostgresConfig {
    schema.config().pooler(Pooler::Transaction)
}

fn draft(lane: &str, key: &str, value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new(lane, TARGET, json!({ "value": value }))
        .expect("draft")
        .with_ordering_key(key)
}

fn pg(outbox: &Outbox) -> &PostgresOutboxStore {
    outbox.backend().expect("a PostgreSQL outbox")
}

/// A handler that reports each delivery on a channel.
fn reporting() -> (
    impl outbox_relay::DeliveryHandler,
    mpsc::UnboundedReceiver<OutboxMessage>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = handler_fn(move |message: OutboxMessage| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(message);
            Ok::<(), DeliveryError>(())
        }
    });
    (handler, rx)
}

async fn received(rx: &mut mpsc::UnboundedReceiver<OutboxMessage>) -> OutboxMessage {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a delivery in time")
        .expect("handler alive")
}

/// Waits until the relay recorded the delivery of `id` (its ack committed).
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

/// The startup parameters of a direct connection (the `options` that carry `jit` and
/// `statement_timeout`, sqlx's `extra_float_digits`) are refused by PgBouncer; under
/// `Pooler::Transaction` the store connects and works.
#[tokio::test]
async fn pgbouncer_refuses_the_startup_options_that_the_transaction_pooler_setting_drops() {
    let bouncer = PgBouncer::start(&database_url(), SERVER_CONNECTIONS);
    let schema = SchemaGuard::new();
    let direct_style = schema.config();
    let refused = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(WAIT)
        .connect_with(
            direct_style
                .connect_options(&bouncer.url("postgres", "test"))
                .unwrap(),
        )
        .await
        .expect_err("PgBouncer accepts no startup options");
    assert!(
        refused
            .to_string()
            .contains("unsupported startup parameter"),
        "{refused}"
    );

    let outbox = open_through(&bouncer, pooled(&schema)).await;
    let enqueued = outbox.enqueue(draft("plain", "k", 1)).await.unwrap();
    assert_eq!(
        outbox
            .get(enqueued.message.outbox_id)
            .await
            .unwrap()
            .unwrap()
            .status,
        OutboxStatus::Pending
    );
    schema.drop().await;
}

/// sqlx with its statement cache off (`statement_cache_capacity(0)`) still prepares
/// every statement under a name (`sqlx_s_1`, `sqlx_s_2`, … per client connection) and
/// leaves it on the server connection. Through a transaction pooler with one server
/// connection, a second client's first statement then meets the first client's: the
/// error the store's unnamed statements avoid. The store's own clients, eight of them on
/// the same single server connection, run their calls without it.
#[tokio::test]
async fn named_statements_collide_on_a_shared_server_connection_and_the_stores_do_not() {
    let bouncer = PgBouncer::start(&database_url(), 1);
    let url = bouncer.url("postgres", "test");
    let cache_off: PgConnectOptions = url
        .parse::<PgConnectOptions>()
        .unwrap()
        .extra_float_digits(None)
        .statement_cache_capacity(0);
    let mut first = sqlx::PgConnection::connect_with(&cache_off).await.unwrap();
    let mut second = sqlx::PgConnection::connect_with(&cache_off).await.unwrap();
    let one: i32 = sqlx::query_scalar("SELECT $1::int4")
        .bind(1)
        .fetch_one(&mut first)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let collided = sqlx::query_scalar::<_, i32>("SELECT $1::int4 + 1")
        .bind(1)
        .fetch_one(&mut second)
        .await
        .expect_err("the second client's sqlx_s_1 meets the first one's");
    assert!(
        collided.to_string().contains("already exists"),
        "{collided}"
    );
    drop((first, second));

    let schema = SchemaGuard::new();
    let config = pooled(&schema);
    open_through(&bouncer, config.clone()).await;
    let mut clients = Vec::new();
    for client in 0..8 {
        let outbox = open_through(&bouncer, config.clone()).await;
        clients.push(tokio::spawn(async move {
            let lane = format!("client{client}");
            for i in 0..10 {
                outbox.enqueue(draft(&lane, "k", i)).await.unwrap();
                let filter = MessageFilter::lane(&lane, TARGET);
                let stats = outbox.stats(&filter).await.unwrap();
                assert_eq!(stats[0].pending, 1, "{lane}");
                let page = outbox
                    .list(
                        &filter.clone().with_status(OutboxStatus::Pending),
                        outbox_relay::store::PageRequest {
                            after: None,
                            limit: 10,
                        },
                    )
                    .await
                    .unwrap();
                let claim = page.messages[0].clone();
                let request = outbox_relay::store::ClaimRequest::new(
                    &lane,
                    TARGET,
                    10,
                    Duration::from_secs(30),
                    "c",
                );
                let batch = outbox.claim(&request).await.unwrap();
                assert_eq!(batch.messages.len(), 1);
                assert_eq!(batch.messages[0].outbox_id, claim.outbox_id);
                let acked = outbox
                    .ack(&[batch.messages[0].claim().unwrap()])
                    .await
                    .unwrap();
                assert_eq!(acked, vec![ClaimOutcome::Applied]);
            }
        }));
    }
    for client in clients {
        client.await.expect("a client's calls through PgBouncer");
    }
    schema.drop().await;
}

/// `statement_timeout` reaches the store's statements as `SET LOCAL` in each call's
/// transaction: a call blocked behind a lock is cancelled after it, not left waiting.
#[tokio::test]
async fn the_statement_timeout_holds_through_the_pooler() {
    let bouncer = PgBouncer::start(&database_url(), SERVER_CONNECTIONS);
    let schema = SchemaGuard::new();
    let timeout = Duration::from_millis(300);
    let outbox = open_through(&bouncer, pooled(&schema).statement_timeout(timeout)).await;
    outbox.enqueue(draft("locked", "k", 1)).await.unwrap();

    let mut holder = sqlx::PgConnection::connect(&database_url()).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        pg(&outbox).messages_table()
    )))
    .execute(&mut holder)
    .await
    .unwrap();
    let started = Instant::now();
    let error = tokio::time::timeout(WAIT, outbox.stats(&MessageFilter::default()))
        .await
        .expect("the call returns: its statement timed out")
        .expect_err("the statement waits for the lock longer than its timeout");
    let took = started.elapsed();
    assert!(
        error.to_string().contains("statement timeout"),
        "{error} (after {took:?})"
    );
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    // The setting was local to the call's transaction: the server connection it ran on
    // serves this direct session's default again (no timeout), and the store works.
    assert_eq!(
        outbox.stats(&MessageFilter::default()).await.unwrap()[0].pending,
        1
    );
    schema.drop().await;
}

/// The service writes its business row and the message in one transaction through the
/// pooler; the relay, through the pooler too, delivers what committed, in key order, and
/// never what rolled back.
async fn service_and_relay_through_pgbouncer(listen: bool) {
    let bouncer = PgBouncer::start(&database_url(), SERVER_CONNECTIONS);
    let schema = SchemaGuard::new();
    let lane = if listen { "listening" } else { "polling" };
    let service = open_through(&bouncer, pooled(&schema)).await;
    let relay_config = if listen {
        pooled(&schema).listen_url(database_url())
    } else {
        pooled(&schema)
    };
    let relay_store = open_through(&bouncer, relay_config).await;
    assert_eq!(relay_store.capabilities().listen, listen);
    let mut wakeups = relay_store.subscribe();
    let orders = format!("\"{}\".orders", schema.0);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {orders} (id int8 PRIMARY KEY)"
    )))
    .execute(pg(&service).pool())
    .await
    .unwrap();

    let (handler, mut rx) = reporting();
    // Without LISTEN, the lane's poll is its pickup: 100 ms here, 5 s by default.
    let lane_config = LaneConfig::new(lane, TARGET)
        .concurrency(4)
        .max_poll_interval(Duration::from_millis(if listen { 60_000 } else { 100 }));
    let builder = OutboxRelay::builder(&relay_store).lane(lane_config, handler);
    let relay = builder.start().await.expect("relay through PgBouncer");

    let mut committed = Vec::new();
    for i in 0..12i64 {
        let key = format!("k{}", i % 3);
        let mut tx = pg(&service).pool().begin().await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {orders} (id) VALUES ($1)"
        )))
        .persistent(false)
        .bind(i)
        .execute(&mut *tx)
        .await
        .unwrap();
        let enqueued = service
            .enqueue_in_tx(&mut tx, draft(lane, &key, i))
            .await
            .unwrap();
        if i % 4 == 3 {
            tx.rollback().await.unwrap();
        } else {
            tx.commit().await.unwrap();
            committed.push((key, i, enqueued.message.outbox_id));
        }
    }
    if listen {
        // The commit's NOTIFY reached the relay's store over the direct connection.
        let wakeup = tokio::time::timeout(WAIT, wakeups.recv())
            .await
            .expect("a wake-up over listen_url")
            .unwrap();
        assert_eq!(
            wakeup,
            WakeUp::Lane {
                lane: lane.into(),
                target: TARGET.into()
            }
        );
    }
    let mut got = Vec::new();
    while got.len() < committed.len() {
        got.push(received(&mut rx).await);
    }
    let mut delivered_ids: Vec<Uuid> = got.iter().map(|m| m.outbox_id).collect();
    for key in ["k0", "k1", "k2"] {
        let order: Vec<i64> = got
            .iter()
            .filter(|m| m.ordering_key.as_deref() == Some(key))
            .map(|m| m.payload.to_value().unwrap()["value"].as_i64().unwrap())
            .collect();
        let expected: Vec<i64> = committed
            .iter()
            .filter(|(k, _, _)| k == key)
            .map(|(_, i, _)| *i)
            .collect();
        assert_eq!(order, expected, "key {key} in enqueue order");
    }
    let mut expected_ids: Vec<Uuid> = committed.iter().map(|(_, _, id)| *id).collect();
    delivered_ids.sort();
    expected_ids.sort();
    assert_eq!(
        delivered_ids, expected_ids,
        "exactly the committed messages"
    );
    // The simple query protocol: one message, so a transaction-mode pooler cannot move
    // the connection between a statement's parse and its bind (outside a transaction it
    // may: "unnamed prepared statement does not exist").
    let rows: i64 = sqlx::raw_sql(AssertSqlSafe(format!("SELECT count(*) FROM {orders}")))
        .fetch_one(pg(&service).pool())
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows,
        committed.len() as i64,
        "business rows as the messages"
    );
    relay.shutdown(WAIT).await.unwrap();
    let stats = service
        .stats(&MessageFilter::lane(lane, TARGET))
        .await
        .unwrap();
    assert_eq!(stats[0].delivered, committed.len() as u64, "{stats:?}");
    assert_eq!(stats[0].pending + stats[0].claimed, 0, "{stats:?}");
    schema.drop().await;
}

#[tokio::test]
async fn a_service_and_a_relay_through_pgbouncer_with_listen_url() {
    service_and_relay_through_pgbouncer(true).await;
}

#[tokio::test]
async fn a_service_and_a_relay_through_pgbouncer_polling_without_listen_url() {
    service_and_relay_through_pgbouncer(false).await;
}

/// A relay that dies holding a claim (its runtime dropped: no release, no ack) leaves the
/// message claimed until its lease lapses; a second relay then delivers it again, and the
/// dead relay's late ack is a lost claim. All through the pooler.
#[test]
fn a_lapsed_lease_is_redelivered_through_pgbouncer() {
    let bouncer = PgBouncer::start(&database_url(), SERVER_CONNECTIONS);
    let clock = Arc::new(ManualClock::new(SystemClock.now_millis()));
    let schema = SchemaGuard::new();
    let config = pooled(&schema).clock(clock.clone());
    let lane = LaneConfig::new("lapse", TARGET).lease(Duration::from_secs(30));
    let runtime_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (held, id) = runtime_a.block_on(async {
        let outbox = open_through(&bouncer, config.clone()).await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handler = handler_fn(move |message: OutboxMessage| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(message);
                std::future::pending::<()>().await;
                Ok::<(), DeliveryError>(())
            }
        });
        let relay = OutboxRelay::builder(&outbox)
            .lane(lane.clone().consumer_id("relay-a"), handler)
            .start()
            .await
            .expect("relay a");
        let enqueued = outbox.enqueue(draft("lapse", "k", 1)).await.unwrap();
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
        let outbox = open_through(&bouncer, config).await;
        let row = outbox.get(id).await.unwrap().unwrap();
        assert_eq!(row.status, OutboxStatus::Claimed, "held by the dead relay");
        clock.advance(Duration::from_secs(31));
        let (handler, mut rx) = reporting();
        let builder = OutboxRelay::builder(&outbox).lane(lane.consumer_id("relay-b"), handler);
        let mut events = builder.subscribe();
        let relay = builder.start().await.expect("relay b");
        let again = received(&mut rx).await;
        assert_eq!(again.outbox_id, id);
        assert_eq!(again.attempt_count, 2);
        assert_ne!(again.claim_token, held.claim_token);
        delivered(&mut events, id).await;
        let late = outbox.ack(&[held.claim().unwrap()]).await.unwrap();
        assert_eq!(late, vec![ClaimOutcome::LostClaim]);
        relay.shutdown(WAIT).await.unwrap();
        schema.drop().await;
    });
}

/// A fleet-wide pause, recorded by an operator's outbox through the pooler, stops the
/// relay's claims (it reads the pauses through the pooler too); a resume restarts them.
#[tokio::test]
async fn a_fleet_wide_pause_holds_through_pgbouncer() {
    /// How long the paused lane is watched for a claim: the lane polls every 100 ms, so
    /// twenty chances to claim if the pause did not hold.
    const PAUSED_WINDOW: Duration = Duration::from_secs(2);
    let bouncer = PgBouncer::start(&database_url(), SERVER_CONNECTIONS);
    let schema = SchemaGuard::new();
    let operator = open_through(&bouncer, pooled(&schema)).await;
    let relay_store = open_through(&bouncer, pooled(&schema)).await;
    let (handler, mut rx) = reporting();
    let lane = LaneConfig::new("paused", TARGET).max_poll_interval(Duration::from_millis(100));
    let relay = OutboxRelay::builder(&relay_store)
        .lane(lane, handler)
        .start()
        .await
        .expect("relay");
    let first = operator.enqueue(draft("paused", "k", 0)).await.unwrap();
    assert_eq!(received(&mut rx).await.outbox_id, first.message.outbox_id);

    operator
        .pause_lane(&LanePauseRequest::new("paused", TARGET, "ops").reason("maintenance"))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, async {
        loop {
            let status = relay.status().await.unwrap();
            if status.iter().any(|s| s.fleet_pause.is_some()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the relay sees the pause");
    let held = operator.enqueue(draft("paused", "k", 1)).await.unwrap();
    assert!(
        tokio::time::timeout(PAUSED_WINDOW, rx.recv())
            .await
            .is_err(),
        "nothing is delivered while the lane is paused"
    );
    assert_eq!(
        operator
            .get(held.message.outbox_id)
            .await
            .unwrap()
            .unwrap()
            .status,
        OutboxStatus::Pending
    );

    operator.resume_lane("paused", TARGET).await.unwrap();
    assert_eq!(received(&mut rx).await.outbox_id, held.message.outbox_id);
    relay.shutdown(WAIT).await.unwrap();
    schema.drop().await;
}
