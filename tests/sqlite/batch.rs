//! The batch writes (one statement per call, `json_each`) answer item by item exactly as
//! the memory store, the reference, does: in the caller's order, a claim named twice applied
//! once (an extended lease twice), a message named under a stale token beside its current
//! one, and two claimed rows of one key (or a whole key run) acked in one statement, which
//! the key-head triggers must hand on row by row.

use std::sync::Arc;
use std::time::Duration;

use outbox_relay::message::ClaimRef;
use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::store::{
    ClaimOutcome, ClaimRequest, MessageFilter, Nack, NackDisposition, NackOutcome, OrderingPolicy,
    Outbox,
};
use outbox_relay::time::ManualClock;
use outbox_relay::time::UnixMillis;
use outbox_relay::{InMemoryOutboxStore, OutboxMessage, OutboxMessageDraft};
use serde_json::json;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(5);

fn request(limit: usize) -> ClaimRequest {
    ClaimRequest::new("orders", "billing", limit, LEASE, "relay-a")
        .with_ordering(OrderingPolicy::Skip)
}

fn keyed(value: i64, key: &str) -> OutboxMessageDraft {
    OutboxMessageDraft::new("orders", "billing", json!({ "value": value }))
        .unwrap()
        .with_ordering_key(key)
}

/// A message as both stores must agree on it: ids and tokens are each store's own.
fn normal(message: &OutboxMessage) -> String {
    let mut m = message.clone();
    m.outbox_id = Uuid::nil();
    m.claim_token = m.claim_token.map(|_| Uuid::nil());
    format!("{m:?}")
}

async fn claim(store: &Outbox, limit: usize) -> Vec<OutboxMessage> {
    store.claim(&request(limit)).await.unwrap().messages
}

fn refs(messages: &[&OutboxMessage]) -> Vec<ClaimRef> {
    messages.iter().map(|m| m.claim().unwrap()).collect()
}

/// Both stores on one manual clock each, at the same instant.
async fn both(dir: &tempfile::TempDir) -> Vec<(Outbox, ManualClock)> {
    let start = UnixMillis::from_millis(1_700_000_000_000);
    let memory_clock = ManualClock::new(start);
    let sqlite_clock = ManualClock::new(start);
    let sqlite = SqliteOutboxStore::builder(dir.path().join("outbox.db"))
        .clock(Arc::new(sqlite_clock.clone()))
        .open()
        .await
        .unwrap();
    vec![
        (
            Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(
                memory_clock.clone(),
            ))),
            memory_clock,
        ),
        (Outbox::new(sqlite), sqlite_clock),
    ]
}

