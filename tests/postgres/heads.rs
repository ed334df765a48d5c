//! The key-head marker under concurrency: an enqueue in a caller's long transaction racing
//! the ack of its key's head must never leave the key with live rows and no head (a key
//! stuck forever). See `src/store/postgres/schema/heads.rs`.

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::{ClaimRequest, MessageFilter};
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;

use crate::{open, SchemaGuard};

fn keyed(key: &str, value: i64) -> OutboxMessageDraft {
    OutboxMessageDraft::new("l", "sink", json!({ "value": value }))
        .expect("draft")
        .with_ordering_key(key)
}

fn request(limit: usize) -> ClaimRequest {
    ClaimRequest::new("l", "sink", limit, Duration::from_secs(60), "r")
}

fn refs(messages: &[outbox_relay::OutboxMessage]) -> Vec<ClaimRef> {
    messages
        .iter()
        .map(|m| ClaimRef {
            outbox_id: m.outbox_id,
            claim_token: m.claim_token.expect("token"),
        })
        .collect()
}

/// Claims (3 at a time) and acks `rounds` times, as a relay beside the writers; answers how
/// many it acked.
async fn consume(store: Outbox, rounds: usize) -> usize {
    let mut acked = 0;
    for _ in 0..rounds {
        let batch = store.claim(&request(3)).await.expect("claim");
        if !batch.messages.is_empty() {
            acked += batch.messages.len();
            store.ack(&refs(&batch.messages)).await.expect("ack");
        }
        tokio::task::yield_now().await;
    }
    acked
}

/// `writers` tasks, each enqueuing `per_writer` transactions of its own: transaction `i`
/// holds one message (value `w * 1000 + i`) per key of `keys(i)`, yielding after each.
fn spawn_writers(
    store: &Outbox,
    writers: i64,
    per_writer: i64,
    keys: fn(i64) -> Vec<String>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..per_writer {
                    let mut tx = crate::pg(&store).pool().begin().await.expect("begin");
                    for key in keys(i) {
                        store
                            .enqueue_in_tx(&mut tx, keyed(&key, w * 1000 + i))
                            .await
                            .expect("enqueue");
                        tokio::task::yield_now().await;
                    }
                    tx.commit().await.expect("commit");
                }
            })
        })
        .collect()
}

/// Claims (10 at a time) and acks until `total` messages are delivered, `delivered` of
/// them already: each claim must hand out something, or a key has lost its head
/// (`context` says what else to show then). At most one message per key per claim, so
/// this ends within `total` rounds.
async fn drain_rest(store: &Outbox, mut delivered: usize, total: usize, context: &str) {
    for _ in 0..total {
        if delivered == total {
            break;
        }
        let batch = store.claim(&request(10)).await.expect("claim");
        assert!(
            !batch.messages.is_empty(),
            "stuck with {delivered} of {total} delivered{context}: {:?}",
            store.stats(&MessageFilter::lane("l", "sink")).await
        );
        delivered += batch.messages.len();
        store.ack(&refs(&batch.messages)).await.expect("ack");
    }
    assert_eq!(delivered, total);
}

/// Keys with live rows whose lowest live row is not marked: each one is stuck.
async fn headless_keys(store: &Outbox) -> Vec<String> {
    let t = crate::pg(store).messages_table();
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT DISTINCT ON (ordering_key) ordering_key FROM (
            SELECT DISTINCT ON (ordering_key) ordering_key, key_head FROM {t}
            WHERE ordering_key IS NOT NULL AND status IN ('pending', 'claimed')
            ORDER BY ordering_key, seq) h
         WHERE NOT key_head"
    )))
    .fetch_all(crate::pg(store).pool())
    .await
    .expect("headless keys")
}

/// The lock class `promote_heads` and `check_head` use: FNV-1a of the table name, low 32
/// bits (as the store computes it).
fn lock_class(store: &Outbox) -> i32 {
    let hash = crate::pg(store)
        .messages_table()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    (hash as u32) as i32
}

