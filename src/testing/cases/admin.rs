//! What operators and idle relays ask: list, stats, requeue, discard, purge, next_due and
//! wake-ups.

use crate::store::{
    ClaimOutcome, ClaimRequest, LaneStats, MessageFilter, Nack, NackDisposition, NackOutcome,
    PageRequest, WakeUp,
};
use crate::store::{LaneCount, OrderingPolicy, PurgeRequest};
use crate::time::Clock;
use crate::OutboxStatus;
use tokio::sync::broadcast;

use super::*;

/// How long a wake-up may take to arrive (PostgreSQL's comes back through LISTEN).
const WAKE_WAIT: Duration = Duration::from_secs(10);

fn page(after: Option<i64>, limit: usize) -> PageRequest {
    PageRequest { after, limit }
}

/// Claims one message of (lane, target) and dead-letters it.
async fn dead_letter(h: &Harness, lane: &str, target: &str, error: &str) -> OutboxMessage {
    let request = ClaimRequest::new(lane, target, 1, LEASE, "relay-a");
    let claimed = claim_one(h, &request).await;
    let outcome = h
        .store
        .nack(&[Nack {
            claim: claim_of(&claimed),
            error: error.to_owned(),
            disposition: NackDisposition::Permanent,
        }])
        .await
        .unwrap();
    assert_eq!(outcome, [NackOutcome::DeadLettered]);
    get(h, claimed.outbox_id).await
}

/// Claims one message of the default lane and acks it.
async fn deliver_one(h: &Harness) -> OutboxMessage {
    let claimed = claim_one(h, &claim_req(1, "relay-a")).await;
    assert_eq!(
        h.store.ack(&[claim_of(&claimed)]).await.unwrap(),
        [ClaimOutcome::Applied]
    );
    get(h, claimed.outbox_id).await
}

fn lane_stats<'a>(stats: &'a [LaneStats], lane: &str, target: &str) -> &'a LaneStats {
    stats
        .iter()
        .find(|s| s.lane == lane && s.target == target)
        .unwrap_or_else(|| panic!("no stats for {lane}/{target}: {stats:?}"))
}

/// Every page of `filter`, `limit` at a time: the pages' ids and whether each had a cursor.
async fn pages(h: &Harness, filter: &MessageFilter, limit: usize) -> Vec<(Vec<Uuid>, bool)> {
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = h.store.list(filter, page(after, limit)).await.unwrap();
        let ids = page.messages.iter().map(|m| m.outbox_id).collect();
        pages.push((ids, page.next_cursor.is_some()));
        match page.next_cursor {
            Some(cursor) => after = Some(cursor),
            None => return pages,
        }
        assert!(pages.len() < 100, "pagination does not end");
    }
}

