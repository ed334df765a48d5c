//! Where an ordering key stands, for an operator: `Outbox::key_state` (the key's head, the
//! dead letters before it, what waits behind it) and `Outbox::blocked_keys` (the keys a
//! dead head holds).

use super::*;
use crate::store::{Nack, NackDisposition, NackOutcome};

/// Claims the next claimable message of the default lane and dead-letters it.
async fn kill_next(h: &Harness) -> OutboxMessage {
    let claimed = claim_one(h, &claim_req(1, "relay-a")).await;
    let outcome = h
        .store
        .nack(&[Nack {
            claim: claim_of(&claimed),
            error: "poison".to_owned(),
            disposition: NackDisposition::Permanent,
        }])
        .await
        .expect("nack");
    assert_eq!(outcome, [NackOutcome::DeadLettered]);
    get(h, claimed.outbox_id).await
}

fn ids_of(messages: &[OutboxMessage]) -> Vec<Uuid> {
    messages.iter().map(|m| m.outbox_id).collect()
}

pub async fn key_state_and_blocked_keys_name_the_dead_head_and_what_it_holds(h: Harness) {
    // k1: a dead head with two messages behind it; k2: a dead letter with nothing behind
    // it; k3: live only.
    let a1 = put(&h, keyed(1, "k1")).await;
    let b1 = put(&h, keyed(2, "k2")).await;
    assert_eq!(kill_next(&h).await.outbox_id, a1.outbox_id);
    assert_eq!(kill_next(&h).await.outbox_id, b1.outbox_id);
    let a2 = put(&h, keyed(3, "k1")).await;
    let a3 = put(&h, keyed(4, "k1")).await;
    let c1 = put(&h, keyed(5, "k3")).await;
    put(&h, draft_in("other", TARGET, 6).with_ordering_key("k1")).await;

    let k1 = h
        .store
        .key_state(LANE, TARGET, "k1", 10)
        .await
        .expect("key_state");
    assert_eq!(k1.head.as_ref().map(|m| m.outbox_id), Some(a2.outbox_id));
    assert_eq!(ids_of(&k1.dead_before_head), [a1.outbox_id]);
    assert_eq!(ids_of(&k1.waiting), [a3.outbox_id]);
    assert!(!k1.more_waiting);
    assert!(k1.is_blocked());
    // A limit of one: the head, and one message behind it with nothing more.
    let short = h
        .store
        .key_state(LANE, TARGET, "k1", 1)
        .await
        .expect("key_state");
    assert_eq!(ids_of(&short.waiting), [a3.outbox_id]);
    assert!(!short.more_waiting);

    let k2 = h
        .store
        .key_state(LANE, TARGET, "k2", 10)
        .await
        .expect("key_state");
    assert_eq!(k2.head, None);
    assert_eq!(ids_of(&k2.dead_before_head), [b1.outbox_id]);
    assert!(!k2.is_blocked(), "nothing waits behind k2's dead letter");

    let k3 = h
        .store
        .key_state(LANE, TARGET, "k3", 10)
        .await
        .expect("key_state");
    assert_eq!(k3.head.as_ref().map(|m| m.outbox_id), Some(c1.outbox_id));
    assert!(k3.dead_before_head.is_empty() && k3.waiting.is_empty());

    let blocked = h
        .store
        .blocked_keys(LANE, TARGET, None, 10)
        .await
        .expect("blocked_keys");
    assert_eq!(blocked.keys.len(), 1, "{blocked:?}");
    assert_eq!(blocked.keys[0].ordering_key, "k1");
    assert_eq!(blocked.keys[0].dead_head.outbox_id, a1.outbox_id);
    assert_eq!(blocked.keys[0].held.outbox_id, a2.outbox_id);
    assert_eq!(blocked.next_cursor, None);
    // From after k1's dead head on, no key is held.
    let later = h
        .store
        .blocked_keys(LANE, TARGET, Some(a1.seq), 10)
        .await
        .expect("blocked_keys");
    assert!(later.keys.is_empty(), "{later:?}");

    // What a requeue or discard would change, counted: by lane, by key, by ids.
    let count = |filter: MessageFilter| {
        let store = h.store.clone();
        async move { store.count_dead_letters(&filter).await.expect("count") }
    };
    assert_eq!(count(MessageFilter::lane(LANE, TARGET)).await, 2);
    let by_key = MessageFilter {
        ordering_key: Some("k2".to_owned()),
        ..MessageFilter::lane(LANE, TARGET)
    };
    assert_eq!(count(by_key).await, 1);
    assert_eq!(
        count(MessageFilter::all().with_ids([a1.outbox_id, a2.outbox_id])).await,
        1
    );
    assert_eq!(count(MessageFilter::lane("other", TARGET)).await, 0);
    // The listing's filters count the same rows: error text, and enqueue time.
    let lane = || MessageFilter::lane(LANE, TARGET);
    assert_eq!(count(lane().with_error_containing("poison")).await, 2);
    assert_eq!(count(lane().with_error_containing("timeout")).await, 0);
    let epoch = std::time::UNIX_EPOCH;
    let far = epoch + std::time::Duration::from_secs(100 * 365 * 24 * 3600);
    assert_eq!(
        count(lane().enqueued_between(Some(epoch), Some(far))).await,
        2
    );
    assert_eq!(count(lane().enqueued_between(None, Some(epoch))).await, 0);

    // Requeued, the dead head is the key's head again: nothing holds k1.
    let requeued = h
        .store
        .requeue_dead_letters(&MessageFilter::all().with_ids([a1.outbox_id]))
        .await
        .expect("requeue");
    assert_eq!(requeued, 1);
    let k1 = h
        .store
        .key_state(LANE, TARGET, "k1", 10)
        .await
        .expect("key_state");
    assert_eq!(k1.head.as_ref().map(|m| m.outbox_id), Some(a1.outbox_id));
    assert_eq!(ids_of(&k1.waiting), [a2.outbox_id, a3.outbox_id]);
    assert!(!k1.is_blocked());
    let blocked = h
        .store
        .blocked_keys(LANE, TARGET, None, 10)
        .await
        .expect("blocked_keys");
    assert!(blocked.keys.is_empty(), "{blocked:?}");
}

