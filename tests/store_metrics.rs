//! `outbox_enqueued_total`, `outbox_requeued_total` and `outbox_store_call_duration_seconds`
//! are recorded by every `Outbox` (unless built `without_metrics`), not by each backend, and every
//! way into a store counts each message exactly once (`enqueue`/`enqueue_many`/
//! `requeue_dead_letters`, SQLite's transaction, PostgreSQL's `enqueue_in_tx`).
//!
//! Each test reads its own recorder, set as the thread's default for the test's
//! current-thread runtime, so tests run in parallel without seeing each other's counts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use outbox_relay::metrics::STORE_CALL_DURATION_SECONDS;
use outbox_relay::store::{ClaimRequest, MessageFilter, Nack, NackDisposition, StoreError};
use outbox_relay::time::ManualClock;
use outbox_relay::{InMemoryOutboxStore, Outbox, OutboxMessageDraft};
use serde_json::json;

const TARGET: &str = "sink";

fn draft(lane: &str, value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new(lane, TARGET, json!({ "value": value })).expect("valid draft")
}

fn deduped(lane: &str, value: i64, key: &str) -> OutboxMessageDraft {
    draft(lane, value).with_dedupe_key(key)
}

fn clock() -> ManualClock {
    ManualClock::new(outbox_relay::time::UnixMillis::from_millis(
        1_700_000_000_000,
    ))
}

/// The store counters that moved since the last look, as `name{lane}` → count.
fn moved(snapshotter: &Snapshotter) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let DebugValue::Counter(n) = value else {
            continue;
        };
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
                .unwrap_or_default()
        };
        assert_eq!(label("target"), TARGET, "{key:?}");
        if n > 0 {
            out.insert(format!("{}{{{}}}", key.name(), label("lane")), n);
        }
    }
    out
}

fn expect(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// New messages, duplicates (stored and within a batch), refused drafts and batches, and an
/// operator's requeue, through the trait's methods alone.
async fn exercise(store: &Outbox) {
    assert!(
        !store
            .enqueue(deduped("orders", 1, "k1"))
            .await
            .unwrap()
            .duplicate
    );
    assert!(
        store
            .enqueue(deduped("orders", 1, "k1"))
            .await
            .unwrap()
            .duplicate
    );
    let answers = store
        .enqueue_many(vec![
            draft("orders", 2),
            deduped("orders", 3, "k2"),
            deduped("orders", 3, "k2"),
            deduped("orders", 1, "k1"),
            draft("billing", 4),
        ])
        .await
        .unwrap();
    let duplicate: Vec<bool> = answers.iter().map(|a| a.duplicate).collect();
    assert_eq!(duplicate, [false, false, true, true, false]);
    assert!(store.enqueue_many(Vec::new()).await.unwrap().is_empty());

    // Refused: nothing written, nothing counted.
    let mut invalid = draft("orders", 5);
    invalid.max_attempts = 0;
    assert!(matches!(
        store.enqueue_many(vec![draft("orders", 6), invalid]).await,
        Err(StoreError::Validation(_))
    ));
    assert!(matches!(
        store
            .enqueue_many(vec![draft("orders", 7), deduped("orders", 8, "k1")])
            .await,
        Err(StoreError::Conflict { .. })
    ));

    // Dead-letter every message (three of `orders`, one of `billing`), then requeue them
    // all in one call: counted per lane.
    let mut claimed = Vec::new();
    for lane in ["orders", "billing"] {
        let request = ClaimRequest::new(lane, TARGET, 10, Duration::from_secs(30), "relay");
        claimed.extend(store.claim(&request).await.unwrap().messages);
    }
    assert_eq!(claimed.len(), 4);
    let nacks: Vec<Nack> = claimed
        .iter()
        .map(|m| Nack {
            claim: m.claim().expect("claimed"),
            error: "refused".into(),
            disposition: NackDisposition::Permanent,
        })
        .collect();
    store.nack(&nacks).await.unwrap();
    let requeued = store
        .requeue_dead_letters(&MessageFilter::all())
        .await
        .unwrap();
    assert_eq!(requeued, 4);
    // Nothing left to requeue: nothing counted.
    assert_eq!(
        store
            .requeue_dead_letters(&MessageFilter::all())
            .await
            .unwrap(),
        0
    );
}

/// What [`exercise`] moves: each message written counted once, each requeue once.
fn exercised() -> BTreeMap<String, u64> {
    expect(&[
        ("outbox_enqueued_total{orders}", 3),
        ("outbox_enqueued_total{billing}", 1),
        ("outbox_requeued_total{orders}", 3),
        ("outbox_requeued_total{billing}", 1),
    ])
}

/// An outbox built the short way, `Outbox::new(backend)`, counts: nothing to remember.
#[tokio::test]
async fn the_memory_store_counts_each_message_once() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let store = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock())));
    exercise(&store).await;
    assert_eq!(moved(&snapshotter), exercised());
}

