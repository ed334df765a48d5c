//! Idle pickup: one message at a time on an idle lane, timed from the enqueue's commit
//! returning to the handler starting, with every store call the relay makes counted.
//!
//! Four paths, each on a lane with `hand_off` on: the hand-off (the enqueue goes through the
//! store object the relay runs on, as a service with an embedded relay enqueues), the
//! classic path (through a second store on its own pool, as another process would: NOTIFY,
//! then a claim), and the classic path with both stores through a private PgBouncer in
//! transaction mode (`Pooler::Transaction`): once with the relay listening over a direct
//! `listen_url`, once without, where the lane's poll ([`POOLED_POLL`]) is the pickup.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::store::postgres::{Pooler, PostgresConfig, PostgresOutboxStore};
use outbox_relay::{
    DeliveryError, DeliveryHandler, Outbox, OutboxMessage, OutboxRelay, RelayEvent,
};
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use crate::drain::lane_config;
use crate::metered::{metered, Meter, Op};
use crate::pgbouncer_process::{self, PgBouncer};
use crate::stores::{cycle_function, draft, reopen, BenchStore, Location};

const LANE: &str = "pickup";
const CONCURRENCY: usize = 16;
/// After each delivery the lane gets this long to settle back to idle; whatever it does
/// meanwhile counts against that message.
const SETTLE: Duration = Duration::from_millis(20);
const WAIT: Duration = Duration::from_secs(30);
/// The lane's `max_poll_interval` on the PgBouncer path without `listen_url`: with no
/// wake-up, a message waits for the next poll, on average half of it.
pub const POOLED_POLL: Duration = Duration::from_millis(100);
/// Server connections of the benchmark's PgBouncer: as many as the two stores need at once.
const BOUNCER_SERVER_CONNECTIONS: u32 = 4;

/// Which way the enqueue reaches the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Through the relay's own store object: handed off.
    HandOff,
    /// Through a second store on its own pool: NOTIFY and a claim.
    Classic,
    /// Classic, both stores through PgBouncer in transaction mode; the relay listens over
    /// a direct `listen_url`.
    PooledListen,
    /// Classic, both stores through PgBouncer in transaction mode; no `listen_url`, so the
    /// lane polls every [`POOLED_POLL`].
    PooledPoll,
}

impl Path {
    pub const ALL: [Path; 4] = [
        Path::HandOff,
        Path::Classic,
        Path::PooledListen,
        Path::PooledPoll,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Path::HandOff => "hand-off (same store object)",
            Path::Classic => "classic (another store, NOTIFY + claim)",
            Path::PooledListen => "PgBouncer (transaction mode), LISTEN over listen_url",
            Path::PooledPoll => "PgBouncer (transaction mode), no listen_url: 100 ms poll",
        }
    }

    /// Whether the stores go through PgBouncer.
    pub fn pooled(self) -> bool {
        matches!(self, Path::PooledListen | Path::PooledPoll)
    }
}

/// A store on the benchmark's outbox through `bouncer` in transaction mode, listening over
/// `listen_url` when given.
async fn open_pooled(
    bouncer: &PgBouncer,
    location: &Location,
    listen_url: Option<&str>,
) -> Result<Outbox, String> {
    let Location::Postgres { url, schema } = location else {
        return Err("PgBouncer paths need PostgreSQL".to_owned());
    };
    let mut config = PostgresConfig::default()
        .schema(schema)
        .cycle_function(cycle_function())
        .pooler(Pooler::Transaction);
    if let Some(listen_url) = listen_url {
        config = config.listen_url(listen_url);
    }
    let pooled_url = bouncer.url_like(url);
    PostgresOutboxStore::connect_with(&pooled_url, config)
        .await
        .map(Outbox::new)
        .map_err(|e| {
            format!(
                "PostgreSQL through PgBouncer {pooled_url}: {e}\n{}",
                bouncer.log()
            )
        })
}

#[derive(Debug, Clone)]
pub struct Pickup {
    /// How the messages were enqueued.
    pub path: Path,
    /// Commit-to-handler latencies in ms, sorted; negative when the handler started before
    /// the enqueue call returned.
    pub latencies_ms: Vec<f64>,
    /// Store calls per picked-up message, by operation (only those made).
    pub calls_per_message: Vec<(Op, f64)>,
    /// The p50 of the relay's plain claim calls (as the store decorator timed them), so the
    /// rest of the pickup (wake-up, actor hops) can be told apart from the claim.
    pub claim_p50_ms: Option<f64>,
}

impl Pickup {
    pub fn percentile(&self, q: f64) -> Option<f64> {
        let d = &self.latencies_ms;
        (!d.is_empty()).then(|| d[((d.len() - 1) as f64 * q).round() as usize])
    }

    pub fn statements_per_message(&self) -> f64 {
        self.calls_per_message.iter().map(|(_, n)| n).sum()
    }
}

#[derive(Debug)]
struct Started(mpsc::UnboundedSender<(Uuid, Instant)>);

#[async_trait]
impl DeliveryHandler for Started {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let _ = self.0.send((message.outbox_id, Instant::now()));
        Ok(())
    }
}

