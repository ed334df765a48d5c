//! Idle pickup: one message at a time on an idle lane, timed from the enqueue's commit
//! returning to the handler starting, with every store call the relay makes counted.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox_relay::{DeliveryError, DeliveryHandler, OutboxMessage, OutboxRelay, RelayEvent};
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use crate::drain::lane_config;
use crate::metered::{MeteredStore, Op};
use crate::stores::{draft, BenchStore};

const LANE: &str = "pickup";
const CONCURRENCY: usize = 16;
/// After each delivery the lane gets this long to settle back to idle; whatever it does
/// meanwhile counts against that message.
const SETTLE: Duration = Duration::from_millis(20);
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Pickup {
    /// Commit-to-handler latencies in ms, sorted.
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

pub async fn run(bench: &BenchStore, messages: usize) -> Result<Pickup, String> {
    let metered = MeteredStore::new(bench.store.clone());
    let (started_tx, mut started_rx) = mpsc::unbounded_channel();
    let builder = OutboxRelay::builder(metered.clone())
        .lane(lane_config(LANE, CONCURRENCY), Started(started_tx));
    let mut events = builder.subscribe();
    let relay = builder
        .start()
        .await
        .map_err(|e| format!("start relay: {e}"))?;
    let outcome = measure(bench, &metered, &mut events, &mut started_rx, messages).await;
    if let Err(error) = relay.shutdown(Duration::from_secs(10)).await {
        eprintln!("benchmark: relay shutdown: {error}");
    }
    outcome
}

async fn measure(
    bench: &BenchStore,
    metered: &MeteredStore,
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
    let before = metered.meter.snapshot();
    let mut latencies_ms = Vec::with_capacity(messages);
    for n in 0..messages {
        // Enqueued through the store itself, so only the relay's calls are counted.
        let enqueued = bench
            .store
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
        latencies_ms.push(started.saturating_duration_since(committed).as_secs_f64() * 1e3);
        wait_for(
            events,
            |e| matches!(e, RelayEvent::Delivered { outbox_id, .. } if *outbox_id == id),
        )
        .await?;
        tokio::time::sleep(SETTLE).await;
    }
    let after = metered.meter.snapshot();
    latencies_ms.sort_by(f64::total_cmp);
    let calls_per_message = Op::ALL
        .iter()
        .zip(before.iter().zip(after.iter()))
        .filter(|(_, (b, a))| a > b)
        .map(|(op, (b, a))| (*op, (a - b) as f64 / messages as f64))
        .collect();
    Ok(Pickup {
        latencies_ms,
        calls_per_message,
        claim_p50_ms: metered.meter.plain_claim_p50(),
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