/// Built `without_metrics`, an outbox records nothing: metrics are the outbox's work, not
/// the backend's.
#[tokio::test]
async fn an_outbox_without_metrics_records_nothing() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let store = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock()))).without_metrics();
    exercise(&store).await;
    assert!(snapshotter.snapshot().into_vec().is_empty());
}

/// What a hook sees: every call through the outbox, by its operation, whether it failed,
/// and how long it took.
#[derive(Debug, Default)]
struct Seen(std::sync::Mutex<Vec<(String, bool, Duration)>>);

impl outbox_relay::store::StoreHook for Seen {
    fn finished(&self, call: &outbox_relay::store::StoreCall<'_>) {
        let failed = matches!(call.outcome, outbox_relay::store::CallOutcome::Failed(_));
        self.0
            .lock()
            .expect("not poisoned")
            .push((call.op.to_string(), failed, call.duration));
    }
}

/// Every call through an outbox reaches its hooks under its operation, failures included.
/// (The lanes time their own calls into `outbox_store_call_duration_seconds`, with their
/// lane and target: the outbox records no histogram.)
#[tokio::test]
async fn every_store_call_reaches_the_hooks_by_its_operation() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let seen = Arc::new(Seen::default());
    let store =
        Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock()))).with_hook(seen.clone());
    let request = ClaimRequest::new("orders", TARGET, 10, Duration::from_secs(30), "me");
    store.enqueue(draft("orders", 1)).await.unwrap();
    store.enqueue(draft("orders", 2)).await.unwrap();
    let claimed = store.claim(&request).await.unwrap().messages;
    store.ack(&[claimed[0].claim().unwrap()]).await.unwrap();
    store
        .ack_and_claim(&[claimed[1].claim().unwrap()], &request)
        .await
        .unwrap();
    store
        .next_due("orders", TARGET, Default::default())
        .await
        .unwrap();
    store.stats(&MessageFilter::all()).await.unwrap();
    let mut refused = draft("orders", 3);
    refused.max_attempts = 0;
    assert!(
        store.enqueue(refused).await.is_err(),
        "a refused draft is a failed call"
    );

    let calls = seen.0.lock().expect("not poisoned").clone();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (op, _, duration) in &calls {
        *counts.entry(op.as_str()).or_default() += 1;
        assert!(*duration < Duration::from_secs(60), "{op}: {duration:?}");
    }
    assert_eq!(
        counts,
        BTreeMap::from([
            ("ack", 1),
            ("ack_and_claim", 1),
            ("claim", 1),
            ("enqueue", 3),
            ("next_due", 1),
            ("stats", 1),
        ])
    );
    let failed: Vec<_> = calls.iter().filter(|(_, failed, _)| *failed).collect();
    assert_eq!(failed.len(), 1, "{calls:?}");
    assert_eq!(failed[0].0, "enqueue");
    assert!(
        snapshotter
            .snapshot()
            .into_vec()
            .iter()
            .all(|(key, ..)| key.key().name() != STORE_CALL_DURATION_SECONDS),
        "the outbox records no store call histogram"
    );
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use outbox_relay::SqliteOutboxStore;

    async fn open(dir: &tempfile::TempDir) -> Outbox {
        let store = SqliteOutboxStore::builder(dir.path().join("outbox.db"))
            .clock(Arc::new(clock()))
            .open()
            .await
            .expect("open sqlite store");
        Outbox::new(store)
    }

    #[tokio::test]
    async fn the_sqlite_store_counts_each_message_once() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);

        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(&dir).await;
        exercise(&store).await;
        assert_eq!(moved(&snapshotter), exercised());
    }

    #[tokio::test]
    async fn a_sqlite_transaction_counts_what_it_commits_once() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);

        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(&dir).await;

        let mut tx = store.begin().await.unwrap();
        tx.enqueue(draft("orders", 1)).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(moved(&snapshotter), expect(&[]), "a rollback wrote nothing");

        let mut tx = store.begin().await.unwrap();
        tx.enqueue(draft("orders", 1)).await.unwrap();
        let answers = tx
            .enqueue_many(vec![
                deduped("orders", 2, "k"),
                deduped("orders", 2, "k"),
                draft("billing", 3),
            ])
            .await
            .unwrap();
        assert!(answers[1].duplicate);
        assert_eq!(moved(&snapshotter), expect(&[]), "counted at commit");
        tx.commit().await.unwrap();
        assert_eq!(
            moved(&snapshotter),
            expect(&[
                ("outbox_enqueued_total{orders}", 2),
                ("outbox_enqueued_total{billing}", 1),
            ])
        );
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use outbox_relay::store::postgres::PostgresConfig;
    use outbox_relay::PostgresOutboxStore;
    use sqlx::postgres::{PgPool, PgPoolOptions};

    /// A migrated store in a schema of its own, with its pool and the schema's name.
    async fn open() -> (Outbox, PgPool, String) {
        let url = std::env::var("OUTBOX_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .unwrap_or_else(|error| panic!("PostgreSQL is required at {url}: {error}"));
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let config = PostgresConfig::default()
            .schema(schema.clone())
            .clock(Arc::new(clock()));
        let store = PostgresOutboxStore::new(pool.clone(), config)
            .await
            .expect("store");
        store.migrate().await.expect("migrate");
        (Outbox::new(store), pool, schema)
    }

    async fn drop_schema(pool: &PgPool, schema: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(pool)
        .await
        .expect("drop schema");
    }

    #[tokio::test]
    async fn the_postgres_store_counts_each_message_once() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);

        let (store, pool, schema) = open().await;
        exercise(&store).await;
        assert_eq!(moved(&snapshotter), exercised());
        drop_schema(&pool, &schema).await;
    }

    #[tokio::test]
    async fn enqueue_in_tx_counts_each_message_once() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);

        let (store, pool, schema) = open().await;
        let mut tx = pool.begin().await.unwrap();
        store
            .enqueue_in_tx(&mut tx, draft("orders", 1))
            .await
            .unwrap();
        let answers = store
            .enqueue_many_in_tx(
                &mut tx,
                vec![
                    deduped("orders", 2, "k"),
                    deduped("orders", 2, "k"),
                    draft("billing", 3),
                ],
            )
            .await
            .unwrap();
        assert!(answers[1].duplicate);
        // A conflict in the same transaction: undone, not counted.
        assert!(matches!(
            store
                .enqueue_many_in_tx(&mut tx, vec![draft("orders", 4), deduped("orders", 5, "k")])
                .await,
            Err(StoreError::Conflict { .. })
        ));
        tx.commit().await.unwrap();
        assert_eq!(
            moved(&snapshotter),
            expect(&[
                ("outbox_enqueued_total{orders}", 2),
                ("outbox_enqueued_total{billing}", 1),
            ])
        );
        assert_eq!(
            store.stats(&MessageFilter::all()).await.unwrap().len(),
            2,
            "orders and billing, nothing of the conflicting batch"
        );
        drop_schema(&pool, &schema).await;
    }
}
