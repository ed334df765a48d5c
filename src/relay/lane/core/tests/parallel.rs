//! Several claims out at once (`claims_in_flight`): each takes its share of the window, the
//! answers come back in any order and each finds its own claim, and a failure, a wake-up,
//! a drain or a gate between them is handled as with one claim.

use super::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The claims among `commands`, as (id, limit).
fn claims_sent(commands: &[Command]) -> Vec<(ClaimId, usize)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Store(StoreRequest::Claim { claim, limit, .. })
            | Command::Store(StoreRequest::AckAndClaim { claim, limit, .. }) => {
                Some((*claim, *limit))
            }
            _ => None,
        })
        .collect()
}

fn answer(claim: ClaimId, messages: &[OutboxMessage], due: NextDue) -> Input {
    Input::Store(StoreAnswer::Claimed {
        claim,
        result: Ok(ClaimBatch {
            messages: messages.to_vec(),
            dead_lettered: Vec::new(),
            unreadable: Vec::new(),
            next_due: due,
        }),
    })
}

fn failure(claim: ClaimId) -> Input {
    Input::Store(StoreAnswer::Claimed {
        claim,
        result: Err(unavailable()),
    })
}

/// A lane of concurrency 4, prefetch 4, with two claims out: each for half the window.
fn two_out(now: Instant) -> (LaneCore, ClaimId, ClaimId) {
    let mut core = LaneCore::new(config(4, 4).claims_in_flight(2), false);
    let sent = claims_sent(&core.handle(now, Input::Start));
    let [(first, 4), (second, 4)] = sent[..] else {
        panic!("two claims of half the window each: {sent:?}");
    };
    (core, first, second)
}

#[test]
fn a_lane_keeps_its_claims_in_flight_out_each_for_its_share_of_the_window() {
    let now = Instant::now();
    let (mut core, _, _) = two_out(now);
    // Two of two out: a wake-up sends no third.
    assert!(claims(&core.handle(now, Input::Wake)).is_empty());

    // With one claim in flight, one claim takes the whole window, as before.
    let mut core = LaneCore::new(config(4, 4).claims_in_flight(1), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![8]);
    // An odd window rounds the share up; the second claim takes what is left.
    let mut core = LaneCore::new(config(3, 2).claims_in_flight(2), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![3, 2]);
}

#[test]
fn two_answers_in_either_order_each_fill_the_buffer_and_open_their_own_leases() {
    for reversed in [false, true] {
        let now = Instant::now();
        let (mut core, first, second) = two_out(now);
        let a: Vec<_> = (0..4).map(|_| message(None)).collect();
        let b: Vec<_> = (0..4).map(|_| message(None)).collect();
        let later = now + Duration::from_millis(3);
        let order = if reversed {
            [(second, &b), (first, &a)]
        } else {
            [(first, &a), (second, &b)]
        };
        let out = core.handle(later, answer(order[0].0, order[0].1, NextDue::Unknown));
        assert_eq!(delivered(&out).len(), 4, "{out:?}");
        assert!(
            claims(&out).is_empty(),
            "the window is full (4 running, the other claim may bring 4): {out:?}"
        );
        let out = core.handle(later, answer(order[1].0, order[1].1, NextDue::Unknown));
        assert_eq!(core.buffered(), 4, "{out:?}");
        // Each answer opened one batch of leases, timed from its own send.
        let leases = |out: &[Command]| {
            out.iter()
                .filter(|c| {
                    matches!(
                        c,
                        Command::TimerAt {
                            kind: TimerKind::Lease { .. },
                            ..
                        }
                    )
                })
                .count()
        };
        assert_eq!(leases(&out), 1, "{out:?}");
        // Both came back full: the store may have more, but the window is full until a
        // delivery finishes; then the lane claims for the freed room.
        assert!(claims(&out).is_empty(), "{out:?}");
        let running = delivered(&core.handle(later, Input::Wake));
        assert!(running.is_empty());
        let first_run: Vec<_> = order[0].1.clone();
        let slot = 0;
        let out = core.handle(later, done(slot, &first_run[0]));
        assert_eq!(
            delivered(&out).len(),
            1,
            "the buffer refills the slot: {out:?}"
        );
        assert_eq!(
            claims(&out),
            vec![1],
            "one slot freed, one claim for it beside the flush: {out:?}"
        );
    }
}

