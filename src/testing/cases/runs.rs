//! Key runs: a due head handed out with the messages queued right behind it
//! ([`ClaimRequest::key_run`]).

use std::collections::HashSet;

use crate::store::{
    ClaimOutcome, ClaimRequest, MessageFilter, Nack, NackDisposition, NackOutcome, OrderingPolicy,
};

use super::*;

fn run_req(limit: usize, run: usize, consumer: &str) -> ClaimRequest {
    claim_req(limit, consumer).with_key_run(run)
}

async fn claim_ids(h: &Harness, request: &ClaimRequest) -> Vec<Uuid> {
    ids(&h.store.claim(request).await.unwrap())
}

fn id_list(messages: &[&OutboxMessage]) -> Vec<Uuid> {
    messages.iter().map(|m| m.outbox_id).collect()
}

pub async fn key_run_follows_its_head_in_order(h: Harness) {
    let k1 = put(&h, keyed(1, "k")).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let l1 = put(&h, keyed(3, "l")).await;
    let k3 = put(&h, keyed(4, "k")).await;
    let free = put(&h, draft(5)).await;
    let l2 = put(&h, keyed(6, "l")).await;
    let k4 = put(&h, keyed(7, "k")).await;

    let batch = h.store.claim(&run_req(10, 3, "relay-a")).await.unwrap();
    assert_eq!(
        ids(&batch),
        id_list(&[&k1, &k2, &k3, &l1, &l2, &free]),
        "each head, then its run in enqueue order, up to 3 messages of a key"
    );
    let tokens: HashSet<_> = batch.messages.iter().map(|m| m.claim_token).collect();
    assert_eq!(tokens.len(), 6, "each message has a token of its own");
    for m in &batch.messages {
        assert_eq!(m.status, OutboxStatus::Claimed);
        assert_eq!(m.attempt_count, 1, "{m:?}");
        assert_eq!(m.claimed_by.as_deref(), Some("relay-a"));
        assert_eq!(m.lease_expires_at, batch.messages[0].lease_expires_at);
    }
    // k4 waits behind the run: a key's claim is one claim, whoever asks.
    assert!(claim_ids(&h, &run_req(10, 3, "relay-b")).await.is_empty());
    ack_all(&h, &batch).await;
    assert_eq!(
        claim_ids(&h, &run_req(10, 3, "relay-b")).await,
        [k4.outbox_id]
    );
}

pub async fn key_run_counts_towards_the_limit(h: Harness) {
    let mut k = Vec::new();
    for value in 0..5 {
        k.push(put(&h, keyed(value, "k")).await.outbox_id);
    }
    let free = put(&h, draft(9)).await;
    assert_eq!(claim_ids(&h, &run_req(3, 10, "relay-a")).await, k[..3]);
    assert_eq!(
        claim_ids(&h, &run_req(3, 10, "relay-a")).await,
        [free.outbox_id],
        "the rest of k waits for the claimed part"
    );
    // A run of 1 (and 0, taken as 1) claims heads only.
    let h2 = put(&h, keyed(10, "h")).await;
    put(&h, keyed(11, "h")).await;
    assert_eq!(
        claim_ids(&h, &run_req(10, 0, "relay-a")).await,
        [h2.outbox_id]
    );
}

pub async fn key_run_stops_at_a_message_not_yet_due(h: Harness) {
    let k1 = put(&h, keyed(1, "k")).await;
    let k2 = put(&h, keyed(2, "k").with_delay(ms(100))).await;
    let k3 = put(&h, keyed(3, "k")).await;
    let head = claim_one(&h, &run_req(10, 5, "relay-a")).await;
    assert_eq!(
        head.outbox_id, k1.outbox_id,
        "k2 is not due, so the run stops"
    );
    h.clock.advance(ms(100));
    h.store.ack(&[claim_of(&head)]).await.unwrap();
    assert_eq!(
        claim_ids(&h, &run_req(10, 5, "relay-a")).await,
        [k2.outbox_id, k3.outbox_id]
    );
}

pub async fn key_run_under_block_stops_at_a_dead_letter(h: Harness) {
    let skip = run_req(10, 1, "relay-a").with_ordering(OrderingPolicy::Skip);
    let k1 = put(&h, keyed(1, "k")).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let k3 = put(&h, keyed(3, "k")).await;
    // k1 and k2 die; then only k1 comes back: k1 pending, k2 dead, k3 pending.
    for expected in [&k1, &k2] {
        let head = claim_one(&h, &skip).await;
        assert_eq!(head.outbox_id, expected.outbox_id);
        let nacked = h
            .store
            .nack(&[Nack {
                claim: claim_of(&head),
                error: "bad".into(),
                disposition: NackDisposition::Permanent,
            }])
            .await
            .unwrap();
        assert_eq!(nacked, [NackOutcome::DeadLettered]);
    }
    let only_k1 = MessageFilter::all().with_ids([k1.outbox_id]);
    assert_eq!(h.store.requeue_dead_letters(&only_k1).await.unwrap(), 1);

    let block = run_req(10, 5, "relay-a").with_ordering(OrderingPolicy::Block);
    let batch = h.store.claim(&block).await.unwrap();
    assert_eq!(ids(&batch), [k1.outbox_id], "k2's dead letter ends the run");
    h.store
        .release(&[claim_of(&batch.messages[0])])
        .await
        .unwrap();
    let skip_run = run_req(10, 5, "relay-a").with_ordering(OrderingPolicy::Skip);
    assert_eq!(
        claim_ids(&h, &skip_run).await,
        [k1.outbox_id, k3.outbox_id],
        "under Skip the dead letter holds nothing"
    );
}

