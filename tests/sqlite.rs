//! What only the SQLite store has to show: the file is the truth (close and reopen loses
//! nothing), WAL mode, one writer at a time without `SQLITE_BUSY` under concurrent callers,
//! table prefixes, and all-or-nothing batches.
#![cfg(feature = "sqlite")]

#[path = "sqlite/batch.rs"]
mod batch;
#[path = "sqlite/checkpoints.rs"]
mod checkpoints;
#[path = "sqlite/differential.rs"]
mod differential;
#[path = "sqlite/full_disk.rs"]
mod full_disk;
#[path = "sqlite/migration.rs"]
mod migration;
#[path = "sqlite/migration_v2.rs"]
mod migration_v2;
#[path = "sqlite/migration_v8.rs"]
mod migration_v8;
#[cfg(feature = "plans")]
#[path = "sqlite/plans.rs"]
mod plans;
#[path = "sqlite/run_cycle.rs"]
mod run_cycle;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{
    ClaimOutcome, ClaimRequest, MessageFilter, Nack, NackDisposition, NackOutcome, PageRequest,
};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::{Outbox, OutboxMessage, OutboxMessageDraft, OutboxStatus, StoreError};
use serde_json::json;
use sqlx::{Connection, Row};
use tempfile::TempDir;

fn draft(value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new("orders", "billing", json!({ "value": value })).unwrap()
}

fn claim_req(limit: usize) -> ClaimRequest {
    ClaimRequest::new(
        "orders",
        "billing",
        limit,
        Duration::from_secs(60),
        "relay-a",
    )
}

async fn open(dir: &TempDir, clock: &ManualClock) -> Outbox {
    let store = SqliteOutboxStore::builder(dir.path().join("outbox.db"))
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap();
    Outbox::new(store)
}

/// The SQLite store under an outbox, for its own API.
fn lite(outbox: &Outbox) -> &SqliteOutboxStore {
    outbox.backend().expect("a SQLite outbox")
}

async fn everything(store: &Outbox) -> Vec<OutboxMessage> {
    let page = PageRequest {
        after: None,
        limit: 1_000_000,
    };
    store
        .list(&MessageFilter::all(), page)
        .await
        .unwrap()
        .messages
}

/// A raw connection to the file, to look at what the store wrote.
async fn raw(path: &Path) -> sqlx::SqliteConnection {
    let url = format!("sqlite://{}", path.display());
    sqlx::SqliteConnection::connect(&url).await.unwrap()
}

#[tokio::test]
async fn every_row_and_state_survives_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let store = open(&dir, &clock).await;

    let rich = draft(1)
        .with_header("content-type", "application/json")
        .with_ordering_key("customer-1")
        .with_dedupe_key("order-1")
        .with_max_attempts(3);
    store
        .enqueue_many(vec![rich, draft(2), draft(3), draft(4), draft(5)])
        .await
        .unwrap();
    store
        .enqueue(draft(6).with_delay(Duration::from_secs(30)))
        .await
        .unwrap();
    let batch = store.claim(&claim_req(4)).await.unwrap();
    let claims: Vec<_> = batch.messages.iter().filter_map(|m| m.claim()).collect();
    assert_eq!(claims.len(), 4);
    clock.advance(Duration::from_millis(5));
    assert_eq!(
        store.ack(&claims[..1]).await.unwrap(),
        vec![ClaimOutcome::Applied]
    );
    let nacks = vec![
        Nack {
            claim: claims[1],
            error: "target said 503".into(),
            disposition: NackDisposition::Retry(Duration::from_secs(10)),
        },
        Nack {
            claim: claims[2],
            error: "target said 400".into(),
            disposition: NackDisposition::Permanent,
        },
    ];
    assert_eq!(
        store.nack(&nacks).await.unwrap(),
        vec![NackOutcome::Requeued, NackOutcome::DeadLettered]
    );
    // claims[3] stays claimed; draft(5) stays pending and due; draft(6) pending, not due.
    let before = everything(&store).await;
    let statuses: HashSet<_> = before.iter().map(|m| m.status).collect();
    assert_eq!(statuses.len(), OutboxStatus::ALL.len(), "{statuses:?}");
    lite(&store).close().await;
    drop(store);

    let store = open(&dir, &clock).await;
    assert_eq!(everything(&store).await, before);
    // The claim held across the restart is still fenced by its token.
    assert_eq!(
        store.ack(&claims[3..]).await.unwrap(),
        vec![ClaimOutcome::Applied]
    );
    assert_eq!(
        store.ack(&claims[3..]).await.unwrap(),
        vec![ClaimOutcome::LostClaim]
    );
}