/// Claims four messages, the first under a stale token beside its current one, and names
/// them in every batch call with repeats, stale tokens and an unknown message.
async fn repeats_and_stale_tokens(store: &Outbox, clock: &ManualClock) -> Vec<String> {
    let drafts = (0..6)
        .map(|v| OutboxMessageDraft::new("orders", "billing", json!({ "v": v })).unwrap())
        .collect();
    store.enqueue_many(drafts).await.unwrap();
    let first = claim(store, 1).await.remove(0);
    clock.advance(LEASE * 2); // lapses: the next claim takes it again under a new token
    let batch = claim(store, 6).await;
    let again = &batch[0];
    assert_eq!(again.seq, first.seq);
    let stale = first.claim().unwrap();
    let [a, b, c, d, e, f] = &refs(&batch.iter().collect::<Vec<_>>())[..] else {
        panic!("six claims: {batch:?}");
    };
    let unknown = ClaimRef {
        outbox_id: Uuid::now_v7(),
        claim_token: Uuid::new_v4(),
    };
    let mut transcript = Vec::new();
    clock.advance(Duration::from_millis(10));
    let extended = store
        .extend_lease(&[*b, stale, *a, *b, unknown, *a], LEASE)
        .await
        .unwrap();
    assert_eq!(
        extended,
        [
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
            ClaimOutcome::Applied,
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
            ClaimOutcome::Applied
        ]
    );
    transcript.push(format!("extend {extended:?}"));
    let acked = store.ack(&[stale, *b, *a, *b, unknown, *a]).await.unwrap();
    assert_eq!(
        acked,
        [
            ClaimOutcome::LostClaim,
            ClaimOutcome::Applied,
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
            ClaimOutcome::LostClaim,
            ClaimOutcome::LostClaim
        ]
    );
    transcript.push(format!("ack {acked:?}"));
    let nack = |claim: ClaimRef, error: &str, disposition| Nack {
        claim,
        error: error.into(),
        disposition,
    };
    let retry = NackDisposition::Retry(Duration::from_secs(3));
    let nacked = store
        .nack(&[
            nack(*d, "first \"quoted\" ünïcode", retry),
            nack(*c, "permanent", NackDisposition::Permanent),
            nack(*d, "second, lost", NackDisposition::Permanent),
            nack(*a, "acked already", retry),
        ])
        .await
        .unwrap();
    assert_eq!(
        nacked,
        [
            NackOutcome::Requeued,
            NackOutcome::DeadLettered,
            NackOutcome::LostClaim,
            NackOutcome::LostClaim
        ]
    );
    transcript.push(format!("nack {nacked:?}"));
    let released = store.release(&[*f, *e, *f, *d]).await.unwrap();
    assert_eq!(
        released,
        [
            ClaimOutcome::Applied,
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim,
            ClaimOutcome::LostClaim
        ]
    );
    transcript.push(format!("release {released:?}"));
    let all = store
        .list(
            &MessageFilter::all(),
            outbox_relay::store::PageRequest {
                after: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    transcript.extend(all.messages.iter().map(normal));
    transcript
}

#[tokio::test]
async fn batch_writes_answer_item_by_item_as_the_memory_store_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut transcripts = Vec::new();
    for (store, clock) in both(&dir).await {
        transcripts.push(repeats_and_stale_tokens(&store, &clock).await);
    }
    assert_eq!(transcripts[0], transcripts[1], "memory, then SQLite");
}

/// Key k: k1 (dead, then requeued while k2 is claimed), k2, k3. Once k2's lease lapses,
/// k1 is claimed again beside k2, still claimed (asked with a key run of `run`, it comes
/// alone: its run stops at k2): one ack names both. Whichever row the statement reaches
/// first, k3 must end up its key's head and claimable.
async fn two_claimed_rows_of_one_key(
    store: &Outbox,
    clock: &ManualClock,
    k1_first: bool,
    run: usize,
) -> Vec<String> {
    let k1 = store
        .enqueue(keyed(1, "k").with_max_attempts(1))
        .await
        .unwrap()
        .message;
    store.enqueue(keyed(2, "k")).await.unwrap();
    let k3 = store.enqueue(keyed(3, "k")).await.unwrap().message;
    let head = claim(store, 10).await.remove(0);
    let failed = Nack {
        claim: head.claim().unwrap(),
        error: "boom".into(),
        disposition: NackDisposition::Permanent,
    };
    assert_eq!(
        store.nack(&[failed]).await.unwrap(),
        [NackOutcome::DeadLettered]
    );
    let k2c = claim(store, 10).await.remove(0);
    let requeue = MessageFilter::all().with_ids([k1.outbox_id]);
    assert_eq!(store.requeue_dead_letters(&requeue).await.unwrap(), 1);
    clock.advance(LEASE * 2);
    let k1c = store
        .claim(&request(10).with_key_run(run))
        .await
        .unwrap()
        .messages;
    assert_eq!(
        k1c.iter().map(|m| m.outbox_id).collect::<Vec<_>>(),
        [k1.outbox_id],
        "k1 heads its key again, its run ends at k2 (lapsed, not a head, still claimed)"
    );
    let pair = if k1_first {
        [&k1c[0], &k2c]
    } else {
        [&k2c, &k1c[0]]
    };
    let acked = store.ack(&refs(&pair)).await.unwrap();
    assert_eq!(acked, [ClaimOutcome::Applied; 2]);
    let next = claim(store, 10).await;
    assert_eq!(
        next.iter().map(|m| m.outbox_id).collect::<Vec<_>>(),
        [k3.outbox_id],
        "k3 is its key's head (k1 first: {k1_first})"
    );
    next.iter().map(normal).collect()
}

#[tokio::test]
async fn one_ack_of_two_claimed_rows_of_a_key_hands_the_head_on() {
    for (k1_first, run) in [(true, 1), (false, 1), (true, 3), (false, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let mut transcripts = Vec::new();
        for (store, clock) in both(&dir).await {
            let transcript = two_claimed_rows_of_one_key(&store, &clock, k1_first, run);
            transcripts.push(transcript.await);
        }
        assert_eq!(transcripts[0], transcripts[1], "memory, then SQLite");
    }
}

/// Key k: k1..k6, and a key run k1..k4 claimed at once. `acked` (indexes into the run, in
/// the order the call names them) are acked in one statement, the rest of the run is
/// released in another; then the key's first message left must head it, with the rest as
/// its run. The call names them in various orders; the statement (as SQLite plans an
/// `UPDATE … FROM` with triggers today) collects the rows first and changes them by rowid,
/// so the head leaves first and its trigger marks the next row of the run, which leaves
/// next: the mark is handed down the run one row at a time and must end past it.
async fn a_run_acked_in_one_statement(
    store: &Outbox,
    acked: &[usize],
) -> (Vec<String>, Vec<usize>) {
    let mut k = Vec::new();
    for value in 0..6 {
        k.push(store.enqueue(keyed(value, "k")).await.unwrap().message);
    }
    let run = store
        .claim(&request(10).with_key_run(4))
        .await
        .unwrap()
        .messages;
    let index_of = |m: &OutboxMessage| k.iter().position(|x| x.outbox_id == m.outbox_id);
    let claimed: Vec<_> = run.iter().filter_map(index_of).collect();
    assert_eq!(claimed, [0, 1, 2, 3], "the head and its run of 3");
    let names: Vec<_> = acked.iter().map(|i| &run[*i]).collect();
    let outcomes = store.ack(&refs(&names)).await.unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Applied; acked.len()]);
    let rest: Vec<_> = (0..run.len())
        .filter(|i| !acked.contains(i))
        .map(|i| &run[i])
        .collect();
    let released = store.release(&refs(&rest)).await.unwrap();
    assert_eq!(released, vec![ClaimOutcome::Applied; rest.len()]);
    let next = store
        .claim(&request(10).with_key_run(10))
        .await
        .unwrap()
        .messages;
    (
        next.iter().map(normal).collect(),
        next.iter().filter_map(index_of).collect(),
    )
}

#[tokio::test]
async fn a_run_acked_in_one_statement_hands_the_head_on_in_any_order() {
    let orders: &[&[usize]] = &[
        &[0, 1, 2, 3],
        &[3, 2, 1, 0],
        &[1, 3, 0, 2],
        &[2, 0, 3, 1],
        &[0, 1],
        &[1, 0],
        &[0],
    ];
    for acked in orders {
        let dir = tempfile::tempdir().unwrap();
        let mut transcripts = Vec::new();
        for (store, _clock) in both(&dir).await {
            let (transcript, next) = a_run_acked_in_one_statement(&store, acked).await;
            let first_left = acked.len();
            assert_eq!(
                next,
                (first_left..6).collect::<Vec<_>>(),
                "after acking {acked:?}: the first message left heads k, the rest its run"
            );
            transcripts.push(transcript);
        }
        assert_eq!(transcripts[0], transcripts[1], "memory, then SQLite");
    }
}
