#![cfg(all(feature = "http", feature = "sqlite"))]
//! The HTTP listener under floods, with a real relay on a SQLite file: under a `/readyz`
//! flood the readiness check reaches the store at most about once a second whatever the
//! request rate, counted by a store hook, and the lane's claims go on (claim latency with
//! and without the flood is printed: a measurement, never asserted, the machine is
//! shared); under a flood of reads whose clients hang up, the API's store calls stay
//! within their bound, each ends, and the lane beside them loses no lease.

#[path = "support/faulty_store.rs"]
mod faulty_store;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_relay::config::ListenerConfig;
use outbox_relay::http::health::DEFAULT_READINESS_TIMEOUT;
use outbox_relay::http::{Readiness, RelayReadiness, RouterConfig};
use outbox_relay::message::OutboxMessageDraft;
use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{StoreCall, StoreHook, StoreOp};
use outbox_relay::{handler_fn, LaneConfig, Outbox, OutboxRelay, RelayHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Generous: other builds share the machine.
const WAIT: Duration = Duration::from_secs(120);
/// Messages delivered in each phase.
const MESSAGES: usize = 400;
/// Concurrent `/readyz` clients during the flood.
const FLOODERS: usize = 8;

/// Counts `get` (the readiness check's store call) and times claims: a hook on the outbox.
#[derive(Debug, Default)]
struct Counted {
    gets: AtomicU64,
    claims: Mutex<Vec<Duration>>,
}

impl StoreHook for Counted {
    fn finished(&self, call: &StoreCall<'_>) {
        match call.op {
            StoreOp::Get => {
                self.gets.fetch_add(1, Ordering::SeqCst);
            }
            StoreOp::Claim | StoreOp::AckAndClaim if !call.outcome.is_err() => {
                self.claims.lock().unwrap().push(call.duration);
            }
            _ => {}
        }
    }
}

/// A listener serving the router on a runtime and a thread of its own, as the binary's
/// exporter runs it.
struct Side {
    addr: std::net::SocketAddr,
    handle: tokio::runtime::Handle,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Side {
    fn serve(routes: RouterConfig, limits: ListenerConfig) -> Self {
        let side = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the listener's runtime");
        let handle = side.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            side.block_on(async {
                let _ = stopped.await;
            })
        });
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
        std_listener.set_nonblocking(true).expect("non-blocking");
        let addr = std_listener.local_addr().expect("its address");
        handle.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("register");
            outbox_relay::http::listener::serve(
                listener,
                outbox_relay::http::router(routes),
                limits,
            )
            .await;
        });
        Self {
            addr,
            handle,
            stop,
            thread,
        }
    }

    /// Stops the runtime and joins its thread.
    fn stop(self) {
        let _ = self.stop.send(());
        self.thread.join().expect("the listener's thread");
    }
}

/// One `/readyz` request on a connection of its own: the status code.
async fn readyz(addr: std::net::SocketAddr) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the answer");
    response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"))
}

/// Enqueues [`MESSAGES`] and waits until the handler has seen them all: how long it took.
async fn deliver_all(store: &Outbox, delivered: &mut mpsc::UnboundedReceiver<()>) -> Duration {
    let started = Instant::now();
    for n in 0..MESSAGES {
        store
            .enqueue(
                OutboxMessageDraft::new("orders", "audit", serde_json::json!({ "n": n }))
                    .expect("a draft"),
            )
            .await
            .expect("enqueue");
    }
    for seen in 0..MESSAGES {
        tokio::time::timeout(WAIT, delivered.recv())
            .await
            .unwrap_or_else(|_| panic!("{seen} of {MESSAGES} delivered within {WAIT:?}"))
            .expect("the handler is alive");
    }
    started.elapsed()
}