#[tokio::test]
async fn an_enqueue_committed_after_its_head_was_acked_becomes_the_head() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    store.enqueue(keyed("k", 1)).await.expect("enqueue head");

    // Connection 1: the caller's transaction writes the next message of k, behind the head.
    let mut tx = crate::pg(&store).pool().begin().await.expect("begin");
    store
        .enqueue_in_tx(&mut tx, keyed("k", 2))
        .await
        .expect("enqueue in tx");

    // Connection 2: the head is claimed and acked while that row is uncommitted; the ack
    // cannot see it, so it promotes nothing.
    let head = store.claim(&request(10)).await.expect("claim");
    assert_eq!(head.messages.len(), 1);
    store.ack(&refs(&head.messages)).await.expect("ack");

    tx.commit().await.expect("commit");
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());
    let next = store.claim(&request(10)).await.expect("claim");
    assert_eq!(next.messages.len(), 1, "the late row must be claimable");
    assert_eq!(next.messages[0].payload, json!({ "value": 2 }));
    schema.drop().await;
}

/// The rows of a batch's key after its first (`key_in_batch`) skip the commit check only
/// behind a row the batch writes for certain: behind a duplicate (its dedupe key taken,
/// nothing written) the next row is checked, and heads a key with no live row.
#[tokio::test]
async fn a_row_behind_a_duplicate_in_its_batch_becomes_the_head() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    store
        .enqueue(keyed("k", 1).with_dedupe_key("d"))
        .await
        .expect("enqueue");
    let first = store.claim(&request(10)).await.expect("claim");
    store.ack(&refs(&first.messages)).await.expect("ack");

    let written = store
        .enqueue_many(vec![
            keyed("k", 1).with_dedupe_key("d"),
            keyed("k", 2),
            keyed("k", 3),
        ])
        .await
        .expect("enqueue the batch");
    assert!(written[0].duplicate, "the delivered message's duplicate");
    let t = crate::pg(&store).messages_table();
    let in_batch: Vec<bool> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT key_in_batch FROM {t} WHERE status = 'pending' ORDER BY seq"
    )))
    .fetch_all(crate::pg(&store).pool())
    .await
    .expect("key_in_batch");
    assert_eq!(
        in_batch,
        vec![false, true],
        "only the row behind value 2 skips"
    );
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());
    let next = store.claim(&request(10)).await.expect("claim");
    assert_eq!(next.messages.len(), 1, "the key's next row, alone");
    assert_eq!(next.messages[0].payload, json!({ "value": 2 }));
    schema.drop().await;
}

/// Both sides wait on the key's lock at once (held by a third connection), then race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_and_a_commit_racing_on_the_key_lock_leave_a_head() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    let class = lock_class(&store);
    for round in 0..5 {
        store.enqueue(keyed("k", 1)).await.expect("enqueue head");
        let head = store.claim(&request(10)).await.expect("claim");
        assert_eq!(head.messages.len(), 1, "round {round}");

        let mut tx = crate::pg(&store).pool().begin().await.expect("begin");
        store
            .enqueue_in_tx(&mut tx, keyed("k", 2))
            .await
            .expect("enqueue in tx");

        // A third connection holds k's lock: the ack stops in promote_heads after its
        // UPDATE, the commit stops in check_head.
        let mut holder = crate::pg(&store)
            .pool()
            .begin()
            .await
            .expect("begin holder");
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext('l' || chr(31) || 'sink' || chr(31) || 'k'))")
            .bind(class)
            .execute(&mut *holder)
            .await
            .expect("hold the key lock");
        let acker = {
            let store = store.clone();
            let acks = refs(&head.messages);
            tokio::spawn(async move { store.ack(&acks).await })
        };
        let committer = tokio::spawn(async move { tx.commit().await });
        // Wait until both are queued on the lock (a signal from the server, not a sleep).
        let waiting = async {
            loop {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_locks
                     WHERE locktype = 'advisory' AND NOT granted AND classid::int8 = $1::int8",
                )
                .bind(i64::from(class as u32))
                .fetch_one(crate::pg(&store).pool())
                .await
                .expect("pg_locks");
                if n >= 2 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .unwrap_or_else(|_| panic!("round {round}: ack and commit never both waited"));
        holder.commit().await.expect("release");
        acker.await.expect("join").expect("ack");
        committer.await.expect("join").expect("commit");

        assert_eq!(
            headless_keys(&store).await,
            Vec::<String>::new(),
            "round {round}"
        );
        let next = store.claim(&request(10)).await.expect("claim");
        assert_eq!(
            next.messages.len(),
            1,
            "round {round}: the late row is claimable"
        );
        store.ack(&refs(&next.messages)).await.expect("ack");
    }
    schema.drop().await;
}