pub async fn blocked_keys_page_by_their_earliest_dead_letter(h: Harness) {
    // k1: two dead letters, then a pending head; k2: a dead letter, then a pending head;
    // k3: a dead letter, then a claimed head.
    let x1 = put(&h, keyed(1, "k1")).await;
    let y1 = put(&h, keyed(2, "k2")).await;
    let z1 = put(&h, keyed(3, "k3")).await;
    for dead in [&x1, &y1, &z1] {
        assert_eq!(kill_next(&h).await.outbox_id, dead.outbox_id);
    }
    let x2 = put(&h, keyed(4, "k1")).await;
    assert_eq!(kill_next(&h).await.outbox_id, x2.outbox_id);
    let z2 = put(&h, keyed(5, "k3")).await;
    assert_eq!(
        claim_one(&h, &claim_req(1, "relay-a")).await.outbox_id,
        z2.outbox_id
    );
    let x3 = put(&h, keyed(6, "k1")).await;
    let y2 = put(&h, keyed(7, "k2")).await;

    let first = h
        .store
        .blocked_keys(LANE, TARGET, None, 2)
        .await
        .expect("blocked_keys");
    let pairs = |page: &crate::store::BlockedKeys| -> Vec<(String, Uuid, Uuid)> {
        page.keys
            .iter()
            .map(|k| {
                (
                    k.ordering_key.clone(),
                    k.dead_head.outbox_id,
                    k.held.outbox_id,
                )
            })
            .collect()
    };
    assert_eq!(
        pairs(&first),
        [
            ("k1".to_owned(), x1.outbox_id, x3.outbox_id),
            ("k2".to_owned(), y1.outbox_id, y2.outbox_id),
        ]
    );
    let cursor = first.next_cursor.expect("a full page has a cursor");
    // The next page: k3, held by its claimed head; k1's later dead letter x2 comes after the
    // cursor, but k1 was listed by its earliest.
    let second = h
        .store
        .blocked_keys(LANE, TARGET, Some(cursor), 2)
        .await
        .expect("blocked_keys");
    assert_eq!(
        pairs(&second),
        [("k3".to_owned(), z1.outbox_id, z2.outbox_id)]
    );
    assert_eq!(second.next_cursor, None, "{second:?}");
    assert_eq!(second.keys[0].held.status, OutboxStatus::Claimed);
}