/// The claim latencies recorded since the last call: (count, p50, p99).
fn take_claim_latencies(store: &Counted) -> (usize, Duration, Duration) {
    let mut latencies = std::mem::take(&mut *store.claims.lock().unwrap());
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    (latencies.len(), at(0.5), at(0.99))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readyz_flood_reaches_the_store_at_most_about_once_a_second() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = SqliteOutboxStore::open(dir.path().join("outbox.db"))
        .await
        .expect("open SQLite");
    let counted = Arc::new(Counted::default());
    let store = Outbox::new(sqlite).with_hook(counted.clone());
    let (seen, mut delivered) = mpsc::unbounded_channel();
    let relay: RelayHandle = OutboxRelay::builder(&store)
        .lane(
            LaneConfig::new("orders", "audit"),
            handler_fn(move |_message| {
                let seen = seen.clone();
                async move {
                    let _ = seen.send(());
                    Ok(())
                }
            }),
        )
        .start()
        .await
        .expect("start the relay");
    let relay = Arc::new(relay);

    let readiness = Readiness::new();
    readiness.set(
        RelayReadiness::new(store.clone(), relay.clone()),
        tokio::runtime::Handle::current(),
        DEFAULT_READINESS_TIMEOUT,
    );
    // The listener and the flood run on a runtime of their own, on a thread of their own,
    // as the binary's exporter does: what is left between the two phases is the store.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let side = Side::serve(
        RouterConfig::new()
            .metrics(recorder.handle())
            .readiness(readiness),
        ListenerConfig::default().max_connections(FLOODERS + 8),
    );
    let (addr, side_handle) = (side.addr, side.handle.clone());
    assert_eq!(readyz(addr).await, 200, "the relay is ready");

    // Without the flood.
    take_claim_latencies(&counted);
    let quiet = deliver_all(&store, &mut delivered).await;
    let (quiet_claims, quiet_p50, quiet_p99) = take_claim_latencies(&counted);

    // With it: FLOODERS clients asking /readyz back to back for as long as the phase runs.
    let flooding = Arc::new(AtomicBool::new(true));
    let requests = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|_| {
            let (flooding, requests) = (flooding.clone(), requests.clone());
            side_handle.spawn(async move {
                while flooding.load(Ordering::SeqCst) {
                    assert_eq!(readyz(addr).await, 200);
                    requests.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let started = Instant::now();
    let gets_before = counted.gets.load(Ordering::SeqCst);
    let flooded = deliver_all(&store, &mut delivered).await;
    // At least two whole intervals of flood, so the count below means something.
    while started.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    flooding.store(false, Ordering::SeqCst);
    for flooder in flooders {
        flooder.await.expect("a flooder");
    }
    let span = started.elapsed();
    let gets = counted.gets.load(Ordering::SeqCst) - gets_before;
    let requests = requests.load(Ordering::SeqCst);
    let (flood_claims, flood_p50, flood_p99) = take_claim_latencies(&counted);
    println!(
        "/readyz flood: {requests} requests over {span:?} reached the store {gets} times\n\
         {MESSAGES} messages without the flood in {quiet:?}: {quiet_claims} claims, p50 {quiet_p50:?}, p99 {quiet_p99:?}\n\
         {MESSAGES} messages during the flood in {flooded:?}: {flood_claims} claims, p50 {flood_p50:?}, p99 {flood_p99:?}"
    );
    assert!(
        requests > gets * 10,
        "the flood was too thin to show anything: {requests} requests, {gets} store calls over {span:?}"
    );
    // One check per interval, the interval counted from the end of the last check: over
    // `span`, at most span/1s + 1 checks.
    let allowed = span.as_secs() + 1;
    assert!(
        gets <= allowed,
        "{gets} store calls for {requests} /readyz requests over {span:?} (at most {allowed})"
    );
    relay
        .shutdown(Duration::from_secs(30))
        .await
        .expect("shutdown");
    side.stop();
}

/// The control token of [`abandoned_reads_are_bounded_and_cancelled_and_no_lease_lapses`].
const TOKEN: &str = "0123456789abcdef-flood-token";
/// Reads sent by the flood, each on a connection closed right after it is sent.
const ABANDONED_READS: usize = 1_500;
/// Flood connections open at once.
const FLOOD_CONNECTIONS: usize = 48;
/// Messages the lane drains meanwhile.
const DRAINED: usize = 2_000;

/// Sends a slow read of messages (a rare error text over the lane's pending rows: each call
/// reads its whole scan budget) and closes the connection at once.
async fn abandon_a_read(addr: std::net::SocketAddr) {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let request = format!(
        "GET /api/v1/messages?lane=history&target=archive&status=pending&error=zzz&limit=500 HTTP/1.1\r\n\
         Host: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    let _ = stream.write_all(request.as_bytes()).await;
    // Dropped: the client hung up.
}

/// The flood, beside a lane draining with short leases: 1,500 slow reads of
/// messages whose clients hang up at once. The API's store calls in flight never pass
/// their bound, every abandoned one ends, and no lease of the lane lapses
/// (`outbox_lease_expired_total` counts the `LeaseExpired` events counted here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_reads_are_bounded_and_cancelled_and_no_lease_lapses() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = SqliteOutboxStore::open(dir.path().join("outbox.db"))
        .await
        .expect("open SQLite");
    let watched = Arc::new(faulty_store::FaultyStore::new(Outbox::new(sqlite)));
    let store = Outbox::from_arc(watched.clone());
    // 30 k rows in a lane no relay runs: what the slow reads scan.
    for batch in 0..6 {
        let drafts = (0..5_000)
            .map(|n| {
                OutboxMessageDraft::new(
                    "history",
                    "archive",
                    serde_json::json!({ "n": batch * 5_000 + n }),
                )
                .expect("a draft")
            })
            .collect();
        store
            .enqueue_many(drafts)
            .await
            .expect("enqueue the history");
    }
    for n in 0..DRAINED {
        store
            .enqueue(
                OutboxMessageDraft::new("orders", "billing", serde_json::json!({ "n": n }))
                    .expect("a draft"),
            )
            .await
            .expect("enqueue");
    }
    let (seen, mut delivered) = mpsc::unbounded_channel();
    let builder = OutboxRelay::builder(&store).lane(
        LaneConfig::new("orders", "billing")
            .concurrency(4)
            .lease(Duration::from_secs(2))
            .delivery_timeout(Duration::from_millis(1_500)),
        handler_fn(move |_message| {
            let seen = seen.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _ = seen.send(());
                Ok(())
            }
        }),
    );
    let mut events = builder.subscribe();
    let relay = Arc::new(builder.start().await.expect("start the relay"));
    let lapses = tokio::spawn(async move {
        let mut lapsed = 0;
        loop {
            match events.recv().await {
                Ok(outbox_relay::relay::RelayEvent::LeaseExpired { outbox_ids, .. }) => {
                    lapsed += outbox_ids.len()
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    panic!("the event watcher missed {missed} events")
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return lapsed,
            }
        }
    });
    let slot = outbox_relay::http::RelaySlot::new();
    slot.set(
        relay.clone(),
        store.clone(),
        tokio::runtime::Handle::current(),
    );
    // The listener on a runtime and thread of its own, as the binary's exporter runs it.
    let side = Side::serve(
        RouterConfig::new()
            .relay(slot)
            .token(outbox_relay::config::ControlToken::new(TOKEN).expect("a token")),
        ListenerConfig::default(),
    );
    let (addr, side_handle) = (side.addr, side.handle.clone());

    let started = Instant::now();
    let flood = side_handle.spawn(async move {
        let gate = Arc::new(tokio::sync::Semaphore::new(FLOOD_CONNECTIONS));
        let mut sent = Vec::with_capacity(ABANDONED_READS);
        for _ in 0..ABANDONED_READS {
            let permit = gate.clone().acquire_owned().await.expect("the gate");
            sent.push(tokio::spawn(async move {
                abandon_a_read(addr).await;
                drop(permit);
            }));
        }
        for read in sent {
            read.await.expect("a read was sent");
        }
    });
    for seen in 0..DRAINED {
        tokio::time::timeout(WAIT, delivered.recv())
            .await
            .unwrap_or_else(|_| panic!("{seen} of {DRAINED} delivered within {WAIT:?}"))
            .expect("the handler is alive");
    }
    let drained_in = started.elapsed();
    flood.await.expect("the flood");
    // Every abandoned read ends: none is left running.
    let lists = &watched.lists;
    tokio::time::timeout(WAIT, async {
        loop {
            let changed = lists.changed.notified();
            if lists.now.load(Ordering::SeqCst) == 0 {
                return;
            }
            changed.await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{} reads still running {WAIT:?} after the flood",
            lists.now.load(Ordering::SeqCst)
        )
    });
    relay
        .shutdown(Duration::from_secs(30))
        .await
        .expect("shutdown");
    drop(relay);
    side.stop();
    let lapsed = lapses.await.expect("the event watcher");
    let (most, begun, ended) = (
        lists.most.load(Ordering::SeqCst),
        lists.started.load(Ordering::SeqCst),
        lists.ended.load(Ordering::SeqCst),
    );
    println!(
        "{ABANDONED_READS} abandoned reads beside a {DRAINED}-message drain ({drained_in:?}): \
         {begun} reached the store, at most {most} at once (bound {}), {ended} ended; \
         {lapsed} leases lapsed",
        outbox_relay::config::DEFAULT_API_STORE_CALLS
    );
    assert!(
        most <= outbox_relay::config::DEFAULT_API_STORE_CALLS,
        "{most} reads ran at once, past the bound {}",
        outbox_relay::config::DEFAULT_API_STORE_CALLS
    );
    assert_eq!(begun, ended, "every read that started ended");
    assert_eq!(lapsed, 0, "the lane lost leases to the flood");
}