#[tokio::test]
async fn the_file_is_in_wal_mode_and_migrations_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(UnixMillis::from_millis(0));
    let store = open(&dir, &clock).await;
    store.enqueue(draft(1)).await.unwrap();
    let again = open(&dir, &clock).await;
    assert_eq!(everything(&again).await.len(), 1);

    let mut conn = raw(&dir.path().join("outbox.db")).await;
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(mode, "wal");
    let versions: i64 = sqlx::query("SELECT COUNT(*) FROM outbox_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(versions, 8, "each migration recorded once");
}

#[tokio::test]
async fn open_creates_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    assert!(!path.exists());
    let store = Outbox::new(SqliteOutboxStore::open(&path).await.unwrap());
    assert_eq!(lite(&store).path(), path);
    assert!(path.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_claimers_claim_each_message_exactly_once() {
    const MESSAGES: i64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Outbox::new(
        SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap(),
    );
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(100) {
        let drafts = chunk.iter().map(|v| draft(*v)).collect();
        store.enqueue_many(drafts).await.unwrap();
    }

    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let batch = store.claim(&claim_req(7)).await?;
                if batch.messages.is_empty() {
                    return Ok::<_, StoreError>(mine);
                }
                let claims: Vec<_> = batch.messages.iter().filter_map(|m| m.claim()).collect();
                let outcomes = store.ack(&claims).await?;
                assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Applied));
                mine.extend(batch.messages.iter().map(|m| m.outbox_id));
            }
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.unwrap().unwrap());
    }
    let unique: HashSet<_> = claimed.iter().collect();
    assert_eq!(claimed.len(), MESSAGES as usize);
    assert_eq!(unique.len(), MESSAGES as usize);
    let stats = store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!(stats[0].delivered, MESSAGES as u64);
    assert_eq!(stats[0].pending + stats[0].claimed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_enqueues_of_one_dedupe_key_write_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = Outbox::new(
        SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.enqueue(draft(7).with_dedupe_key("order-7")).await
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap().unwrap());
    }
    let ids: HashSet<_> = answers.iter().map(|a| a.message.outbox_id).collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(answers.iter().filter(|a| !a.duplicate).count(), 1);
    assert_eq!(everything(&store).await.len(), 1);
}

#[tokio::test]
async fn table_prefixes_keep_outboxes_apart_in_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let billing = Outbox::new(
        SqliteOutboxStore::builder(&path)
            .table_prefix("billing_")
            .open()
            .await
            .unwrap(),
    );
    let shipping = Outbox::new(
        SqliteOutboxStore::builder(&path)
            .table_prefix("shipping_")
            .open()
            .await
            .unwrap(),
    );
    assert_eq!(lite(&billing).table_name(), "billing_outbox");
    billing.enqueue(draft(1)).await.unwrap();
    billing.enqueue(draft(2)).await.unwrap();
    shipping.enqueue(draft(3)).await.unwrap();
    assert_eq!(everything(&billing).await.len(), 2);
    assert_eq!(everything(&shipping).await.len(), 1);

    let mut conn = raw(&path).await;
    let tables: Vec<String> = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%outbox%' \
         ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect();
    assert_eq!(
        tables,
        vec![
            "billing_outbox",
            "billing_outbox_counts",
            "billing_outbox_lane_control",
            "billing_outbox_migrations",
            "billing_outbox_served_lanes",
            "shipping_outbox",
            "shipping_outbox_counts",
            "shipping_outbox_lane_control",
            "shipping_outbox_migrations",
            "shipping_outbox_served_lanes",
        ]
    );
}

#[tokio::test]
async fn a_bad_table_prefix_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    for bad in ["billing-", "1st", "x; DROP TABLE outbox"] {
        let err = SqliteOutboxStore::builder(&path)
            .table_prefix(bad)
            .open()
            .await
            .unwrap_err();
        match err {
            StoreError::Validation(e) => assert_eq!(e.field, "table_prefix", "{bad:?}"),
            other => panic!("{bad:?}: expected a validation error, got {other:?}"),
        }
    }
    assert!(
        !path.exists(),
        "a refused configuration must not create the file"
    );
}

#[tokio::test]
async fn an_invalid_draft_in_a_batch_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, &ManualClock::new(UnixMillis::from_millis(0))).await;
    let err = store
        .enqueue_many(vec![draft(1), draft(2).with_max_attempts(0), draft(3)])
        .await
        .unwrap_err();
    match err {
        StoreError::Validation(e) => assert_eq!(e.field, "max_attempts"),
        other => panic!("expected a validation error, got {other:?}"),
    }
    assert!(everything(&store).await.is_empty());

    // A dedupe conflict inside the batch found after the first insert: still nothing.
    store
        .enqueue(draft(9).with_dedupe_key("taken"))
        .await
        .unwrap();
    let err = store
        .enqueue_many(vec![draft(1), draft(2).with_dedupe_key("taken")])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    assert_eq!(everything(&store).await.len(), 1);
}