/// Writers enqueue in transactions of their own while a consumer claims and acks: at the
/// end every key has its head, and everything drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_and_acks_never_lose_a_head() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    const WRITERS: i64 = 4;
    const PER_WRITER: i64 = 60;
    // Two keys per transaction, in an order that varies, as a service does.
    let writers = spawn_writers(&store, WRITERS, PER_WRITER, |i| {
        let keys = if i % 2 == 0 {
            ["k0", "k1"]
        } else {
            ["k1", "k2"]
        };
        keys.map(str::to_owned).to_vec()
    });
    let consumer = tokio::spawn(consume(store.clone(), 400));
    for writer in writers {
        writer.await.expect("writer");
    }
    let delivered = consumer.await.expect("consumer");
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());
    let total = usize::try_from(WRITERS * PER_WRITER * 2).expect("total");
    drain_rest(&store, delivered, total, "").await;
    schema.drop().await;
}

/// The native ack-and-claim: the claim sees the acks of the same transaction, so acking a
/// key's head hands out its successor in the same round trip; a stale ack is a lost claim.
#[tokio::test]
async fn ack_and_claim_hands_out_the_successor_of_an_acked_head() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    store.enqueue(keyed("k", 1)).await.expect("enqueue");
    store.enqueue(keyed("k", 2)).await.expect("enqueue");
    let head = store.claim(&request(10)).await.expect("claim");
    assert_eq!(head.messages.len(), 1, "one message of k at a time");
    let mut acks = refs(&head.messages);
    acks.push(ClaimRef {
        outbox_id: head.messages[0].outbox_id,
        claim_token: uuid::Uuid::new_v4(),
    });
    let answer = store
        .ack_and_claim(&acks, &request(10))
        .await
        .expect("ack_and_claim");
    assert_eq!(
        answer.acked,
        vec![
            outbox_relay::store::ClaimOutcome::Applied,
            outbox_relay::store::ClaimOutcome::LostClaim
        ]
    );
    let claimed = answer.claimed.expect("claimed");
    assert_eq!(claimed.messages.len(), 1);
    assert_eq!(claimed.messages[0].payload, json!({ "value": 2 }));
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());
    schema.drop().await;
}

/// The cycle function marks the lowest *pending* row of each acked key (`sql/cycle.sql`),
/// so acking part of a run marks the row behind the rest of the run while that rest is in
/// flight: a stray mark, which must not hand that row out before the run is acked, nor
/// leave the key without a head once it is.
#[tokio::test]
async fn acking_part_of_a_run_hands_out_its_successor_only_after_the_rest() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    for value in 1..=6 {
        store.enqueue(keyed("k", value)).await.expect("enqueue");
    }
    let values = |messages: &[outbox_relay::OutboxMessage]| -> Vec<i64> {
        messages
            .iter()
            .map(|m| {
                m.payload.to_value().expect("json")["value"]
                    .as_i64()
                    .expect("value")
            })
            .collect()
    };
    let run = store
        .claim(&request(10).with_key_run(4))
        .await
        .expect("claim a run");
    assert_eq!(values(&run.messages), vec![1, 2, 3, 4]);
    let acks = refs(&run.messages);

    // Ack 1 and 2: 3 and 4 are still claimed, so 5 must wait, marked or not.
    let answer = store
        .ack_and_claim(&acks[..2], &request(10).with_key_run(4))
        .await
        .expect("ack part of the run");
    let claimed = answer.claimed.expect("claimed");
    assert_eq!(
        values(&claimed.messages),
        Vec::<i64>::new(),
        "5 behind 3 and 4"
    );
    assert_eq!(marked(&store, "k").await, vec![5], "the stray mark on 5");
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());

    // Ack 3 and 4: now 5 and 6 come, in order.
    let answer = store
        .ack_and_claim(&acks[2..], &request(10).with_key_run(4))
        .await
        .expect("ack the rest of the run");
    let claimed = answer.claimed.expect("claimed");
    assert_eq!(values(&claimed.messages), vec![5, 6]);
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());
    schema.drop().await;
}

/// Pending rows of key `key` marked a head, by value.
async fn marked(store: &Outbox, key: &str) -> Vec<i64> {
    let t = crate::pg(store).messages_table();
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT (payload->>'value')::int8 FROM {t}
         WHERE ordering_key = $1 AND status = 'pending' AND key_head ORDER BY seq"
    )))
    .bind(key)
    .fetch_all(crate::pg(store).pool())
    .await
    .expect("marked rows")
}

