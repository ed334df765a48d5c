//! What a short claim tells an idle relay: `ClaimBatch::next_due`, the `next_due` answer as
//! of the end of the claim, so a relay that then acks what it got sleeps without asking.

use crate::store::{ClaimRequest, Nack, NackDisposition, NextDue, OrderingPolicy};

use super::*;

/// The store's own `next_due` for the default lane, now.
async fn asked(h: &Harness) -> NextDue {
    NextDue::Known(
        h.store
            .next_due(LANE, TARGET, OrderingPolicy::Skip)
            .await
            .expect("next_due"),
    )
}

/// What a short claim that got messages says of `next_due`, checked: a store may leave it
/// unknown (PostgreSQL's one-statement claim does; the relay then rides a claim on its last
/// ack), and one that answers (memory, SQLite) must answer what `next_due` would as of the
/// claim's end. An empty claim answers it on every store.
fn short_due(said: NextDue, answer: NextDue) {
    assert!(
        said == NextDue::Unknown || said == answer,
        "a short claim said {said:?}; it may say Unknown or {answer:?}"
    );
}

pub async fn a_short_claim_answers_next_due_as_of_its_end(h: Harness) {
    let empty = h.store.claim(&claim_req(10, "r")).await.unwrap();
    assert_eq!(empty.next_due, NextDue::Known(None), "an empty lane");

    put(&h, draft(1).with_delay(ms(3_000))).await;
    let empty = h.store.claim(&claim_req(10, "r")).await.unwrap();
    assert_eq!(
        empty.next_due,
        NextDue::Known(Some(ms(3_000))),
        "the delayed one"
    );

    // The lease it just handed out counts, as running leases do in `next_due`.
    put(&h, draft(2)).await;
    let short = h.store.claim(&claim_req(10, "r")).await.unwrap();
    assert_eq!(short.messages.len(), 1, "{short:?}");
    short_due(short.next_due, NextDue::Known(Some(LEASE)));
    assert_eq!(
        NextDue::Known(Some(LEASE)),
        asked(&h).await,
        "what next_due says after it"
    );
    ack_all(&h, &short).await;

    // A claim that filled its limit may leave more claimable now: it does not say.
    h.clock.advance(ms(3_000));
    put(&h, draft(3)).await;
    let full = h.store.claim(&claim_req(1, "r")).await.unwrap();
    assert_eq!(full.messages.len(), 1, "{full:?}");
    assert_eq!(full.next_due, NextDue::Unknown);
    ack_all(&h, &full).await;
    let rest = h.store.claim(&claim_req(10, "r")).await.unwrap();
    assert_eq!(rest.messages.len(), 1, "the delayed one, due now: {rest:?}");
    short_due(rest.next_due, NextDue::Known(Some(LEASE)));
    ack_all(&h, &rest).await;
    let drained = h.store.claim(&claim_req(10, "r")).await.unwrap();
    assert_eq!(drained.next_due, NextDue::Known(None), "all delivered");
}

pub async fn a_short_claims_next_due_skips_rows_held_behind_their_key(h: Harness) {
    // The successor of the head it hands out is held back, so it does not count (it would
    // say "now"): an idle relay that sleeps on it does not spin on empty claims.
    let head = put(&h, keyed(1, "k")).await;
    let successor = put(&h, keyed(2, "k")).await;
    put(&h, draft(3).with_delay(ms(5_000))).await;
    let lease = ms(2_000);
    let request = ClaimRequest::new(LANE, TARGET, 10, lease, "r");
    let short = h.store.claim(&request).await.unwrap();
    assert_eq!(ids(&short), [head.outbox_id], "{short:?}");
    // The head's lapse.
    short_due(short.next_due, NextDue::Known(Some(lease)));

    // `ack_and_claim` answers it too: the acked head's successor is claimed at once.
    let answer = h
        .store
        .ack_and_claim(&[claim_of(&short.messages[0])], &request)
        .await
        .unwrap();
    let claimed = answer.claimed.unwrap();
    assert_eq!(ids(&claimed), [successor.outbox_id], "{claimed:?}");
    short_due(claimed.next_due, NextDue::Known(Some(lease)));

    // Its lapse, then nothing held: the delayed one.
    h.store
        .ack(&[claim_of(&claimed.messages[0])])
        .await
        .unwrap();
    let empty = h.store.claim(&request).await.unwrap();
    assert_eq!(empty.next_due, NextDue::Known(Some(ms(5_000))));
    assert_eq!(empty.next_due, asked(&h).await);
}

pub async fn lanes_next_due_answers_each_lane_as_next_due_does(h: Harness) {
    let none: Vec<(String, String, OrderingPolicy)> = Vec::new();
    assert!(h.store.lanes_next_due(&none).await.unwrap().is_empty());
    // The default lane: a key whose head is dead (held under Block, not under Skip), and
    // a delayed message.
    put(&h, keyed(1, "k").with_max_attempts(1)).await;
    put(&h, keyed(2, "k")).await;
    let head = claim_one(&h, &claim_req(10, "r")).await;
    h.store
        .nack(&[Nack {
            claim: claim_of(&head),
            error: "boom".into(),
            disposition: NackDisposition::Permanent,
        }])
        .await
        .unwrap();
    put(&h, draft(3).with_delay(ms(3_000))).await;
    // "leased": a running lease; "later": a delayed message; "empty": nothing.
    put(&h, draft_in("leased", TARGET, 4)).await;
    let request = ClaimRequest::new("leased", TARGET, 10, ms(2_000), "r");
    assert_eq!(h.store.claim(&request).await.unwrap().messages.len(), 1);
    put(&h, draft_in("later", TARGET, 5).with_delay(ms(7_000))).await;
    h.clock.advance(ms(500));

    let asked: Vec<(String, String, OrderingPolicy)> = [
        ("later", OrderingPolicy::Block),
        (LANE, OrderingPolicy::Block),
        ("empty", OrderingPolicy::Skip),
        (LANE, OrderingPolicy::Skip),
        ("leased", OrderingPolicy::Skip),
        ("later", OrderingPolicy::Skip),
    ]
    .iter()
    .map(|(lane, ordering)| ((*lane).to_owned(), TARGET.to_owned(), *ordering))
    .collect();
    let due = h.store.lanes_next_due(&asked).await.unwrap();
    let mut each = Vec::new();
    for (lane, target, ordering) in &asked {
        each.push(h.store.next_due(lane, target, *ordering).await.unwrap());
    }
    assert_eq!(due, each, "in the asked order, as each lane's own next_due");
    assert_eq!(
        due,
        [
            Some(ms(6_500)),
            Some(ms(2_500)),
            None,
            Some(ms(0)),
            Some(ms(1_500)),
            Some(ms(6_500)),
        ]
    );
}
