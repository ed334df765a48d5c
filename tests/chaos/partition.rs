//! A relay cut off from the database while another keeps it: two `outbox-relay run`
//! processes on one schema and lane deliver keyed messages to an HTTP receiver in this
//! test. Relay `a` reaches PostgreSQL through a [`FaultProxy`] that, three times, first
//! blackholes its connections (bytes stop both ways, the sockets stay open, as on a
//! partitioned network) and then cuts them (closed, and new ones refused) until its
//! claims have lapsed and relay `b` has taken them over. Relay `b` connects directly.
//!
//! The receiver holds every request a few milliseconds and checks, as requests arrive,
//! that no two requests of one ordering key are ever in flight at once.

use outbox_relay::Outbox;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_relay::OutboxStatus;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use uuid::Uuid;

use crate::fleet::RelayProcess;
use crate::{
    assert_first_deliveries_in_enqueue_order, counts, direct_store, messages, postgres_url,
    wait_until_async, with_application_name, Schema, Sent, DEADLINE,
};

const LANE: &str = "partition";
const TARGET: &str = "receiver";
/// The relays' lease. Each fault lasts longer than it.
const LEASE: Duration = Duration::from_secs(2);
/// How long the receiver holds each request: long enough that two requests of one key
/// sent at once would overlap at the receiver.
const HOLD: Duration = Duration::from_millis(5);
/// The blackhole's length, before the connections are cut.
const BLACKHOLE: Duration = Duration::from_millis(800);
const CUTS: usize = 3;
const WAVE: usize = 120;
const KEYS: usize = 12;

// ---- The fault-injecting proxy -----------------------------------------------------------

/// What the proxy does with the bytes of relay `a`'s connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Forwards both ways.
    None,
    /// Forwards nothing, closes nothing: open connections and new ones hang.
    Blackhole,
    /// Closes every connection, and every new one at once.
    Cut,
}

/// A TCP proxy to PostgreSQL whose [`Fault`] the test sets.
struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (fault, _) = watch::channel(Fault::None);
        let faults = fault.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let mut fault = faults.subscribe();
                tokio::spawn(async move {
                    // A connection made during a blackhole hangs until it ends.
                    let Ok(now) = fault.wait_for(|f| *f != Fault::Blackhole).await.map(|f| *f)
                    else {
                        return;
                    };
                    if now == Fault::Cut {
                        return; // dropped: closed at once
                    }
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    forward(client, server, fault).await;
                });
            }
        });
        Self { addr, fault, task }
    }

    fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.fault.send_replace(Fault::Cut);
    }
}

