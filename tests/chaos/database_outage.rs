//! A database that goes away under a running relay, and comes back: a relay in this process
//! reaches PostgreSQL through a [`TcpProxy`] the test cuts and restores, while the test
//! enqueues straight to the database.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::relay::{LaneState, RelayEvent, RelayHandle};
use outbox_relay::store::postgres::PostgresOutboxStore;
use outbox_relay::store::WakeUp;
use outbox_relay::{
    DeliveryError, DeliveryHandler, LaneConfig, Outbox, OutboxMessage, OutboxRelay, OutboxStatus,
    RetryPolicy,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::tcp_proxy::{Cut, TcpProxy};
use crate::{
    assert_first_deliveries_in_enqueue_order, counts, direct_store, enqueue, messages,
    postgres_url, wait_until_async, Schema, Sent, DEADLINE,
};

const LANE: &str = "outage";
const TARGET: &str = "projector";
/// The relay's pool gives up on a connection after this long, as the binary's does after
/// its `connect_timeout`. (sqlx's default, 30 s, would hold a lane that long in every store
/// call while the database is away.)
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);
/// The relay's pool size.
const MAX_CONNECTIONS: u32 = 10;
/// The idle lane's poll ceiling: far beyond the 30 s a wake-up may take here, so a lane
/// that delivers within 30 s was woken, not polling.
const IDLE_POLL: Duration = Duration::from_secs(120);
/// How long a woken lane may take to deliver.
const WAKE_DEADLINE: Duration = Duration::from_secs(30);
/// The shortest outage: longer than two pool acquire timeouts, so the pool and the
/// listener have each given up on the database at least once and are retrying when it
/// comes back. (The length of the fault, not a wait for a result.)
const MIN_OUTAGE: Duration = Duration::from_secs(5);

/// A handler that takes a little while, and records every call with its time.
#[derive(Default)]
struct RecordingHandler {
    calls: Mutex<Vec<(Uuid, Instant)>>,
}