#[test]
fn an_answer_for_no_claim_out_is_ignored() {
    let now = Instant::now();
    let (mut core, first, _) = two_out(now);
    core.handle(now, answer(first, &[], NextDue::Unknown));
    // The same answer again (say, a duplicate): nothing happens, nothing is delivered.
    let out = core.handle(now, answer(first, &[message(None)], NextDue::Unknown));
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert_eq!(core.buffered(), 0);
}

#[test]
fn one_claim_failing_backs_off_while_the_other_is_delivered() {
    let now = Instant::now();
    let (mut core, first, second) = two_out(now);
    let out = core.handle(now, failure(first));
    assert!(
        has(&out, |c| matches!(
            c,
            Command::TimerAt {
                kind: TimerKind::StoreRetry,
                ..
            }
        )),
        "{out:?}"
    );
    assert!(claims(&out).is_empty(), "backing off: {out:?}");
    let messages = [message(None), message(None)];
    let out = core.handle(now, answer(second, &messages, NextDue::Unknown));
    assert_eq!(delivered(&out).len(), 2, "{out:?}");
    assert!(claims(&out).is_empty(), "still backing off: {out:?}");
    // The backoff ends: the lane claims again, for the room it has.
    let out = core.handle(now + secs(1), Input::timer(TimerKind::StoreRetry, 0));
    let sent = claims(&out);
    assert_eq!(sent.len(), 2, "two claims again: {out:?}");
    assert_eq!(sent.iter().sum::<usize>(), 6, "2 running of 8: {out:?}");
}

#[test]
fn a_wake_up_between_two_short_answers_makes_the_lane_claim_again() {
    let now = Instant::now();
    let (mut core, first, second) = two_out(now);
    // The first comes back empty with nothing since: "nothing more" for now.
    let out = core.handle(now, answer(first, &[], NextDue::Known(None)));
    assert!(claims(&out).is_empty(), "{out:?}");
    // An enqueue commits while the second claim is out: its snapshot may predate it.
    let out = core.handle(now, Input::Wake);
    assert_eq!(
        claims(&out).len(),
        1,
        "room and a wake-up: a claim beside the other"
    );
    let third = claims_sent(&out)[0].0;
    let out = core.handle(now, answer(second, &[], NextDue::Known(None)));
    assert!(
        !has(&out, |c| matches!(
            c,
            Command::Emit(RelayEvent::Idle { .. })
        )),
        "the second's empty answer proves nothing after the wake-up: {out:?}"
    );
    assert_eq!(claims(&out).len(), 1, "the lane claims again: {out:?}");
    // Once every claim came back empty with nothing since, the lane sleeps on the answer.
    let fourth = claims_sent(&out)[0].0;
    core.handle(now, answer(third, &[], NextDue::Known(None)));
    let out = core.handle(now, answer(fourth, &[], NextDue::Known(Some(secs(2)))));
    assert!(
        has(
            &out,
            |c| matches!(c, Command::Emit(RelayEvent::Idle { sleep, .. }) if *sleep == secs(2))
        ),
        "{out:?}"
    );
    assert!(!has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::NextDue)
    )));
}

#[test]
fn a_short_answer_with_the_other_claim_out_sleeps_on_nothing_until_that_one_is_back() {
    let now = Instant::now();
    let (mut core, first, second) = two_out(now);
    let out = core.handle(now, answer(first, &[], NextDue::Known(Some(secs(3)))));
    assert!(
        !has(&out, |c| matches!(
            c,
            Command::Emit(RelayEvent::Idle { .. }) | Command::Store(StoreRequest::NextDue)
        )),
        "the other claim is out: {out:?}"
    );
    // The other fills its limit: the store may hold more, whatever the first said.
    let messages: Vec<_> = (0..4).map(|_| message(None)).collect();
    let out = core.handle(now, answer(second, &messages, NextDue::Unknown));
    assert_eq!(delivered(&out).len(), 4);
    assert_eq!(claims(&out), vec![4], "the prefetch room: {out:?}");
}

