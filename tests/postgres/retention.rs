//! Automatic retention on one PostgreSQL outbox shared by two relays: only one purges at a
//! time (the advisory lock of `PostgresOutboxStore::purge_lock_key`), and together they
//! purge every old row exactly once.

use std::time::Duration;

use outbox_relay::relay::LaneKey;
use outbox_relay::retention::{RetentionConfig, RetentionTask};
use outbox_relay::store::{ClaimRequest, LaneCount, PurgeRequest};
use outbox_relay::Outbox;

use crate::{count_rows, draft, open, SchemaGuard};

/// Enqueues and delivers `n` messages of lane `l`/sink.
async fn deliver(store: &Outbox, n: usize) {
    for value in 0..n {
        store
            .enqueue(draft("l", value as i64))
            .await
            .expect("enqueue");
    }
    let batch = store
        .claim(&ClaimRequest::new(
            "l",
            "sink",
            n,
            Duration::from_secs(60),
            "r",
        ))
        .await
        .expect("claim");
    assert_eq!(batch.messages.len(), n);
    let claims: Vec<_> = batch
        .messages
        .iter()
        .map(|m| m.claim().expect("claimed"))
        .collect();
    store.ack(&claims).await.expect("ack");
}

#[tokio::test]
async fn two_relays_sharing_an_outbox_purge_one_at_a_time() {
    let schema = SchemaGuard::new();
    let a = open(schema.config()).await;
    let b = open(schema.config()).await;
    assert_eq!(
        crate::pg(&a).purge_lock_key(),
        crate::pg(&b).purge_lock_key(),
        "same outbox, same lock"
    );
    let elsewhere = SchemaGuard::new();
    let other = open(elsewhere.config()).await;
    assert_ne!(
        crate::pg(&a).purge_lock_key(),
        crate::pg(&other).purge_lock_key(),
        "other outbox, other lock"
    );

    deliver(&a, 6).await;
    // Everything delivered before now is older than zero: every delivered row qualifies.
    let everything = PurgeRequest::older_than(Duration::ZERO, 2);

    // Relay A is purging (it holds the lock): relay B's purge skips, deleting nothing.
    let mut holder = crate::pg(&a).pool().acquire().await.expect("a connection");
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(crate::pg(&a).purge_lock_key())
        .fetch_one(&mut *holder)
        .await
        .expect("take the lock");
    assert!(held);
    assert_eq!(total(b.purge(&everything).await.expect("purge")), 0);
    assert_eq!(count_rows(&b).await, 6);
    // Another outbox in the same database is not held up.
    deliver(&other, 1).await;
    assert_eq!(total(other.purge(&everything).await.expect("purge")), 1);

    // A finishes: B purges everything, two rows per statement.
    let released: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
        .bind(crate::pg(&a).purge_lock_key())
        .fetch_one(&mut *holder)
        .await
        .expect("release the lock");
    assert!(released);
    drop(holder);
    assert_eq!(total(b.purge(&everything).await.expect("purge")), 6);
    assert_eq!(count_rows(&b).await, 0);

    // Both relays' retention tasks at once: every row goes exactly once, and the lock is
    // free afterwards (a purge that skipped or finished leaves nothing held).
    deliver(&a, 20).await;
    let retention = RetentionConfig::keep_all().delivered(Some(Duration::ZERO));
    let lanes = vec![(LaneKey::new("l", "sink"), retention)];
    let mut task_a = RetentionTask::new(a.clone(), lanes.clone());
    let mut task_b = RetentionTask::new(b.clone(), lanes);
    task_a.batch_size = 1;
    task_b.batch_size = 1;
    let (pass_a, pass_b) = tokio::join!(task_a.purge_once(), task_b.purge_once());
    let purged_a = pass_a[0].1.expect("purge a");
    let purged_b = pass_b[0].1.expect("purge b");
    assert_eq!(purged_a + purged_b, 20, "a: {purged_a}, b: {purged_b}");
    assert_eq!(count_rows(&a).await, 0);
    let mut probe = crate::pg(&a).pool().acquire().await.expect("a connection");
    let lock_free: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(crate::pg(&a).purge_lock_key())
        .fetch_one(&mut *probe)
        .await
        .expect("try the lock");
    assert!(lock_free, "a purge left the lock held");
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(crate::pg(&a).purge_lock_key())
        .execute(&mut *probe)
        .await
        .expect("release the probe's lock");

    elsewhere.drop().await;
    schema.drop().await;
}

/// How many rows a purge's counts add up to.
fn total(counts: Vec<LaneCount>) -> u64 {
    LaneCount::total(&counts)
}
