//! The quiet idle path: a short claim's `next_due` answer lets an idle lane sleep after its
//! ack without another store call, unless something since may have made work claimable.

use super::*;

/// A short claim of `messages` that also says when the next message is due.
fn short_batch(core: &LaneCore, messages: &[OutboxMessage], due: Option<Duration>) -> Input {
    batch_saying(core, messages, due)
}

fn wake_at(commands: &[Command]) -> Option<Instant> {
    commands.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Poll,
            at,
            ..
        } => Some(*at),
        _ => None,
    })
}

fn asks_next_due(commands: &[Command]) -> bool {
    has(commands, |c| {
        matches!(c, Command::Store(StoreRequest::NextDue))
    })
}

/// An idle lane with one message of `key` delivered from a short claim that said the next
/// message is due in `due`; returns the slot and the message.
fn delivering(
    core: &mut LaneCore,
    now: Instant,
    key: Option<&str>,
    due: Option<Duration>,
) -> (Slot, OutboxMessage) {
    let first = message(key);
    core.handle(now, Input::Start);
    let out = core.handle(now, short_batch(core, std::slice::from_ref(&first), due));
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    (slot, first)
}

#[test]
fn after_the_ack_an_idle_lane_sleeps_on_the_short_claims_answer_without_next_due() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 2), false);
    let (slot, first) = delivering(&mut core, now, None, Some(Duration::from_secs(3)));
    let out = core.handle(now, done(slot, &first));
    assert_eq!(acks(&out), vec![first.claim().unwrap()]);
    assert!(claims(&out).is_empty(), "{out:?}");
    let later = now + Duration::from_millis(2);
    let out = core.handle(later, acked_all(1));
    assert!(!asks_next_due(&out), "{out:?}");
    assert!(claims(&out).is_empty(), "{out:?}");
    // The due time is an instant from the claim's answer, not from the ack's.
    assert_eq!(wake_at(&out), Some(now + Duration::from_secs(3)), "{out:?}");
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::Idle { .. })
    )));
    // A wake-up then makes one claim, as always.
    assert_eq!(claims(&core.handle(later, Input::Wake)), vec![4]);
}

#[test]
fn an_empty_claim_with_an_answer_sleeps_at_once_and_nothing_due_sleeps_the_poll_ceiling() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false);
    core.handle(now, Input::Start);
    let out = core.handle(now, short_batch(&core, &[], None));
    assert!(!asks_next_due(&out), "{out:?}");
    assert_eq!(wake_at(&out), Some(now + DEFAULT_MAX_POLL), "{out:?}");
}

#[test]
fn a_wake_up_between_the_claim_and_the_ack_is_claimed_at_once() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let (slot, first) = delivering(&mut core, now, None, None);
    // An enqueue while the delivery runs: the answer "nothing to wait for" is stale.
    assert_eq!(claims(&core.handle(now, Input::Wake)), vec![1]);
    let out = core.handle(now, done(slot, &first));
    assert_eq!(acks(&out), vec![first.claim().unwrap()]);
    let out = core.handle(now, acked_all(1));
    assert!(wake_at(&out).is_none(), "the claim is still out: {out:?}");
    let second = message(None);
    let out = core.handle(now, short_batch(&core, std::slice::from_ref(&second), None));
    assert_eq!(delivered(&out).len(), 1, "{out:?}");
}

#[test]
fn a_nack_forgets_the_answer_and_the_lane_asks_next_due() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let (slot, first) = delivering(&mut core, now, None, None);
    let out = core.handle(
        now,
        Input::DeliveryDone {
            slot,
            outbox_id: first.outbox_id,
            result: Err(DeliveryFailure::timeout(Duration::from_secs(1))),
            elapsed: Duration::from_millis(5),
        },
    );
    assert!(
        has(&out, |c| matches!(c, Command::Store(StoreRequest::Nack(_)))),
        "{out:?}"
    );
    let out = core.handle(
        now,
        Input::Store(StoreAnswer::Nacked(Ok(vec![NackOutcome::Requeued]))),
    );
    assert!(asks_next_due(&out), "the retry may be due sooner: {out:?}");
}