pub async fn list_pages_in_enqueue_order_with_filters(h: Harness) {
    let mut mine = Vec::new();
    let mut other = Vec::new();
    for value in 0..5 {
        mine.push(put(&h, draft(value)).await.outbox_id);
        other.push(put(&h, draft_in("other", "billing", value)).await.outbox_id);
    }
    let pages_of_mine = pages(&h, &MessageFilter::lane(LANE, TARGET), 2).await;
    assert_eq!(
        pages_of_mine,
        [
            (mine[0..2].to_vec(), true),
            (mine[2..4].to_vec(), true),
            (mine[4..].to_vec(), false),
        ]
    );
    // A last page that is exactly full has no cursor.
    let pages_of_other = pages(
        &h,
        &MessageFilter {
            lane: Some("other".into()),
            ..MessageFilter::all()
        },
        5,
    )
    .await;
    assert_eq!(pages_of_other, [(other.clone(), false)]);
    let everything: Vec<_> = all_messages(&h).await.iter().map(|m| m.outbox_id).collect();
    let interleaved: Vec<_> = mine
        .iter()
        .zip(&other)
        .flat_map(|(a, b)| [*a, *b])
        .collect();
    assert_eq!(everything, interleaved, "enqueue order across lanes");

    // Filters: status, target, ids, ordering key; the empty result.
    let claimed = claim_ids(&h, 2).await;
    let by_status = h
        .store
        .list(
            &MessageFilter::all().with_status(OutboxStatus::Claimed),
            page(None, 10),
        )
        .await
        .unwrap();
    assert_eq!(
        by_status
            .messages
            .iter()
            .map(|m| m.outbox_id)
            .collect::<Vec<_>>(),
        claimed
    );
    let by_target = MessageFilter {
        target: Some("billing".into()),
        ..MessageFilter::all()
    };
    assert_eq!(pages(&h, &by_target, 10).await, [(other.clone(), false)]);
    let by_ids = MessageFilter::all().with_ids([other[3], mine[1], Uuid::new_v4()]);
    assert_eq!(
        pages(&h, &by_ids, 10).await,
        [(vec![mine[1], other[3]], false)]
    );
    let keyed_one = put(&h, keyed(9, "k")).await;
    let by_key = MessageFilter {
        ordering_key: Some("k".into()),
        ..MessageFilter::all()
    };
    assert_eq!(
        pages(&h, &by_key, 10).await,
        [(vec![keyed_one.outbox_id], false)]
    );
    let none = MessageFilter::lane("nowhere", TARGET);
    assert_eq!(pages(&h, &none, 10).await, [(vec![], false)]);
}

async fn claim_ids(h: &Harness, limit: usize) -> Vec<Uuid> {
    ids(&h.store.claim(&claim_req(limit, "relay-a")).await.unwrap())
}