impl RecordingHandler {
    fn calls(&self) -> Vec<(Uuid, Instant)> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl DeliveryHandler for RecordingHandler {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        self.calls
            .lock()
            .unwrap()
            .push((message.outbox_id, Instant::now()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

/// Every event of the relay, with when it arrived.
#[derive(Clone, Default)]
struct EventLog {
    events: Arc<Mutex<Vec<(Instant, RelayEvent)>>>,
}

impl EventLog {
    fn collect(mut events: broadcast::Receiver<RelayEvent>) -> Self {
        let log = Self::default();
        let sink = Arc::clone(&log.events);
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => sink.lock().unwrap().push((Instant::now(), event)),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        panic!("the event log lagged by {n}; raise event_capacity")
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        log
    }

    fn count(&self, since: Instant, pred: impl Fn(&RelayEvent) -> bool) -> usize {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|(at, event)| *at >= since && pred(event))
            .count()
    }

    fn last(&self) -> Option<RelayEvent> {
        self.events.lock().unwrap().last().map(|(_, e)| e.clone())
    }
}

/// Cuts `proxy` the way `how` says, keeps the database away for at least [`MIN_OUTAGE`] and
/// until `until` holds, then restores it. Returns how long it was away.
async fn outage(
    proxy: &mut TcpProxy,
    how: Cut,
    until: impl AsyncFnMut() -> Option<()>,
) -> Duration {
    let cut_at = Instant::now();
    proxy.cut(how).await;
    wait_until_async("the outage's condition", DEADLINE, until).await;
    wait_until_async("the outage's length", DEADLINE, async || {
        (cut_at.elapsed() >= MIN_OUTAGE).then_some(())
    })
    .await;
    proxy.restore().await;
    cut_at.elapsed()
}

/// One lane relayed in this process through the proxy, and a store straight to the
/// database for the test's own reads and writes.
struct ProxiedRelay {
    relay: RelayHandle,
    events: EventLog,
    handler: Arc<RecordingHandler>,
    relayed: Option<Arc<PostgresOutboxStore>>,
    proxy: TcpProxy,
    direct: Outbox,
    // Declared last, so dropped last: after every connection into it. Held for its drop.
    _schema: Schema,
}

impl ProxiedRelay {
    async fn start() -> Self {
        let schema = Schema::new();
        let direct = direct_store(&schema).await;
        let upstream_options =
            PgConnectOptions::from_str(&postgres_url()).expect("the test's database URL");
        let upstream = tokio::net::lookup_host((
            upstream_options.get_host().to_owned(),
            upstream_options.get_port(),
        ))
        .await
        .expect("resolve the database host")
        .next()
        .expect("an address for the database host");
        let proxy = TcpProxy::start(upstream).await;
        // Built as the binary builds its store: a pool with an acquire timeout, then the
        // store over it.
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(upstream_options.host("127.0.0.1").port(proxy.addr().port()));
        let relayed = Arc::new(
            PostgresOutboxStore::new(pool, schema.config())
                .await
                .expect("the relay's store, through the proxy"),
        );
        let handler = Arc::new(RecordingHandler::default());
        let lane = LaneConfig::new(LANE, TARGET)
            .consumer_id("chaos-in-process")
            .concurrency(4)
            .lease(Duration::from_secs(10))
            .retry(
                RetryPolicy::new(Duration::from_millis(50), Duration::from_millis(500))
                    .jitter(false),
            )
            .max_poll_interval(IDLE_POLL);
        let builder = OutboxRelay::builder(&Outbox::from_arc(relayed.clone()))
            .lane(lane, Arc::clone(&handler))
            .event_capacity(100_000);
        let events = EventLog::collect(builder.subscribe());
        let relay = builder.start().await.expect("the relay starts");
        Self {
            relay,
            events,
            handler,
            relayed: Some(relayed),
            proxy,
            direct,
            _schema: schema,
        }
    }

    async fn enqueue(&self, range: std::ops::Range<usize>) -> Vec<Sent> {
        enqueue(&self.direct, LANE, TARGET, range, 8).await
    }

    /// The lane is `Running` and was never restarted or crashed.
    async fn assert_running_never_restarted(&self) {
        let status = self.relay.status().await.expect("status");
        assert_eq!(status.len(), 1);
        assert_eq!(
            (status[0].state, status[0].restarts),
            (LaneState::Running, 0),
            "{status:?}"
        );
        let crashes = self.events.count(Instant::now() - DEADLINE * 10, |e| {
            matches!(
                e,
                RelayEvent::LaneCrashed { .. }
                    | RelayEvent::LaneRestarting { .. }
                    | RelayEvent::LaneFailed { .. }
            )
        });
        assert_eq!(
            crashes, 0,
            "the lane crashed or restarted over a store outage"
        );
    }

    /// Waits until the lane sleeps its full poll ceiling: nothing due, nothing claimed.
    async fn wait_idle(&self) {
        wait_until_async("the lane idle, sleeping its poll ceiling", DEADLINE, || async {
            matches!(self.events.last(), Some(RelayEvent::Idle { sleep, .. }) if sleep == IDLE_POLL)
                .then_some(())
        })
        .await;
    }

    /// Waits until `id` is delivered by the relay, at most `timeout` from now.
    async fn wait_delivered(&self, id: Uuid, timeout: Duration) -> Duration {
        let since = Instant::now();
        wait_until_async("the lane to deliver the message", timeout, || async {
            (self.events.count(
                since,
                |e| matches!(e, RelayEvent::Delivered { outbox_id, .. } if *outbox_id == id),
            ) == 1)
                .then_some(())
        })
        .await;
        since.elapsed()
    }

    /// The relay's LISTEN is live: a notification (for a lane nobody relays) reaches the
    /// relay's store.
    async fn assert_listener_hears(&self) {
        let relayed = self.relayed.as_ref().expect("the relay's store");
        let mut wakeups = outbox_relay::store::OutboxBackend::subscribe(relayed.as_ref());
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            enqueue(&self.direct, "probe", TARGET, 0..1, 1).await;
            let heard = tokio::time::timeout(Duration::from_secs(1), async {
                loop {
                    match wakeups.recv().await {
                        Ok(WakeUp::Lane { lane, .. }) if lane == "probe" => return,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => panic!("the store is gone"),
                    }
                }
            })
            .await;
            if heard.is_ok() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no notification reached the relay's store within {DEADLINE:?}"
            );
        }
    }

    /// Shuts the relay down and drops its store; then no connection may remain open
    /// through the proxy. Returns the connections the proxy accepted over the test.
    async fn shutdown_without_leaks(mut self) -> usize {
        assert!(
            self.proxy.live() <= MAX_CONNECTIONS as usize + 1,
            "{} connections through the proxy: more than the pool and the listener",
            self.proxy.live()
        );
        let report = self
            .relay
            .shutdown(Duration::from_secs(10))
            .await
            .expect("shutdown");
        assert_eq!(report.released(), 0, "{report:?}");
        let relayed = self.relayed.take().expect("the relay's store");
        relayed.pool().close().await;
        drop(relayed);
        wait_until_async("every proxied connection closed", DEADLINE, || async {
            (self.proxy.live() == 0).then_some(())
        })
        .await;
        self.proxy.accepted()
    }
}

/// The database goes away (its connections closed, new ones refused) while the lane is
/// busy, and messages are enqueued during the outage. What must hold:
///
/// - during the outage the lane reports `RelayEvent::StoreError`, stays `Running` in
///   `status()` and is never restarted, and nothing enqueued during the outage is delivered;
/// - after the restore, every message ends `delivered` with none `claimed` or `pending`;
///   the handler saw every id; an id it saw twice had its first call before the restore
///   (an ack lost to the cut); per key, the first calls are in enqueue order;
/// - the LISTEN/NOTIFY listener listens again, and an enqueue wakes the idle lane in well
///   under its 120 s poll ceiling;
/// - no connection leaks: no more than the pool and the listener through the proxy, and
///   none once the relay is shut down and its store dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_goes_away_and_comes_back() {
    let started = Instant::now();
    let mut relay = ProxiedRelay::start().await;
    let mut sent = relay.enqueue(0..100).await;
    wait_until_async("30 handler calls", DEADLINE, || async {
        (relay.handler.calls().len() >= 30).then_some(())
    })
    .await;