#[test]
fn a_drain_with_claims_out_hands_their_answers_back_and_waits_for_both() {
    let now = Instant::now();
    let (mut core, first, second) = two_out(now);
    let out = core.handle(now, Input::Drain { timeout: secs(10) });
    assert!(!has(&out, |c| matches!(c, Command::Stop(_))), "{out:?}");
    let a = [message(None)];
    let out = core.handle(now, answer(second, &a, NextDue::Unknown));
    assert_eq!(released(&out), vec![a[0].outbox_id], "{out:?}");
    assert!(delivered(&out).is_empty());
    core.handle(
        now,
        Input::Store(StoreAnswer::Released {
            sent: 1,
            result: Ok(vec![ClaimOutcome::Applied]),
        }),
    );
    assert!(
        !has(&core.handle(now, Input::Wake), |c| matches!(
            c,
            Command::Stop(_)
        )),
        "the first claim is still out"
    );
    let b = [message(None), message(None)];
    let out = core.handle(now, answer(first, &b, NextDue::Unknown));
    assert_eq!(released(&out).len(), 2, "{out:?}");
    let out = core.handle(
        now,
        Input::Store(StoreAnswer::Released {
            sent: 2,
            result: Ok(vec![ClaimOutcome::Applied; 2]),
        }),
    );
    assert!(
        has(&out, |c| matches!(
            c,
            Command::Stop(DrainReport {
                completed: 0,
                released: 3,
                ..
            })
        )),
        "{out:?}"
    );
}

#[test]
fn a_gate_closing_with_claims_out_hands_both_answers_back() {
    let now = Instant::now();
    let lane = config(2, 2)
        .claims_in_flight(2)
        .retry_after_holds_lane(true)
        .retry(RetryPolicy::new(secs(1), secs(60)).jitter(false));
    let mut core = LaneCore::new(lane, false);
    let sent = claims_sent(&core.handle(now, Input::Start));
    let [(first, 2), (second, 2)] = sent[..] else {
        panic!("{sent:?}")
    };
    let messages = [message(None), message(None)];
    let out = core.handle(now, answer(first, &messages, NextDue::Unknown));
    let slots = delivered(&out);
    assert_eq!(slots.len(), 2);
    let out = core.handle(now, done(slots[0].0, &messages[0]));
    let third = claims_sent(&out);
    assert_eq!(
        third.len(),
        1,
        "the freed slot is claimed beside the other: {out:?}"
    );
    // The target asks the lane to hold while two claims are out.
    let out = core.handle(
        now,
        Input::DeliveryDone {
            slot: slots[1].0,
            outbox_id: messages[1].outbox_id,
            result: Err(DeliveryFailure::from_error(&DeliveryError::retry_after(
                secs(30),
                "429 (test)",
            ))),
            elapsed: Duration::from_millis(5),
        },
    );
    assert!(claims(&out).is_empty(), "{out:?}");
    assert!(claims(&core.handle(now, nacked(1))).is_empty());
    for claim in [second, third[0].0] {
        let late = [message(None)];
        let out = core.handle(now + secs(1), answer(claim, &late, NextDue::Unknown));
        assert_eq!(released(&out), vec![late[0].outbox_id], "{out:?}");
        assert!(delivered(&out).is_empty(), "{out:?}");
        assert!(claims(&out).is_empty(), "{out:?}");
        assert!(claims(&core.handle(now + secs(1), released_all(1))).is_empty());
    }
    assert_eq!(claims(&core.handle(now + secs(30), Input::Wake)).len(), 2);
}

#[test]
fn a_breaker_that_is_not_closed_probes_with_no_other_claim_out() {
    use crate::config::CircuitBreakerConfig;
    let now = Instant::now();
    let breaker = CircuitBreakerConfig::default()
        .consecutive_failures(Some(1))
        .cool_down(secs(10));
    let lane = config(2, 0)
        .claims_in_flight(2)
        .circuit_breaker(Some(breaker));
    let mut core = LaneCore::new(lane, false);
    let sent = claims_sent(&core.handle(now, Input::Start));
    let [(first, 1), (second, 1)] = sent[..] else {
        panic!("{sent:?}")
    };
    let m = message(None);
    let out = core.handle(
        now,
        answer(first, std::slice::from_ref(&m), NextDue::Unknown),
    );
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    // The delivery fails: the breaker opens while the second claim is out.
    core.handle(now, failed(slot, &m));
    assert_eq!(core.breaker_state(), Some(BreakerState::Open));
    // The cool-down ends with the second claim still out: no probe beside it.
    let out = core.handle(now + secs(10), Input::Wake);
    assert!(claims(&out).is_empty(), "{out:?}");
    // It comes back (empty): now the probe goes, alone, for one message.
    let out = core.handle(now + secs(10), answer(second, &[], NextDue::Unknown));
    assert_eq!(claims(&out), vec![1], "{out:?}");
    assert_eq!(core.breaker_state(), Some(BreakerState::HalfOpen));
    assert!(claims(&core.handle(now + secs(10), Input::Wake)).is_empty());
}