#[test]
fn a_lost_ack_forgets_the_answer_and_the_lane_asks_next_due() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let (slot, first) = delivering(&mut core, now, None, None);
    core.handle(now, done(slot, &first));
    let out = core.handle(
        now,
        Input::Store(StoreAnswer::Acked {
            result: Ok(vec![ClaimOutcome::LostClaim]),
            wall_ms: UnixMillis::EPOCH,
        }),
    );
    assert!(asks_next_due(&out), "{out:?}");
}

#[test]
fn an_acked_ordering_key_head_claims_its_successor_instead_of_sleeping() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let (slot, first) = delivering(&mut core, now, Some("k"), None);
    core.handle(now, done(slot, &first));
    let out = core.handle(now, acked_all(1));
    assert_eq!(claims(&out), vec![2], "{out:?}");
    assert!(wake_at(&out).is_none(), "{out:?}");
}

#[test]
fn a_store_that_does_not_answer_next_due_in_its_claim_is_asked() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false);
    core.handle(now, Input::Start);
    let out = core.handle(now, batch(&core, &[]));
    assert!(asks_next_due(&out), "{out:?}");
}

#[test]
fn a_wake_up_while_the_claim_is_out_is_not_lost_when_the_answer_comes_back_short() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![1]);
    // An enqueue commits while the claim runs: the claim's snapshot may not see its row.
    let out = core.handle(now, Input::Wake);
    assert!(claims(&out).is_empty(), "one claim at a time: {out:?}");
    // The claim comes back empty, "nothing to wait for": that answer predates the wake-up.
    let out = core.handle(now, short_batch(&core, &[], None));
    assert_eq!(claims(&out), vec![1], "the wake-up is claimed: {out:?}");
    assert!(
        wake_at(&out).is_none(),
        "no sleep on a stale answer: {out:?}"
    );
    // The second answer, with nothing since, is believed: the lane sleeps.
    let out = core.handle(now, short_batch(&core, &[], None));
    assert!(claims(&out).is_empty(), "{out:?}");
    assert_eq!(wake_at(&out), Some(now + DEFAULT_MAX_POLL), "{out:?}");
}

#[test]
fn a_wake_up_while_a_short_batch_is_claimed_claims_again_instead_of_trusting_its_answer() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![2]);
    core.handle(now, Input::Wake);
    let first = message(None);
    let out = core.handle(now, short_batch(&core, std::slice::from_ref(&first), None));
    assert_eq!(delivered(&out).len(), 1, "{out:?}");
    assert_eq!(claims(&out), vec![1], "the wake-up is claimed: {out:?}");
}

#[test]
fn a_wake_up_while_next_due_is_asked_claims_instead_of_sleeping_on_the_answer() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false);
    core.handle(now, Input::Start);
    // A short claim that could not say when the next message is due: the lane asks.
    let out = core.handle(
        now,
        claimed(
            &core,
            Ok(ClaimBatch {
                messages: Vec::new(),
                dead_lettered: Vec::new(),
                unreadable: Vec::new(),
                next_due: NextDue::Unknown,
            }),
        ),
    );
    assert!(asks_next_due(&out), "{out:?}");
    // An enqueue commits while the question is out: one call at a time, so no claim yet.
    let out = core.handle(now, Input::Wake);
    assert!(claims(&out).is_empty(), "{out:?}");
    // The answer predates the wake-up: the lane claims rather than sleep for three seconds.
    let out = core.handle(
        now,
        Input::Store(StoreAnswer::NextDue(Ok(Some(Duration::from_secs(3))))),
    );
    assert_eq!(claims(&out), vec![1], "{out:?}");
    assert_eq!(wake_at(&out), None, "{out:?}");
    assert!(!has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::Idle { .. })
    )));
}