    let cut_at = Instant::now();
    let mut during = Vec::new();
    let down_for = outage(&mut relay.proxy, Cut::Close, async || {
        if during.is_empty() {
            during = enqueue(&relay.direct, LANE, TARGET, 100..150, 8).await;
        }
        let errors = relay
            .events
            .count(cut_at, |e| matches!(e, RelayEvent::StoreError { .. }));
        (errors >= 2).then_some(())
    })
    .await;
    let restored_at = cut_at + down_for;
    // The outage was real: nothing enqueued during it was delivered before the restore.
    let during_ids: HashSet<Uuid> = during.iter().map(|s| s.id).collect();
    let early = relay
        .handler
        .calls()
        .iter()
        .filter(|(id, at)| during_ids.contains(id) && *at < restored_at)
        .count();
    assert_eq!(early, 0, "delivered while the database was away");
    sent.extend(during);
    relay.assert_running_never_restarted().await;

    wait_until_async(
        "every message delivered after the restore",
        DEADLINE,
        || async {
            let (_, _, delivered, _) = counts(&relay.direct, LANE, TARGET).await;
            (delivered == sent.len() as u64).then_some(())
        },
    )
    .await;
    let recovered_in = restored_at.elapsed();
    assert_eq!(
        counts(&relay.direct, LANE, TARGET).await,
        (0, 0, sent.len() as u64, 0),
        "(pending, claimed, delivered, dead)"
    );
    let calls = relay.handler.calls();
    let seen: HashSet<Uuid> = calls.iter().map(|(id, _)| *id).collect();
    let all: HashSet<Uuid> = sent.iter().map(|s| s.id).collect();
    assert_eq!(seen, all, "the handler saw exactly the enqueued ids");
    let mut first_call: HashMap<Uuid, Instant> = HashMap::new();
    let mut repeated = HashSet::new();
    for (id, at) in &calls {
        if first_call.contains_key(id) {
            repeated.insert(*id);
        } else {
            first_call.insert(*id, *at);
        }
    }
    for id in &repeated {
        assert!(
            first_call[id] < restored_at,
            "{id} was delivered twice, though its first delivery came after the restore"
        );
    }
    let order: Vec<Uuid> = calls.iter().map(|(id, _)| *id).collect();
    assert_first_deliveries_in_enqueue_order(&sent, &order);
    relay.assert_running_never_restarted().await;
    let store_errors = relay
        .events
        .count(cut_at, |e| matches!(e, RelayEvent::StoreError { .. }));

    relay.assert_listener_hears().await;
    relay.wait_idle().await;
    let late = relay.enqueue(150..151).await[0].id;
    let woken_in = relay.wait_delivered(late, WAKE_DEADLINE).await;

    let accepted = relay.shutdown_without_leaks().await;
    eprintln!(
        "busy outage: {down_for:?} down, {store_errors} store errors, {} handler calls for {} \
         messages ({} repeated), all delivered {recovered_in:?} after the restore, idle lane \
         woken in {woken_in:?}, {accepted} connections over the test, test {:?}",
        calls.len(),
        sent.len() + 1,
        repeated.len(),
        started.elapsed()
    );
}

/// The database goes away while the lane is idle, its connections reset (RST, as from a
/// crashed host or a firewall), and a message is enqueued during the outage: its
/// notification is lost with the listener's connection. When the database is back, the
/// listener must listen again and wake the lane, which then delivers the message in well
/// under its 120 s poll ceiling; and later notifications must get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_lost_in_an_outage_still_wakes_the_idle_lane() {
    let started = Instant::now();
    let mut relay = ProxiedRelay::start().await;
    let first = relay.enqueue(0..1).await[0].id;
    relay.wait_delivered(first, DEADLINE).await;
    relay.wait_idle().await;

    let mut lost = None;
    let down_for = outage(&mut relay.proxy, Cut::Reset, async || {
        lost = Some(enqueue(&relay.direct, LANE, TARGET, 1..2, 8).await[0].id);
        Some(())
    })
    .await;
    let lost = lost.expect("enqueued during the outage");
    let (_, _, delivered, _) = counts(&relay.direct, LANE, TARGET).await;
    assert_eq!(delivered, 1, "delivered while the database was away");

    let woken_in = relay.wait_delivered(lost, WAKE_DEADLINE).await;
    relay.assert_running_never_restarted().await;
    relay.assert_listener_hears().await;
    relay.wait_idle().await;
    let late = relay.enqueue(2..3).await[0].id;
    let late_in = relay.wait_delivered(late, WAKE_DEADLINE).await;
    let rows = messages(&relay.direct, LANE, TARGET, None).await;
    assert!(
        rows.iter().all(|m| m.status == OutboxStatus::Delivered),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 3);

    let accepted = relay.shutdown_without_leaks().await;
    eprintln!(
        "idle outage: {down_for:?} down (reset), the lost notification's message delivered \
         {woken_in:?} after the restore, the next one {late_in:?} after its enqueue, \
         {accepted} connections over the test, test {:?}",
        started.elapsed()
    );
}