/// The acks and limit of each claim among `commands`, as (id, acks, limit).
fn claims_with_acks(commands: &[Command]) -> Vec<(ClaimId, Vec<ClaimRef>, usize)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Store(StoreRequest::Claim { claim, limit, .. }) => {
                Some((*claim, Vec::new(), *limit))
            }
            Command::Store(StoreRequest::AckAndClaim {
                claim, acks, limit, ..
            }) => Some((*claim, acks.clone(), *limit)),
            _ => None,
        })
        .collect()
}

fn acked_and_claimed(claim: ClaimId, acked: usize, messages: &[OutboxMessage]) -> Input {
    Input::Store(StoreAnswer::AckedAndClaimed {
        claim,
        result: Ok(AckAndClaim {
            acked: vec![ClaimOutcome::Applied; acked],
            claimed: Ok(ClaimBatch {
                messages: messages.to_vec(),
                ..ClaimBatch::default()
            }),
        }),
        wall_ms: UnixMillis::EPOCH,
    })
}

/// The messages the lane reported delivered (their acks recorded), in order.
fn recorded(commands: &[Command]) -> Vec<Uuid> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Emit(RelayEvent::Delivered { outbox_id, .. }) => Some(*outbox_id),
            _ => None,
        })
        .collect()
}

fn refs(messages: &[OutboxMessage]) -> Vec<ClaimRef> {
    messages
        .iter()
        .map(|m| m.claim().expect("claimed"))
        .collect()
}

#[test]
fn each_claim_carries_the_acks_of_what_finished_before_it_went() {
    let now = Instant::now();
    let (mut core, first, second) = two_out(now);
    let a: Vec<_> = (0..4).map(|_| message(None)).collect();
    let slots = delivered(&core.handle(now, answer(first, &a, NextDue::Unknown)));
    assert_eq!(slots.len(), 4);
    // The first delivery done frees one slot: a claim for it carries its ack.
    let out = core.handle(now, done(slots[0].0, &a[0]));
    let [(third, ref carried, 1)] = claims_with_acks(&out)[..] else {
        panic!("one claim of 1 with the ack: {out:?}")
    };
    assert_eq!(carried, &refs(&a[..1]));
    // Two claims out: the other three acks wait for the next claim to go.
    for (slot, m) in slots[1..].iter().zip(&a[1..]) {
        let out = core.handle(now, done(slot.0, m));
        assert!(
            claims(&out).is_empty() && acks(&out).is_empty(),
            "no claim may go, no ack goes alone with a claim out: {out:?}"
        );
    }
    // The second claim's answer fills the slots; the claim for the room left goes out
    // beside the third, carrying the acks waiting: they need not wait for the third's
    // answer, and this claim's store cycle records them.
    let b: Vec<_> = (0..4).map(|_| message(None)).collect();
    let out = core.handle(now, answer(second, &b, NextDue::Unknown));
    assert_eq!(delivered(&out).len(), 4, "{out:?}");
    let [(fourth, ref carried, 3)] = claims_with_acks(&out)[..] else {
        panic!("one claim of 3 with the three acks: {out:?}")
    };
    assert_eq!(carried, &refs(&a[1..]));
    assert_eq!(core.held(), 4 + 4, "4 running, 4 acks out");
    // Answers in either order: each settles the acks it carried.
    let out = core.handle(now, acked_and_claimed(fourth, 3, &[]));
    assert_eq!(
        recorded(&out),
        a[1..].iter().map(|m| m.outbox_id).collect::<Vec<_>>()
    );
    let out = core.handle(now, acked_and_claimed(third, 1, &[]));
    assert_eq!(recorded(&out), vec![a[0].outbox_id]);
    assert_eq!(core.held(), 4, "only the 4 running are held");
}

