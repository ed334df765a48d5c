//! Wake-ups without `NOTIFY`: an enqueue through the same store wakes its subscribers at
//! once; one through another store on the same database (another process) is found by the
//! adaptive poll within `PICKUP_LATENCY`. The latencies are printed; the assertion is only
//! that each wake-up comes and names its lane (timing is the benchmark's business).

use std::time::{Duration, Instant};

use outbox_relay::store::mysql::{MysqlConfig, PICKUP_LATENCY, WATCH_MAX_INTERVAL};
use outbox_relay::store::WakeUp;
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;
use tokio::sync::broadcast::Receiver;

use crate::support::{open, TestDatabase};

/// A generous bound: the poll's ceiling is one second.
const TIMEOUT: Duration = Duration::from_secs(20);

async fn wake_for(receiver: &mut Receiver<WakeUp>, lane: &str) -> Duration {
    let started = Instant::now();
    loop {
        let woken = tokio::time::timeout(TIMEOUT, receiver.recv())
            .await
            .unwrap_or_else(|_| panic!("no wake-up for {lane} within {TIMEOUT:?}"))
            .expect("wake-up channel open");
        if woken.concerns(lane, "sink") && woken != WakeUp::All {
            return started.elapsed();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_enqueue_wakes_within_the_pickup_latency() {
    let db = TestDatabase::create().await;
    let relay_side = Outbox::new(open(&db, MysqlConfig::default()).await);
    let service_side = Outbox::new(open(&db, MysqlConfig::default()).await);
    let mut woken = relay_side.subscribe();

    // The same store: at once.
    let started = Instant::now();
    relay_side
        .enqueue(OutboxMessageDraft::new("local", "sink", json!({})).unwrap())
        .await
        .unwrap();
    let local = wake_for(&mut woken, "local").await + started.elapsed();

    // Another store (process): found by the poll. After a quiet spell the poll is at its
    // ceiling, so each of these measures the worst case plus a round trip.
    let mut remote = Vec::new();
    for i in 0..4 {
        let quiet = tokio::time::sleep(WATCH_MAX_INTERVAL * 2);
        quiet.await;
        let lane = format!("remote{i}");
        let started = Instant::now();
        service_side
            .enqueue(OutboxMessageDraft::new(&lane, "sink", json!({ "i": i })).unwrap())
            .await
            .unwrap();
        wake_for(&mut woken, &lane).await;
        remote.push(started.elapsed());
    }
    println!("wake-up after a local enqueue: {local:?}; after another process's: {remote:?} (ceiling {PICKUP_LATENCY:?})");
    assert!(
        remote.iter().all(|latency| *latency < TIMEOUT),
        "local {local:?}, remote {remote:?}"
    );
    db.drop_now().await;
}