pub async fn stats_count_every_status_per_lane(h: Harness) {
    assert!(h
        .store
        .stats(&MessageFilter::all())
        .await
        .unwrap()
        .is_empty());
    put(&h, draft(1).with_max_attempts(1)).await; // dead
    put(&h, draft(2)).await; // delivered
    put(&h, draft(3)).await; // claimed
    dead_letter(&h, LANE, TARGET, "boom").await;
    deliver_one(&h).await;
    claim_one(&h, &claim_req(1, "relay-a")).await;
    h.clock.advance(ms(10_000));
    put(&h, draft(4)).await; // pending, 10 s older than the next
    h.clock.advance(ms(10_000));
    put(&h, draft(5).with_delay(ms(60_000))).await; // pending, not yet due
    put(&h, draft_in("other", TARGET, 6)).await;
    h.clock.advance(ms(2_500));

    let stats = h.store.stats(&MessageFilter::all()).await.unwrap();
    assert_eq!(stats.len(), 2, "{stats:?}");
    let mine = lane_stats(&stats, LANE, TARGET);
    assert_eq!(
        (mine.pending, mine.claimed, mine.delivered, mine.dead_letter),
        (2, 1, 1, 1)
    );
    assert_eq!(mine.oldest_pending_age, Some(ms(12_500)));
    assert_eq!(mine.blocked_keys, 0);
    let other = lane_stats(&stats, "other", TARGET);
    assert_eq!(
        (
            other.pending,
            other.claimed,
            other.delivered,
            other.dead_letter
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(other.oldest_pending_age, Some(ms(2_500)));

    let only_other = h
        .store
        .stats(&MessageFilter {
            lane: Some("other".into()),
            ..MessageFilter::all()
        })
        .await
        .unwrap();
    assert_eq!(only_other, std::slice::from_ref(other));
    // The status of a filter is ignored by stats.
    let with_status = h
        .store
        .stats(&MessageFilter::lane(LANE, TARGET).with_status(OutboxStatus::Delivered))
        .await
        .unwrap();
    assert_eq!(with_status, std::slice::from_ref(mine));

    // Claims the due pending one and the one whose lease lapsed long ago.
    let claimed = h.store.claim(&claim_req(10, "relay-a")).await.unwrap();
    assert_eq!(claimed.messages.len(), 2);
    let stats = h
        .store
        .stats(&MessageFilter::lane(LANE, TARGET))
        .await
        .unwrap();
    assert_eq!((stats[0].pending, stats[0].claimed), (1, 2));
    assert_eq!(
        stats[0].oldest_pending_age, None,
        "the delayed one is not due, so it is not old"
    );
    h.clock.advance(ms(60_000));
    let stats = h
        .store
        .stats(&MessageFilter::lane(LANE, TARGET))
        .await
        .unwrap();
    assert_eq!(
        stats[0].oldest_pending_age,
        Some(ms(62_500)),
        "once due, its age counts from its enqueue"
    );
}

/// [`Outbox::lanes_stats`](crate::Outbox::lanes_stats): the stats of many lanes in one
/// call, each as [`Outbox::stats`](crate::Outbox::stats) of its lane answers them; a lane
/// without messages, and one not asked for, are absent.
pub async fn lanes_stats_answer_for_many_lanes_at_once(h: Harness) {
    let none: Vec<(String, String)> = Vec::new();
    assert!(h.store.lanes_stats(&none).await.unwrap().is_empty());
    // A blocked key in the default lane: its head dead-lettered, a message behind it.
    put(&h, keyed(1, "k").with_max_attempts(1)).await;
    put(&h, keyed(2, "k")).await;
    dead_letter(&h, LANE, TARGET, "boom").await;
    h.clock.advance(ms(5_000));
    put(&h, draft(3)).await;
    put(&h, draft_in("other", TARGET, 4)).await;
    put(&h, draft_in("other", "elsewhere", 5)).await;
    put(&h, draft_in("unasked", TARGET, 6)).await;
    h.clock.advance(ms(1_500));

    let asked: Vec<(String, String)> = [
        ("other", "elsewhere"),
        ("empty", TARGET),
        (LANE, TARGET),
        ("other", TARGET),
        (LANE, TARGET),
    ]
    .iter()
    .map(|(lane, target)| ((*lane).to_owned(), (*target).to_owned()))
    .collect();
    let stats = h.store.lanes_stats(&asked).await.unwrap();
    let mut each = Vec::new();
    for (lane, target) in [(LANE, TARGET), ("other", "elsewhere"), ("other", TARGET)] {
        each.extend(
            h.store
                .stats(&MessageFilter::lane(lane, target))
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        stats, each,
        "one per lane with messages, sorted, as each lane's own stats"
    );
    let mine = lane_stats(&stats, LANE, TARGET);
    assert_eq!(
        (
            mine.pending,
            mine.claimed,
            mine.dead_letter,
            mine.blocked_keys
        ),
        (2, 0, 1, 1)
    );
    assert_eq!(mine.oldest_pending_age, Some(ms(6_500)));
    let other = lane_stats(&stats, "other", TARGET);
    assert_eq!(
        (other.pending, other.oldest_pending_age),
        (1, Some(ms(1_500)))
    );
}

pub async fn requeue_dead_letters_by_ids_and_by_lane(h: Harness) {
    put(&h, draft(1)).await;
    put(&h, draft(2)).await;
    put(&h, draft_in("other", TARGET, 3)).await;
    let d1 = dead_letter(&h, LANE, TARGET, "first failure").await;
    let d2 = dead_letter(&h, LANE, TARGET, "second failure").await;
    let d3 = dead_letter(&h, "other", TARGET, "third failure").await;
    let live = put(&h, draft(4)).await;
    put(&h, draft_in("done", TARGET, 5)).await;
    let done = claim_one(&h, &ClaimRequest::new("done", TARGET, 1, LEASE, "r")).await;
    h.store.ack(&[claim_of(&done)]).await.unwrap();
    let delivered = get(&h, done.outbox_id).await;
    h.clock.advance(ms(5_000));

    // By ids: only the dead letters among them move.
    let by_ids = MessageFilter::all().with_ids([d1.outbox_id, live.outbox_id, delivered.outbox_id]);
    assert_eq!(h.store.requeue_dead_letters(&by_ids).await.unwrap(), 1);
    let requeued = get(&h, d1.outbox_id).await;
    assert_unclaimed(&requeued, OutboxStatus::Pending);
    assert_eq!(requeued.attempt_count, 0);
    assert_eq!(requeued.last_error.as_deref(), Some("first failure"));
    assert_eq!(requeued.available_at, h.clock.now_millis());
    assert_eq!(get(&h, live.outbox_id).await, live);
    assert_eq!(get(&h, delivered.outbox_id).await, delivered);
    assert_eq!(get(&h, d2.outbox_id).await, d2);

    // By lane: only that lane's.
    let other_lane = MessageFilter::lane("other", TARGET);
    assert_eq!(h.store.requeue_dead_letters(&other_lane).await.unwrap(), 1);
    assert_eq!(get(&h, d3.outbox_id).await.status, OutboxStatus::Pending);
    assert_eq!(get(&h, d2.outbox_id).await, d2);
    assert_eq!(h.store.requeue_dead_letters(&other_lane).await.unwrap(), 0);

    // Claimable at once, oldest first, attempts counting from one again.
    let batch = h.store.claim(&claim_req(10, "relay-a")).await.unwrap();
    let claimed: Vec<_> = batch
        .messages
        .iter()
        .map(|m| (m.outbox_id, m.attempt_count))
        .collect();
    assert_eq!(claimed, [(live.outbox_id, 1), (d1.outbox_id, 1)]);
    let other = claim_one(&h, &ClaimRequest::new("other", TARGET, 10, LEASE, "r")).await;
    assert_eq!(other.outbox_id, d3.outbox_id);
}

pub async fn discard_deletes_only_dead_letters(h: Harness) {
    put(&h, draft(1)).await;
    let delivered = put(&h, draft(2)).await;
    put(&h, draft_in("other", TARGET, 3)).await;
    let d1 = dead_letter(&h, LANE, TARGET, "boom").await;
    let delivered_now = deliver_one(&h).await;
    assert_eq!(delivered_now.outbox_id, delivered.outbox_id);
    put(&h, draft(4)).await;
    let d2 = dead_letter(&h, LANE, TARGET, "boom").await;
    let d3 = dead_letter(&h, "other", TARGET, "boom").await;
    let pending = put(&h, draft(5)).await;

    let by_ids =
        MessageFilter::all().with_ids([d1.outbox_id, pending.outbox_id, delivered.outbox_id]);
    assert_eq!(h.store.discard_dead_letters(&by_ids).await.unwrap(), 1);
    assert_eq!(h.store.get(d1.outbox_id).await.unwrap(), None);
    assert_eq!(get(&h, pending.outbox_id).await, pending);
    assert_eq!(get(&h, delivered.outbox_id).await, delivered_now);

    let mine = MessageFilter::lane(LANE, TARGET);
    assert_eq!(h.store.discard_dead_letters(&mine).await.unwrap(), 1);
    assert_eq!(h.store.get(d2.outbox_id).await.unwrap(), None);
    assert_eq!(get(&h, d3.outbox_id).await, d3);
    assert_eq!(
        h.store
            .discard_dead_letters(&MessageFilter::all())
            .await
            .unwrap(),
        1
    );
    let left: Vec<_> = all_messages(&h).await.iter().map(|m| m.outbox_id).collect();
    assert_eq!(left, [delivered.outbox_id, pending.outbox_id]);
}

pub async fn purge_deletes_old_finished_rows_in_batches(h: Harness) {
    for value in 0..5 {
        put(&h, draft(value)).await;
    }
    let mut old_finished = Vec::new();
    for _ in 0..3 {
        old_finished.push(deliver_one(&h).await.outbox_id);
    }
    for _ in 0..2 {
        old_finished.push(dead_letter(&h, LANE, TARGET, "boom").await.outbox_id);
    }
    let old_claimed = put(&h, draft(10)).await;
    put(&h, draft(11)).await; // stays pending
    let day = ms(86_400_000);
    let held = claim_one(&h, &ClaimRequest::new(LANE, TARGET, 1, day, "relay-a")).await;
    assert_eq!(held.outbox_id, old_claimed.outbox_id);

    // Two hours later, two rows finish in another lane: young, so purge keeps them.
    h.clock.advance(ms(2 * 3_600_000));
    h.store
        .enqueue_many(vec![
            draft_in("other", TARGET, 12),
            draft_in("other", TARGET, 13),
        ])
        .await
        .unwrap();
    let young = h
        .store
        .claim(&ClaimRequest::new("other", TARGET, 2, LEASE, "relay-a"))
        .await
        .unwrap();
    assert_eq!(young.messages.len(), 2);
    h.store.ack(&[claim_of(&young.messages[0])]).await.unwrap();
    h.store
        .nack(&[Nack {
            claim: claim_of(&young.messages[1]),
            error: "young".into(),
            disposition: NackDisposition::Permanent,
        }])
        .await
        .unwrap();
    h.clock.advance(ms(30 * 60_000));

    let before = all_messages(&h).await;
    assert_eq!(before.len(), 9);
    let purged = h
        .store
        .purge(&PurgeRequest::older_than(ms(3_600_000), 2))
        .await
        .unwrap();
    assert_eq!(
        purged,
        [lane_count(LANE, 5)],
        "all five old finished rows, two at a time"
    );
    let left = all_messages(&h).await;
    let expected: Vec<_> = before
        .iter()
        .filter(|m| !old_finished.contains(&m.outbox_id))
        .cloned()
        .collect();
    assert_eq!(left, expected, "live and young rows untouched");
    let statuses: Vec<_> = left.iter().map(|m| m.status).collect();
    assert_eq!(
        statuses,
        [
            OutboxStatus::Claimed,
            OutboxStatus::Pending,
            OutboxStatus::Delivered,
            OutboxStatus::DeadLetter
        ]
    );
    assert_eq!(
        h.store
            .purge(&PurgeRequest::older_than(ms(3_600_000), 2))
            .await
            .unwrap(),
        []
    );

    // An hour on, the young rows are old too; live rows never go, however old.
    h.clock.advance(ms(3_600_000));
    assert_eq!(
        h.store
            .purge(&PurgeRequest::older_than(ms(3_600_000), 100))
            .await
            .unwrap(),
        [lane_count("other", 2)]
    );
    let left: Vec<_> = all_messages(&h).await.iter().map(|m| m.status).collect();
    assert_eq!(left, [OutboxStatus::Claimed, OutboxStatus::Pending]);
}

pub async fn purge_ages_each_status_apart_and_narrows_to_a_lane(h: Harness) {
    // At 0: in each of two lanes, one delivered and one dead letter.
    let mut finished = Vec::new();
    for lane in [LANE, "other"] {
        h.store
            .enqueue_many(vec![draft_in(lane, TARGET, 1), draft_in(lane, TARGET, 2)])
            .await
            .unwrap();
        let batch = h
            .store
            .claim(&ClaimRequest::new(lane, TARGET, 2, LEASE, "relay-a"))
            .await
            .unwrap();
        assert_eq!(batch.messages.len(), 2);
        h.store.ack(&[claim_of(&batch.messages[0])]).await.unwrap();
        h.store
            .nack(&[Nack {
                claim: claim_of(&batch.messages[1]),
                error: "poison".into(),
                disposition: NackDisposition::Permanent,
            }])
            .await
            .unwrap();
        finished.push((
            lane,
            batch.messages[0].outbox_id,
            batch.messages[1].outbox_id,
        ));
    }
    let hour = ms(3_600_000);
    let status_of = |id| {
        let h = &h;
        async move { h.store.get(id).await.unwrap().map(|m| m.status) }
    };

    // Two hours on: delivered rows are past a 1h retention, dead letters within a 3h one.
    h.clock.advance(hour * 2);
    let request = PurgeRequest::per_status(hour, hour * 3, 1);
    let dry = request.clone().dry_run();
    assert_eq!(
        h.store.purge(&dry).await.unwrap(),
        [lane_count(LANE, 1), lane_count("other", 1)],
        "a dry run counts both lanes"
    );
    assert_eq!(all_messages(&h).await.len(), 4, "and deletes nothing");
    let purged = h
        .store
        .purge(&request.clone().in_lanes([(LANE, TARGET)]))
        .await
        .unwrap();
    assert_eq!(
        purged,
        [lane_count(LANE, 1)],
        "only this lane's delivered row"
    );
    let (_, delivered, dead) = finished[0];
    assert_eq!(status_of(delivered).await, None);
    assert_eq!(status_of(dead).await, Some(OutboxStatus::DeadLetter));
    let (_, other_delivered, other_dead) = finished[1];
    assert_eq!(
        status_of(other_delivered).await,
        Some(OutboxStatus::Delivered)
    );

    // Every lane: the other lane's delivered row goes; dead letters are still young.
    assert_eq!(
        h.store.purge(&request).await.unwrap(),
        [lane_count("other", 1)]
    );
    assert_eq!(status_of(other_delivered).await, None);
    assert_eq!(status_of(other_dead).await, Some(OutboxStatus::DeadLetter));

    // A status without an age is kept, however old.
    h.clock.advance(hour * 2);
    let keep_dead = PurgeRequest {
        dead_letter_older_than: None,
        ..request.clone()
    };
    assert_eq!(h.store.purge(&keep_dead).await.unwrap(), []);
    // Four hours on, past the dead letters' 3h: both go, one statement at a time.
    assert_eq!(
        h.store
            .purge(&dry.in_lanes([("other", TARGET)]))
            .await
            .unwrap(),
        [lane_count("other", 1)]
    );
    assert_eq!(
        h.store.purge(&request).await.unwrap(),
        [lane_count(LANE, 1), lane_count("other", 1)]
    );
    assert_eq!(status_of(dead).await, None);
    assert_eq!(status_of(other_dead).await, None);
}

/// The count of `lane` (of [`TARGET`]) in a purge's answer.
fn lane_count(lane: &str, count: u64) -> LaneCount {
    LaneCount {
        lane: lane.to_owned(),
        target: TARGET.to_owned(),
        count,
    }
}

pub async fn next_due_tracks_the_next_claimable_moment(h: Harness) {
    let next_due = || h.store.next_due(LANE, TARGET, OrderingPolicy::Skip);
    assert_eq!(next_due().await.unwrap(), None, "empty");
    put(&h, draft(1).with_delay(ms(3_000))).await;
    assert_eq!(next_due().await.unwrap(), Some(ms(3_000)));
    h.clock.advance(ms(1_000));
    assert_eq!(next_due().await.unwrap(), Some(ms(2_000)));
    let now = put(&h, draft(2)).await;
    assert_eq!(next_due().await.unwrap(), Some(Duration::ZERO), "due now");

    // A claimed message counts from its lease lapse.
    let claimed = claim_one(&h, &ClaimRequest::new(LANE, TARGET, 10, ms(1_500), "r")).await;
    assert_eq!(claimed.outbox_id, now.outbox_id);
    assert_eq!(next_due().await.unwrap(), Some(ms(1_500)));
    h.clock.advance(ms(1_700)); // the lease lapsed 200 ms ago: claimable now
    assert_eq!(next_due().await.unwrap(), Some(Duration::ZERO));
    h.store.ack(&[claim_of(&claimed)]).await.unwrap();
    assert_eq!(next_due().await.unwrap(), Some(ms(300)), "the delayed one");

    // A retry counts from its retry delay.
    h.clock.advance(ms(300));
    let delayed = claim_one(&h, &claim_req(10, "r")).await;
    h.store
        .nack(&[Nack {
            claim: claim_of(&delayed),
            error: "busy".into(),
            disposition: NackDisposition::Retry(ms(700)),
        }])
        .await
        .unwrap();
    assert_eq!(next_due().await.unwrap(), Some(ms(700)));
    assert_eq!(
        h.store
            .next_due("other", TARGET, OrderingPolicy::Skip)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        h.store
            .next_due(LANE, "billing", OrderingPolicy::Skip)
            .await
            .unwrap(),
        None
    );

    // Finished messages are nothing to wait for.
    h.clock.advance(ms(700));
    let retried = claim_one(&h, &claim_req(10, "r")).await;
    h.store
        .nack(&[Nack {
            claim: claim_of(&retried),
            error: "gone".into(),
            disposition: NackDisposition::Permanent,
        }])
        .await
        .unwrap();
    assert_eq!(next_due().await.unwrap(), None);
}

/// Waits for a wake-up concerning the default lane; a lag counts (it means "look").
async fn woken(wakeups: &mut broadcast::Receiver<WakeUp>) {
    let wait = async {
        loop {
            match wakeups.recv().await {
                Ok(wake) if wake.concerns(LANE, TARGET) => return,
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => panic!("wake-ups closed"),
            }
        }
    };
    tokio::time::timeout(WAKE_WAIT, wait)
        .await
        .expect("a wake-up for the lane");
}

pub async fn enqueue_and_requeue_wake_subscribers(h: Harness) {
    let mut wakeups = h.store.subscribe();
    put(&h, draft(1).with_max_attempts(1)).await;
    woken(&mut wakeups).await;

    let mut batch_wakeups = h.store.subscribe();
    h.store
        .enqueue_many(vec![draft(2), draft_in("other", TARGET, 3)])
        .await
        .unwrap();
    woken(&mut batch_wakeups).await;

    dead_letter(&h, LANE, TARGET, "boom").await;
    let mut requeue_wakeups = h.store.subscribe();
    assert_eq!(
        h.store
            .requeue_dead_letters(&MessageFilter::lane(LANE, TARGET))
            .await
            .unwrap(),
        1
    );
    woken(&mut requeue_wakeups).await;
}

/// Every page of `filter`, `limit` at a time, flattened: the ids in order. Checks that no
/// page is over the limit and that the listing ends.
async fn listed(h: &Harness, filter: &MessageFilter, limit: usize) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for (page, _) in pages(h, filter, limit).await {
        assert!(page.len() <= limit, "a page over its limit: {page:?}");
        ids.extend(page);
    }
    ids
}

pub async fn list_filters_by_enqueue_time_and_error_text(h: Harness) {
    // Six messages a second apart; the first four dead-lettered with different errors.
    let start = h.clock.now_millis();
    let mut sent = Vec::new();
    for value in 0..6 {
        sent.push(put(&h, draft(value)).await);
        h.clock.advance(Duration::from_secs(1));
    }
    let at = |second: u64| std::time::SystemTime::from(start + Duration::from_secs(second));
    for error in [
        "connection refused by 10.0.0.7",
        "timeout after 5s",
        "HTTP 503: refused",
        "50% of the batch_size",
    ] {
        dead_letter(&h, LANE, TARGET, error).await;
    }
    let ids = |range: std::ops::Range<usize>| -> Vec<Uuid> {
        sent[range].iter().map(|m| m.outbox_id).collect()
    };
    let lane = MessageFilter::lane(LANE, TARGET);

    // [after, before): the first instant is in, the last is out.
    let range = lane.clone().enqueued_between(Some(at(1)), Some(at(3)));
    for limit in [1, 2, 10] {
        assert_eq!(listed(&h, &range, limit).await, ids(1..3), "limit {limit}");
    }
    let from = lane.clone().enqueued_between(Some(at(4)), None);
    assert_eq!(listed(&h, &from, 10).await, ids(4..6));
    let until = lane.clone().enqueued_between(None, Some(at(2)));
    assert_eq!(listed(&h, &until, 10).await, ids(0..2));
    let dead_in_range = range.clone().with_status(OutboxStatus::DeadLetter);
    assert_eq!(listed(&h, &dead_in_range, 10).await, ids(1..3));
    let pending_in_range = lane
        .clone()
        .enqueued_between(Some(at(2)), Some(at(6)))
        .with_status(OutboxStatus::Pending);
    assert_eq!(listed(&h, &pending_in_range, 10).await, ids(4..6));
    let empty = lane.clone().enqueued_between(Some(at(10)), None);
    assert_eq!(listed(&h, &empty, 10).await, Vec::<Uuid>::new());

    // The error text: a case-sensitive plain substring, pattern characters included ("_"
    // would match the space of "of the" as a LIKE pattern).
    let error = |text: &str| lane.clone().with_error_containing(text);
    assert_eq!(
        listed(&h, &error("refused"), 1).await,
        [sent[0].outbox_id, sent[2].outbox_id]
    );
    assert_eq!(listed(&h, &error("Refused"), 10).await, Vec::<Uuid>::new());
    assert_eq!(listed(&h, &error("%"), 10).await, ids(3..4));
    assert_eq!(listed(&h, &error("of_the"), 10).await, Vec::<Uuid>::new());
    assert_eq!(listed(&h, &error("batch_size"), 10).await, ids(3..4));
    // Both: the refused ones enqueued from second 1.
    let both = error("refused").enqueued_between(Some(at(1)), None);
    assert_eq!(listed(&h, &both, 10).await, ids(2..3));

    // Stats, requeue and discard honour them too.
    let stats = h.store.stats(&error("refused")).await.unwrap();
    assert_eq!(lane_stats(&stats, LANE, TARGET).dead_letter, 2, "{stats:?}");
    assert_eq!(
        h.store
            .requeue_dead_letters(&error("timeout"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        get(&h, sent[1].outbox_id).await.status,
        OutboxStatus::Pending
    );
    assert_eq!(
        h.store
            .discard_dead_letters(&lane.clone().enqueued_between(None, Some(at(1))))
            .await
            .unwrap(),
        1
    );
    let left = listed(&h, &lane, 10).await;
    assert_eq!(left, ids(1..6), "only the first message was discarded");
}

pub async fn a_rare_match_is_found_across_short_pages(h: Harness) {
    // 60 messages, only the last one dead-lettered with the text looked for: a store may
    // answer short pages with a cursor on the way, but never loses or repeats a match.
    let mut sent = Vec::new();
    for value in 0..60 {
        sent.push(put(&h, draft(value)).await.outbox_id);
    }
    let request = ClaimRequest::new(LANE, TARGET, 60, LEASE, "relay-a");
    let batch = h.store.claim(&request).await.unwrap();
    assert_eq!(batch.messages.len(), 60);
    let (last, rest) = batch.messages.split_last().expect("a batch");
    h.store
        .ack(&rest.iter().map(claim_of).collect::<Vec<_>>())
        .await
        .unwrap();
    h.store
        .nack(&[Nack {
            claim: claim_of(last),
            error: "needle".to_owned(),
            disposition: NackDisposition::Permanent,
        }])
        .await
        .unwrap();
    let filter = MessageFilter::lane(LANE, TARGET).with_error_containing("needle");
    for limit in [1, 2, 5] {
        assert_eq!(
            listed(&h, &filter, limit).await,
            [sent[59]],
            "limit {limit}"
        );
    }
    let dead = filter.with_status(OutboxStatus::DeadLetter);
    assert_eq!(listed(&h, &dead, 1).await, [sent[59]]);
}