#[tokio::test]
async fn a_closed_store_is_unavailable_not_broken() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir, &ManualClock::new(UnixMillis::from_millis(0))).await;
    lite(&store).close().await;
    let err = store.enqueue(draft(1)).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let err = store.get(uuid::Uuid::nil()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}

#[tokio::test]
async fn business_rows_and_messages_commit_or_roll_back_together() {
    let dir = tempfile::tempdir().unwrap();
    let store = Outbox::new(
        SqliteOutboxStore::open(dir.path().join("outbox.db"))
            .await
            .unwrap(),
    );
    let mut wakeups = store.subscribe();
    {
        let mut tx = store.begin().await.unwrap();
        sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)")
            .execute(tx.connection())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    // Rolled back: neither the order nor its message.
    let mut tx = store.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (id, total) VALUES (1, 100)")
        .execute(tx.connection())
        .await
        .unwrap();
    tx.enqueue(OutboxMessageDraft::new("orders", "billing", json!({"order": 1})).unwrap())
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    // Dropped without commit: rolled back too.
    {
        let mut tx = store.begin().await.unwrap();
        sqlx::query("INSERT INTO orders (id, total) VALUES (2, 200)")
            .execute(tx.connection())
            .await
            .unwrap();
        tx.enqueue(OutboxMessageDraft::new("orders", "billing", json!({"order": 2})).unwrap())
            .await
            .unwrap();
    }

    // Committed: both, and the lane is woken after the commit.
    let mut tx = store.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (id, total) VALUES (3, 300)")
        .execute(tx.connection())
        .await
        .unwrap();
    let enqueued = tx
        .enqueue(OutboxMessageDraft::new("orders", "billing", json!({"order": 3})).unwrap())
        .await
        .unwrap();
    // An invalid draft inside the transaction is refused and writes nothing.
    let err = tx
        .enqueue(
            OutboxMessageDraft::new("orders", "billing", json!({}))
                .unwrap()
                .with_max_attempts(0),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Validation(ref e) if e.field == "max_attempts"));
    assert!(wakeups.try_recv().is_err(), "woken before the commit");
    tx.commit().await.unwrap();
    let wake = tokio::time::timeout(std::time::Duration::from_secs(10), wakeups.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(wake.concerns("orders", "billing"));

    let mut tx = store.begin().await.unwrap();
    let orders: Vec<(i64,)> = sqlx::query_as("SELECT id FROM orders ORDER BY id")
        .fetch_all(tx.connection())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(orders, vec![(3,)]);
    let page = store
        .list(
            &MessageFilter::all(),
            PageRequest {
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(page.messages.len(), 1);
    assert_eq!(page.messages[0].outbox_id, enqueued.message.outbox_id);
}

#[tokio::test]
async fn ack_and_claim_frees_a_key_and_claims_its_next_message_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let store = open(&dir, &clock).await;
    let k1 = store
        .enqueue(draft(1).with_ordering_key("k"))
        .await
        .unwrap();
    let k2 = store
        .enqueue(draft(2).with_ordering_key("k"))
        .await
        .unwrap();
    let head = store.claim(&claim_req(10)).await.unwrap().messages;
    assert_eq!(head.len(), 1);
    let forged = outbox_relay::message::ClaimRef {
        outbox_id: k2.message.outbox_id,
        claim_token: uuid::Uuid::new_v4(),
    };

    let answer = store
        .ack_and_claim(&[head[0].claim().unwrap(), forged], &claim_req(10))
        .await
        .unwrap();
    assert_eq!(
        answer.acked,
        [ClaimOutcome::Applied, ClaimOutcome::LostClaim]
    );
    let claimed = answer.claimed.unwrap();
    let ids: Vec<_> = claimed.messages.iter().map(|m| m.outbox_id).collect();
    assert_eq!(ids, [k2.message.outbox_id], "the ack freed k for the claim");
    let k1 = store.get(k1.message.outbox_id).await.unwrap().unwrap();
    assert_eq!(k1.status, OutboxStatus::Delivered);

    let answer = store.ack_and_claim(&[], &claim_req(10)).await.unwrap();
    assert!(answer.acked.is_empty());
    assert!(
        answer.claimed.unwrap().messages.is_empty(),
        "k2 is in flight"
    );
}