/// Copies bytes both ways while the fault is `None`, stops copying during a blackhole, and
/// returns (dropping, so closing, both sockets) at a cut or when either side closes.
async fn forward(mut client: TcpStream, mut server: TcpStream, mut fault: watch::Receiver<Fault>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        let now = *fault.borrow_and_update();
        match now {
            Fault::Cut => return,
            Fault::Blackhole => {
                if fault.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Fault::None => {}
        }
        tokio::select! {
            read = client.read(&mut up) => match read {
                Ok(n) if n > 0 => {
                    if server.write_all(&up[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            read = server.read(&mut down) => match read {
                Ok(n) if n > 0 => {
                    if client.write_all(&down[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            changed = fault.changed() => if changed.is_err() { return },
        }
    }
}

// ---- The receiver --------------------------------------------------------------------------

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// Every request's message id, in arrival order, repeats included.
    arrivals: Vec<Uuid>,
    /// Requests in flight per ordering key.
    in_flight: HashMap<String, usize>,
    /// Each time a request arrived while another of its key was in flight.
    overlaps: Vec<String>,
}

/// An HTTP/1.1 server that answers every POST with 200 after [`HOLD`], recording it.
struct Receiver {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let addr = listener.local_addr().expect("the receiver's address");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve(conn, Arc::clone(&shared)));
            }
        });
        Self { addr, seen, task }
    }

    fn arrivals(&self) -> Vec<Uuid> {
        self.seen.lock().unwrap().arrivals.clone()
    }

    fn overlaps(&self) -> Vec<String> {
        self.seen.lock().unwrap().overlaps.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One keep-alive connection: request after request, each read whole (headers, then
/// `content-length` bytes of body) and answered.
async fn serve(mut conn: TcpStream, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match conn.read(&mut chunk).await {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match conn.read(&mut chunk).await {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        }
        let body: Vec<u8> = buf[head_end..head_end + length].to_vec();
        buf.drain(..head_end + length);
        let id: Uuid = header("webhook-id")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a request without a webhook-id:\n{head}"));
        let payload: serde_json::Value = serde_json::from_slice(&body).expect("a JSON body");
        let key = payload["key"].as_str().expect("a key").to_owned();
        {
            let mut seen = seen.lock().unwrap();
            seen.arrivals.push(id);
            let running = seen.in_flight.entry(key.clone()).or_default();
            *running += 1;
            let running = *running;
            if running > 1 {
                seen.overlaps
                    .push(format!("{key}: {id} arrived with {running} in flight"));
            }
        }
        // The target's work (load shape, not synchronisation).
        tokio::time::sleep(HOLD).await;
        {
            let mut seen = seen.lock().unwrap();
            if let Some(running) = seen.in_flight.get_mut(&key) {
                *running -= 1;
            }
        }
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        if conn.write_all(answer).await.is_err() {
            return;
        }
    }
}

// ---- The relays ----------------------------------------------------------------------------

/// Writes `config` for relay `name` into `dir` and starts it (its stdout unread: it
/// delivers to the test's receiver).
fn start_relay(name: &'static str, dir: &Path, config: &str) -> RelayProcess {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).expect("write the config");
    RelayProcess::start(name, dir, &path, Stdio::null())
}

fn relay_config(
    database_url: &str,
    schema: &str,
    consumer_id: &str,
    receiver: SocketAddr,
) -> String {
    // Lease 2 s, extended at 1.3 s; a delivery takes ~5 ms, far inside the 1 s timeout. A
    // short connect timeout and store backoff bring relay a back soon after each fault.
    format!(
        r#"
database_url = "{database_url}"
schema = "{schema}"
metrics_listen = false
connect_timeout = "1s"
shutdown_timeout = "10s"
consumer_id = "{consumer_id}"

[[lanes]]
lane = "{LANE}"
target = "{TARGET}"
concurrency = 4
prefetch = 4
key_run = 4
lease = "2s"
lease_extend_margin = "700ms"
delivery_timeout = "1s"
retry_base = "50ms"
retry_max = "500ms"
max_poll_interval = "1s"
store_backoff = "50ms"
store_backoff_max = "500ms"
sink = {{ kind = "webhook", url = "http://{receiver}/hook", timeout = "1s" }}
"#
    )
}

/// Enqueues messages `range`, key `k<n % KEYS>`, the key also in the payload.
async fn enqueue_wave(store: &Outbox, range: std::ops::Range<usize>) -> Vec<Sent> {
    let drafts = range
        .map(|n| {
            let key = format!("k{}", n % KEYS);
            outbox_relay::OutboxMessageDraft::new(LANE, TARGET, json!({ "key": key, "n": n }))
                .expect("a valid draft")
                .with_ordering_key(key)
        })
        .collect();
    store
        .enqueue_many(drafts)
        .await
        .expect("enqueue")
        .into_iter()
        .map(|e| Sent {
            id: e.message.outbox_id,
            key: e.message.ordering_key.expect("a key"),
            seq: e.message.seq,
        })
        .collect()
}

/// What one fault did: the claims relay `a` held when it was cut off, and how long the
/// fault lasted.
#[derive(Debug)]
struct FaultRecord {
    held: HashSet<Uuid>,
    lasted: Duration,
}

/// Two relays on one PostgreSQL schema, relay `a` cut off from it three times for longer
/// than the lease while relay `b` keeps it. What must hold, at a real HTTP receiver:
///
/// - no two requests of one ordering key are ever in flight at once;
/// - for each key, first arrivals come in enqueue order, and every message arrives (the
///   database ends with every row delivered, none pending, claimed or dead);
/// - duplicates (arrivals beyond the first) are at most the claims relay `a` held at the
///   cuts, summed: only a claim held across a cut may be delivered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_cut_off_from_the_database_keeps_per_key_order_and_loses_nothing() {
    let started = Instant::now();
    let schema = Schema::new();
    let store = direct_store(&schema).await;
    let receiver = Receiver::start().await;
    let upstream: SocketAddr = {
        let url = url::Url::parse(&postgres_url()).expect("a PostgreSQL URL");
        let host = url.host_str().unwrap_or("127.0.0.1").to_owned();
        let port = url.port().unwrap_or(5432);
        let mut addrs = tokio::net::lookup_host((host, port))
            .await
            .expect("resolve PostgreSQL");
        addrs.next().expect("an address")
    };
    let proxy = FaultProxy::start(upstream).await;
    let a_app = format!("{}_a", schema.name);
    let proxied = {
        let mut url = url::Url::parse(&postgres_url()).expect("a PostgreSQL URL");
        url.set_ip_host(proxy.addr.ip()).expect("an IP host");
        url.set_port(Some(proxy.addr.port())).expect("a port");
        with_application_name(url.as_str(), &a_app)
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let a = start_relay(
        "a",
        dir.path(),
        &relay_config(&proxied, &schema.name, "a", receiver.addr),
    );
    let b = start_relay(
        "b",
        dir.path(),
        &relay_config(&postgres_url(), &schema.name, "b", receiver.addr),
    );

    let held_by_a = async || -> HashSet<Uuid> {
        messages(&store, LANE, TARGET, Some(OutboxStatus::Claimed))
            .await
            .into_iter()
            .filter(|m| m.claimed_by.as_deref() == Some("a"))
            .map(|m| m.outbox_id)
            .collect()
    };
    let mut sent = Vec::new();
    let mut faults = Vec::new();
    let mut next = 0;
    for cut in 0..CUTS {
        // Both relays at work on a wave, and `a` holding claims when the fault lands: a
        // cut that finds `a` holding nothing tests no takeover, so the fault is lifted and
        // tried again on a fresh wave. After a cut, `a` may still be backing off or
        // reconnecting while `b` drains the whole wave: then another wave goes in, until
        // `a` is seen holding claims.
        let started = Instant::now();
        let (fault_at, held) = loop {
            loop {
                let wave = enqueue_wave(&store, next..next + WAVE).await;
                next += WAVE;
                let wave_ids: HashSet<Uuid> = wave.iter().map(|s| s.id).collect();
                sent.extend(wave);
                let drained = wait_until_async(
                    &format!(
                        "fault {cut}: deliveries of the wave, and claims held by a or none left"
                    ),
                    DEADLINE.saturating_sub(started.elapsed()),
                    async || {
                        a.assert_alive();
                        b.assert_alive();
                        let arrived = receiver
                            .arrivals()
                            .iter()
                            .filter(|id| wave_ids.contains(id))
                            .collect::<HashSet<_>>()
                            .len();
                        if arrived >= WAVE / 8 && !held_by_a().await.is_empty() {
                            Some(false)
                        } else {
                            (arrived == WAVE).then_some(true)
                        }
                    },
                )
                .await;
                if !drained {
                    break;
                }
            }

            let fault_at = Instant::now();
            proxy.set(Fault::Blackhole);
            // Whatever the server had already received from `a` has finished: its sessions
            // wait for bytes that do not come. What `a` holds now is what it holds at the cut.
            wait_until_async("a's sessions to go quiet", DEADLINE, async || {
                let active: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE application_name = $1 AND state = 'active'",
                )
                .bind(&a_app)
                .fetch_one(crate::pg(&store).pool())
                .await
                .expect("count a's active sessions");
                (active == 0).then_some(())
            })
            .await;
            let held = held_by_a().await;
            if !held.is_empty() {
                break (fault_at, held);
            }
            assert!(
                started.elapsed() < DEADLINE,
                "fault {cut}: relay a held no claim at any cut for {DEADLINE:?}"
            );
            proxy.set(Fault::None);
        };
        // The blackhole's length (the fault's shape, not a wait for a result).
        wait_until_async("the blackhole's length", DEADLINE, async || {
            (fault_at.elapsed() >= BLACKHOLE).then_some(())
        })
        .await;
        proxy.set(Fault::Cut);
        // Down until `a`'s claims lapsed (the fault outlasts the lease) and `b` took every
        // one of them over.
        wait_until_async("b to take over a's claims", DEADLINE, async || {
            b.assert_alive();
            let still = held_by_a().await;
            (fault_at.elapsed() > LEASE && still.is_empty()).then_some(())
        })
        .await;
        proxy.set(Fault::None);
        faults.push(FaultRecord {
            held,
            lasted: fault_at.elapsed(),
        });
    }

    let total = sent.len() as u64;
    wait_until_async("every message delivered", DEADLINE, async || {
        a.assert_alive();
        b.assert_alive();
        let (_, _, delivered, _) = counts(&store, LANE, TARGET).await;
        (delivered == total).then_some(())
    })
    .await;
    assert_eq!(
        counts(&store, LANE, TARGET).await,
        (0, 0, total, 0),
        "(pending, claimed, delivered, dead)"
    );
    // The wait for each exit blocks: off the runtime's workers, which serve the receiver
    // the relays drain their deliveries to.
    let exits = tokio::task::block_in_place(|| [a.sigterm(), b.sigterm()]);
    assert!(
        exits.iter().all(|e| e.success()),
        "{exits:?}\n{}\n{}",
        a.stderr(),
        b.stderr()
    );

    let overlaps = receiver.overlaps();
    assert!(
        overlaps.is_empty(),
        "two requests of one key in flight at once: {overlaps:?}"
    );
    let arrivals = receiver.arrivals();
    assert_first_deliveries_in_enqueue_order(&sent, &arrivals);
    let distinct: HashSet<Uuid> = arrivals.iter().copied().collect();
    assert_eq!(distinct.len(), sent.len(), "every message arrived");
    let duplicates = arrivals.len() - distinct.len();
    let bound: usize = faults.iter().map(|f| f.held.len()).sum();
    let mut twice: HashMap<Uuid, usize> = HashMap::new();
    for id in &arrivals {
        *twice.entry(*id).or_default() += 1;
    }
    let held_any: HashSet<Uuid> = faults.iter().flat_map(|f| f.held.iter().copied()).collect();
    for (id, n) in &twice {
        if *n > 1 {
            assert!(
                held_any.contains(id),
                "{id} arrived {n} times, though a held no claim on it at a cut"
            );
        }
    }
    assert!(
        faults.iter().all(|f| !f.held.is_empty()),
        "a fault found relay a holding no claim, so b took nothing over: {faults:?}"
    );
    assert!(
        duplicates <= bound,
        "{duplicates} duplicates, more than the {bound} claims a held at the cuts"
    );
    let a_log = a.stderr();
    assert!(
        a_log.contains("store call failed"),
        "relay a never saw the database go away:\n{a_log}"
    );
    eprintln!(
        "partition: {} messages, {} arrivals, {duplicates} duplicates (bound {bound}), \
         faults {:?}, test {:?}",
        sent.len(),
        arrivals.len(),
        faults
            .iter()
            .map(|f| (f.held.len(), f.lasted))
            .collect::<Vec<_>>(),
        started.elapsed()
    );
    drop(proxy);
}