/// Two transactions write the first rows (values 1 and 2) of the new key "k" at once,
/// neither seeing the other, and commit (the first one first, if `in_order`): both rows are
/// marked heads.
async fn race_on_a_new_key(store: &Outbox, in_order: bool) {
    let mut first = crate::pg(store).pool().begin().await.expect("begin");
    let mut second = crate::pg(store).pool().begin().await.expect("begin");
    store
        .enqueue_in_tx(&mut first, keyed("k", 1))
        .await
        .expect("enqueue 1");
    store
        .enqueue_in_tx(&mut second, keyed("k", 2))
        .await
        .expect("enqueue 2");
    let (a, b) = if in_order {
        (first, second)
    } else {
        (second, first)
    };
    a.commit().await.expect("commit");
    b.commit().await.expect("commit");
}

/// Two transactions write the first rows of a new key at once: neither sees the other, so
/// both rows are marked heads. The sweep clears the later one's mark (a claim would step
/// over it again and again) and the key still drains in order.
#[tokio::test]
async fn a_sweep_clears_the_stray_mark_of_racing_enqueues_and_the_key_drains_in_order() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    race_on_a_new_key(&store, false).await;
    assert_eq!(marked(&store, "k").await, vec![1, 2], "the race marks both");

    assert_eq!(
        crate::pg(&store)
            .sweep_heads("l", "sink")
            .await
            .expect("sweep"),
        1
    );
    assert_eq!(marked(&store, "k").await, vec![1]);
    assert_eq!(
        crate::pg(&store)
            .sweep_heads("l", "sink")
            .await
            .expect("sweep"),
        0
    );
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());

    for value in [1, 2] {
        let batch = store.claim(&request(10)).await.expect("claim");
        assert_eq!(batch.messages.len(), 1, "one message of k at a time");
        assert_eq!(batch.messages[0].payload, json!({ "value": value }));
        store.ack(&refs(&batch.messages)).await.expect("ack");
    }
    schema.drop().await;
}

/// A sweep waits for no lock: a key whose lock another transaction holds keeps its stray
/// mark until a later sweep.
#[tokio::test]
async fn a_sweep_leaves_a_key_whose_lock_is_held() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    race_on_a_new_key(&store, true).await;
    let mut holder = crate::pg(&store)
        .pool()
        .begin()
        .await
        .expect("begin holder");
    sqlx::query(
        "SELECT pg_advisory_xact_lock($1, hashtext('l' || chr(31) || 'sink' || chr(31) || 'k'))",
    )
    .bind(lock_class(&store))
    .execute(&mut *holder)
    .await
    .expect("hold the key lock");
    let swept = tokio::time::timeout(
        Duration::from_secs(60),
        crate::pg(&store).sweep_heads("l", "sink"),
    )
    .await
    .expect("the sweep must not wait for the lock")
    .expect("sweep");
    assert_eq!(swept, 0);
    assert_eq!(marked(&store, "k").await, vec![1, 2]);
    holder.commit().await.expect("release");
    assert_eq!(
        crate::pg(&store)
            .sweep_heads("l", "sink")
            .await
            .expect("sweep"),
        1
    );
    schema.drop().await;
}

/// Writers race on new keys (leaving stray marks), a consumer claims and acks, and a
/// sweeper clears marks all the while: no key is ever left without its head, and
/// everything drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sweeps_racing_enqueues_and_acks_never_lose_a_head() {
    let schema = SchemaGuard::new();
    let store = open(schema.config()).await;
    const WRITERS: i64 = 4;
    const PER_WRITER: i64 = 40;
    // Every writer writes key n{i/4} around the same time: new keys race.
    let writers = spawn_writers(&store, WRITERS, PER_WRITER, |i| vec![format!("n{}", i / 4)]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            let mut cleared = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                cleared += crate::pg(&store)
                    .sweep_heads("l", "sink")
                    .await
                    .expect("sweep");
                tokio::task::yield_now().await;
            }
            cleared
        })
    };
    let consumer = tokio::spawn(consume(store.clone(), 200));
    for writer in writers {
        writer.await.expect("writer");
    }
    let delivered = consumer.await.expect("consumer");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let cleared = sweeper.await.expect("sweeper");
    assert_eq!(headless_keys(&store).await, Vec::<String>::new());
    let total = usize::try_from(WRITERS * PER_WRITER).expect("total");
    drain_rest(
        &store,
        delivered,
        total,
        &format!(" ({cleared} marks swept)"),
    )
    .await;
    schema.drop().await;
}