pub async fn run(bench: &BenchStore, messages: usize, path: Path) -> Result<Pickup, String> {
    // Dropped (killed) when this run ends.
    let bouncer = if path.pooled() {
        let binary = pgbouncer_process::binary_path();
        if !binary.is_file() {
            return Err(format!(
                "PgBouncer {} is missing (apt-get install pgbouncer, or set PGBOUNCER)",
                binary.display()
            ));
        }
        let Location::Postgres { url, .. } = &bench.location else {
            return Err("PgBouncer paths need PostgreSQL".to_owned());
        };
        let url = url.clone();
        let bouncer =
            tokio::task::spawn_blocking(move || PgBouncer::start(&url, BOUNCER_SERVER_CONNECTIONS))
                .await
                .map_err(|e| format!("start PgBouncer: {e}"))?;
        Some(bouncer)
    } else {
        None
    };
    let (relay_store, enqueuer): (Outbox, Outbox) = match (path, &bouncer) {
        (Path::HandOff, _) => (bench.store.clone(), bench.store.clone()),
        (Path::Classic, _) => (bench.store.clone(), reopen(&bench.location).await?),
        (Path::PooledListen | Path::PooledPoll, Some(bouncer)) => {
            let direct = match (&bench.location, path) {
                (Location::Postgres { url, .. }, Path::PooledListen) => Some(url.as_str()),
                _ => None,
            };
            (
                open_pooled(bouncer, &bench.location, direct).await?,
                open_pooled(bouncer, &bench.location, None).await?,
            )
        }
        (Path::PooledListen | Path::PooledPoll, None) => {
            return Err("no PgBouncer for a pooled path".to_owned())
        }
    };
    let (metered, meter) = metered(&relay_store);
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let mut lane = lane_config(LANE, CONCURRENCY).hand_off(true);
    if path == Path::PooledPoll {
        lane = lane.max_poll_interval(POOLED_POLL);
    }
    let builder = OutboxRelay::builder(&metered).lane(lane, Started(started_tx));
    let mut events = builder.subscribe();
    let relay = builder
        .start()
        .await
        .map_err(|e| format!("start relay: {e}"))?;
    let outcome = measure(&enqueuer, &meter, &mut events, &mut started_rx, messages)
        .await
        .map(|mut p| {
            p.path = path;
            p
        });
    if let Err(error) = relay.shutdown(Duration::from_secs(10)).await {
        eprintln!("benchmark: relay shutdown: {error}");
    }
    outcome
}

async fn measure(
    enqueuer: &Outbox,
    meter: &Meter,
    events: &mut broadcast::Receiver<RelayEvent>,
    started_rx: &mut mpsc::UnboundedReceiver<(Uuid, Instant)>,
    messages: usize,
) -> Result<Pickup, String> {
    // Idle first, so the first pickup is an idle one too. A lane that never says so still
    // gets measured, after the wait.
    if wait_for(events, |e| matches!(e, RelayEvent::Idle { .. }))
        .await
        .is_err()
    {
        eprintln!("benchmark: pickup lane never reported Idle; measuring anyway");
    }
    tokio::time::sleep(SETTLE).await;
    let before = meter.snapshot();
    let mut latencies_ms = Vec::with_capacity(messages);
    for n in 0..messages {
        // Enqueued around the meter, so only the relay's calls are counted.
        let enqueued = enqueuer
            .enqueue(draft(LANE, n, None)?)
            .await
            .map_err(|e| format!("enqueue: {e}"))?;
        let committed = Instant::now();
        let id = enqueued.message.outbox_id;
        let (started_id, started) = tokio::time::timeout(WAIT, started_rx.recv())
            .await
            .map_err(|_| format!("message {n} not picked up within {WAIT:?}"))?
            .ok_or("the handler went away")?;
        if started_id != id {
            return Err(format!("picked up {started_id}, expected {id}"));
        }
        // Signed: a handed-off message may start before the enqueue call has returned
        // (the hand-off goes out right after the commit, inside the call).
        let latency_ms = if started >= committed {
            started.duration_since(committed).as_secs_f64() * 1e3
        } else {
            -(committed.duration_since(started).as_secs_f64() * 1e3)
        };
        latencies_ms.push(latency_ms);
        wait_for(
            events,
            |e| matches!(e, RelayEvent::Delivered { outbox_id, .. } if *outbox_id == id),
        )
        .await?;
        tokio::time::sleep(SETTLE).await;
    }
    let after = meter.snapshot();
    latencies_ms.sort_by(f64::total_cmp);
    let calls_per_message = Op::ALL
        .iter()
        .zip(before.iter().zip(after.iter()))
        .filter(|(_, (b, a))| a > b)
        .map(|(op, (b, a))| (*op, (a - b) as f64 / messages as f64))
        .collect();
    Ok(Pickup {
        path: Path::HandOff,
        latencies_ms,
        calls_per_message,
        claim_p50_ms: meter.plain_claim_p50(),
    })
}

async fn wait_for(
    events: &mut broadcast::Receiver<RelayEvent>,
    wanted: impl Fn(&RelayEvent) -> bool,
) -> Result<(), String> {
    tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(event) if wanted(&event) => return Ok(()),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => {
                    return Err("the relay's events ended".to_owned())
                }
            }
        }
    })
    .await
    .map_err(|_| format!("no awaited relay event within {WAIT:?}"))?
}
