//! `Outbox::enqueue_in_tx` on MySQL: the message is written in the caller's transaction,
//! beside the caller's own rows, and is seen by relays exactly when that transaction
//! commits; a rollback leaves nothing. The key's head stays exact when a relay acks the
//! key's previous message while the caller's transaction is still open: the caller's
//! write holds the key's row lock, so the ack waits for the commit and then hands the key
//! on to the new message.

use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::mysql::MysqlConfig;
use outbox_relay::store::ClaimRequest;
use outbox_relay::{Outbox, OutboxMessage, OutboxMessageDraft};
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection};

use crate::support::{open, TestDatabase};

/// How long the test waits for the ack to finish once the caller commits: generous.
const ACK_DEADLINE: Duration = Duration::from_secs(60);

fn keyed(key: &str, value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new("l", "sink", json!({ "value": value }))
        .expect("draft")
        .with_ordering_key(key)
}

fn request(limit: usize) -> ClaimRequest {
    ClaimRequest::new("l", "sink", limit, Duration::from_secs(60), "r")
}

fn refs(messages: &[OutboxMessage]) -> Vec<ClaimRef> {
    messages
        .iter()
        .map(|m| ClaimRef {
            outbox_id: m.outbox_id,
            claim_token: m.claim_token.expect("token"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_seen_when_the_callers_transaction_commits_and_never_after_a_rollback() {
    let db = TestDatabase::create().await;
    let pool = db.pool(2).await;
    sqlx::query("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .execute(&pool)
        .await
        .expect("create the caller's table");
    let mysql = open(&db, MysqlConfig::default()).await;
    let table = mysql.messages_table().to_owned();
    let store = Outbox::new(mysql);

    // Rolled back: neither the order nor the message.
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders (id) VALUES (1)")
        .execute(&mut *tx)
        .await
        .expect("order 1");
    store
        .enqueue_in_tx(&mut tx, keyed("k", 1))
        .await
        .expect("enqueue in the caller's transaction");
    tx.rollback().await.expect("rollback");

    // Open: the relay sees nothing yet.
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders (id) VALUES (2)")
        .execute(&mut *tx)
        .await
        .expect("order 2");
    let written = store
        .enqueue_in_tx(&mut tx, keyed("k", 2))
        .await
        .expect("enqueue in the caller's transaction");
    let before = store.claim(&request(10)).await.expect("claim");
    assert!(
        before.messages.is_empty(),
        "a message of an open transaction was claimed: {:?}",
        before.messages
    );
    tx.commit().await.expect("commit");

    // Committed: the message, and only it, beside its order.
    let after = store.claim(&request(10)).await.expect("claim");
    let ids: Vec<_> = after.messages.iter().map(|m| m.outbox_id).collect();
    assert_eq!(ids, vec![written.message.outbox_id]);
    assert_eq!(after.messages[0].payload, json!({ "value": 2 }));
    let orders: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders ORDER BY id")
        .fetch_all(&pool)
        .await
        .expect("orders");
    assert_eq!(orders, vec![2]);
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(rows, 1, "the rolled-back message left a row");
    db.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_during_the_callers_transaction_hands_the_key_on_after_the_commit() {
    let db = TestDatabase::create().await;
    let pool = db.pool(2).await;
    let store = Outbox::new(open(&db, MysqlConfig::default()).await);
    store
        .enqueue(keyed("k", 1))
        .await
        .expect("enqueue the head");
    let head = store.claim(&request(10)).await.expect("claim");
    assert_eq!(head.messages.len(), 1);

    // The caller writes the key's next message and keeps its transaction open.
    let mut tx = pool.begin().await.expect("begin");
    store
        .enqueue_in_tx(&mut tx, keyed("k", 2))
        .await
        .expect("enqueue in the caller's transaction");

    // The relay acks the head meanwhile: it waits on the key's lock.
    let acking = {
        let store = store.clone();
        let claims = refs(&head.messages);
        tokio::spawn(async move { store.ack(&claims).await })
    };
    wait_for_a_lock_wait(&db).await;
    tx.commit().await.expect("commit");
    let acked = tokio::time::timeout(ACK_DEADLINE, acking)
        .await
        .expect("the ack ends once the caller commits")
        .expect("the ack task")
        .expect("ack");
    assert_eq!(acked.len(), 1);

    // The key went on to the committed message: claimable, and alone.
    let next = store.claim(&request(10)).await.expect("claim");
    assert_eq!(next.messages.len(), 1, "the key lost its head");
    assert_eq!(next.messages[0].payload, json!({ "value": 2 }));
    db.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_commits_the_message_at_once() {
    let db = TestDatabase::create().await;
    let pool = db.pool(1).await;
    let store = Outbox::new(open(&db, MysqlConfig::default()).await);
    let mut conn = pool.acquire().await.expect("connection");
    let written = store
        .enqueue_in_tx(&mut *conn, keyed("k", 1))
        .await
        .expect("enqueue on a pooled connection");
    drop(conn);
    let claimed = store.claim(&request(10)).await.expect("claim");
    let ids: Vec<_> = claimed.messages.iter().map(|m| m.outbox_id).collect();
    assert_eq!(ids, vec![written.message.outbox_id]);
    let mut own = sqlx::MySqlConnection::connect(&db.url)
        .await
        .expect("own connection");
    store
        .enqueue_in_tx(&mut own, keyed("j", 2))
        .await
        .expect("enqueue on an own connection");
    let claimed = store.claim(&request(10)).await.expect("claim");
    assert_eq!(claimed.messages.len(), 1);
    assert_eq!(claimed.messages[0].payload, json!({ "value": 2 }));
    db.drop_now().await;
}

/// Waits until a transaction on `db` waits for a lock (the ack, on the key's row): InnoDB
/// says `LOCK WAIT`, or the ack's connection is in its locking read of the keys table.
/// (MariaDB reads a row it finds by a unique key while it plans the statement, in the
/// `Statistics` state, and a lock wait there shows the transaction `RUNNING`.) The caller's
/// transaction holds that row's lock, so an ack in that read waits for its commit. The
/// read may wait before InnoDB has begun the ack's transaction, so a connection counts
/// whether or not `INNODB_TRX` lists one for it.
async fn wait_for_a_lock_wait(db: &TestDatabase) {
    let admin = db.pool(1).await;
    let deadline = tokio::time::Instant::now() + ACK_DEADLINE;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST p \
             LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID \
             WHERE p.DB = ? AND (t.trx_state = 'LOCK WAIT' \
                OR (p.INFO LIKE '%\\_keys%' AND p.INFO LIKE '%FOR UPDATE'))",
        )
        .bind(&db.name)
        .fetch_one(&admin)
        .await
        .expect("read the lock waits");
        if waiting > 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ack never waited on the key's lock within {ACK_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