pub async fn a_lapsed_run_comes_back_one_message_at_a_time(h: Harness) {
    let k1 = put(&h, keyed(1, "k")).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let k3 = put(&h, keyed(3, "k")).await;
    let run = h.store.claim(&run_req(10, 3, "relay-a")).await.unwrap();
    assert_eq!(ids(&run), id_list(&[&k1, &k2, &k3]));
    h.clock.advance(LEASE);

    // The crashed claimer's run lapsed: its head comes back alone, then each next one.
    for (expected, old) in [&k1, &k2, &k3].into_iter().zip(&run.messages) {
        let again = claim_one(&h, &run_req(10, 3, "relay-b")).await;
        assert_eq!(
            (again.outbox_id, again.attempt_count),
            (expected.outbox_id, 2)
        );
        assert_eq!(
            h.store.ack(&[claim_of(old)]).await.unwrap(),
            [ClaimOutcome::LostClaim],
            "the dead claimer's late ack is fenced off"
        );
        assert!(claim_ids(&h, &run_req(10, 3, "relay-c")).await.is_empty());
        h.store.ack(&[claim_of(&again)]).await.unwrap();
    }
    assert!(claim_ids(&h, &run_req(10, 3, "relay-b")).await.is_empty());
}

pub async fn a_failed_run_head_releases_the_rest(h: Harness) {
    let k1 = put(&h, keyed(1, "k")).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let k3 = put(&h, keyed(3, "k")).await;
    let run = h.store.claim(&run_req(10, 3, "relay-a")).await.unwrap();
    assert_eq!(ids(&run), id_list(&[&k1, &k2, &k3]));
    // What a relay does when a run's head fails: nack it, release the rest unused.
    let nacked = h
        .store
        .nack(&[Nack {
            claim: claim_of(&run.messages[0]),
            error: "try later".into(),
            disposition: NackDisposition::Retry(ms(50)),
        }])
        .await
        .unwrap();
    assert_eq!(nacked, [NackOutcome::Requeued]);
    let rest: Vec<_> = run.messages[1..].iter().map(claim_of).collect();
    assert_eq!(
        h.store.release(&rest).await.unwrap(),
        [ClaimOutcome::Applied, ClaimOutcome::Applied]
    );
    assert!(
        claim_ids(&h, &run_req(10, 3, "relay-a")).await.is_empty(),
        "the key waits for its head's retry"
    );
    h.clock.advance(ms(50));
    let again = h.store.claim(&run_req(10, 3, "relay-a")).await.unwrap();
    assert_eq!(ids(&again), id_list(&[&k1, &k2, &k3]));
    let attempts: Vec<_> = again.messages.iter().map(|m| m.attempt_count).collect();
    assert_eq!(attempts, [2, 1, 1], "a released message spent no attempt");
}

pub async fn a_run_acked_tail_first_holds_its_key_until_its_head_is_acked(h: Harness) {
    let k1 = put(&h, keyed(1, "k")).await;
    let k2 = put(&h, keyed(2, "k")).await;
    let k3 = put(&h, keyed(3, "k")).await;
    let k4 = put(&h, keyed(4, "k")).await;
    let free = put(&h, draft(5)).await;
    let batch = h.store.claim(&run_req(10, 3, "relay-a")).await.unwrap();
    assert_eq!(ids(&batch), id_list(&[&k1, &k2, &k3, &free]));
    // The run's tail and a message without a key, the head left out.
    let tail = [
        claim_of(&batch.messages[2]),
        claim_of(&batch.messages[3]),
        claim_of(&batch.messages[1]),
    ];
    assert_eq!(
        h.store.ack(&tail).await.unwrap(),
        [ClaimOutcome::Applied; 3]
    );
    assert!(
        claim_ids(&h, &run_req(10, 3, "relay-b")).await.is_empty(),
        "k4 waits behind its head, still in flight"
    );
    // The head, named twice, beside a claim already acked: one applies.
    let head = claim_of(&batch.messages[0]);
    assert_eq!(
        h.store.ack(&[tail[0], head, head]).await.unwrap(),
        [
            ClaimOutcome::LostClaim,
            ClaimOutcome::Applied,
            ClaimOutcome::LostClaim
        ]
    );
    assert_eq!(
        claim_ids(&h, &run_req(10, 3, "relay-b")).await,
        [k4.outbox_id]
    );
}

pub async fn concurrent_claimers_with_key_runs_keep_per_key_order(h: Harness) {
    super::ordering::claimers_keep_per_key_order(h, |i| 1 + i % 4).await;
}