#[test]
fn a_failed_claim_puts_its_acks_back_for_the_next_and_the_other_keeps_its_own() {
    let now = Instant::now();
    let (mut core, first, second) = two_out(now);
    let a: Vec<_> = (0..4).map(|_| message(None)).collect();
    let slots = delivered(&core.handle(now, answer(first, &a, NextDue::Unknown)));
    let out = core.handle(now, done(slots[0].0, &a[0]));
    let [(third, _, 1)] = claims_with_acks(&out)[..] else {
        panic!("{out:?}")
    };
    core.handle(now, done(slots[1].0, &a[1]));
    let b: Vec<_> = (0..4).map(|_| message(None)).collect();
    let out = core.handle(now, answer(second, &b, NextDue::Unknown));
    let [(fourth, ref carried, 1)] = claims_with_acks(&out)[..] else {
        panic!("a claim for the room left, with the ack waiting: {out:?}")
    };
    assert_eq!(carried, &refs(&a[1..2]));
    // 4 running, 2 buffered, one ack on each claim out.
    assert_eq!(core.held(), 8);
    // The third fails as a whole: neither its ack nor its claim happened.
    let out = core.handle(
        now,
        Input::Store(StoreAnswer::AckedAndClaimed {
            claim: third,
            result: Err(unavailable()),
            wall_ms: UnixMillis::EPOCH,
        }),
    );
    assert!(recorded(&out).is_empty(), "{out:?}");
    assert_eq!(core.held(), 8, "its ack is back, waiting, still held");
    // The fourth answers its own ack only.
    let out = core.handle(now, acked_and_claimed(fourth, 1, &[]));
    assert_eq!(recorded(&out), vec![a[1].outbox_id], "{out:?}");
    // After the backoff, the failed ack goes again, on the next claim.
    let out = core.handle(now + secs(1), Input::timer(TimerKind::StoreRetry, 0));
    let sent = claims_with_acks(&out);
    assert!(
        sent.iter().any(|(_, acks, _)| acks == &refs(&a[..1])),
        "the failed ack rides on a claim again: {out:?}"
    );
}

/// The generation of the poll timer among `commands`: the lane sleeps until it fires.
fn poll_timer(commands: &[Command]) -> Option<u64> {
    commands.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Poll,
            generation,
            ..
        } => Some(*generation),
        _ => None,
    })
}

#[test]
fn an_idle_poll_sends_one_claim_and_a_full_answer_sends_the_second_beside_it() {
    let now = Instant::now();
    let (mut core, first, second) = two_out(now);
    core.handle(now, answer(first, &[], NextDue::Known(None)));
    let out = core.handle(now, answer(second, &[], NextDue::Known(None)));
    let mut generation = poll_timer(&out).expect("asleep on the poll ceiling");
    for poll in 1..=5 {
        let at = now + DEFAULT_MAX_POLL * poll;
        let sent = claims_sent(&core.handle(at, Input::timer(TimerKind::Poll, generation)));
        let [(claim, 4)] = sent[..] else {
            panic!("poll {poll}: one claim, for its share of the window: {sent:?}");
        };
        let out = core.handle(at, answer(claim, &[], NextDue::Known(None)));
        assert!(claims_sent(&out).is_empty(), "poll {poll}: {out:?}");
        generation = poll_timer(&out).expect("asleep again");
    }
    // A poll whose claim comes back full: the store has shown more, and once the handlers
    // free room the lane keeps two claims out again, as a draining lane does.
    let at = now + DEFAULT_MAX_POLL * 6;
    let sent = claims_sent(&core.handle(at, Input::timer(TimerKind::Poll, generation)));
    let [(claim, 4)] = sent[..] else {
        panic!("one claim: {sent:?}");
    };
    let full: Vec<_> = (0..4).map(|_| message(None)).collect();
    let out = core.handle(at, answer(claim, &full, NextDue::Unknown));
    let mut sent = claims_sent(&out);
    assert_eq!(sent.len(), 1, "the room left takes one claim: {out:?}");
    for (slot, id) in delivered(&out) {
        let message = full.iter().find(|m| m.outbox_id == id).expect("claimed");
        sent.extend(claims_sent(&core.handle(at, done(slot, message))));
    }
    assert_eq!(sent.len(), 2, "two claims out, none answered: {sent:?}");
}
