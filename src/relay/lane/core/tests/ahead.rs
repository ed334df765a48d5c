//! Claim ahead: a second claim while the first is out, once the buffer has fallen to half
//! the prefetch; never a third, never past `concurrency + prefetch`.

use super::*;

fn ahead(commands: &[Command]) -> Vec<usize> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::ClaimAhead { limit, .. } => Some(*limit),
            _ => None,
        })
        .collect()
}

fn acked_and_claimed(acked: usize, messages: &[OutboxMessage]) -> Input {
    Input::AckedAndClaimed {
        result: Ok(AckAndClaim {
            acked: vec![ClaimOutcome::Applied; acked],
            claimed: Ok(ClaimBatch {
                messages: messages.to_vec(),
                dead_lettered: Vec::new(),
                next_due: NextDue::Unknown,
            }),
        }),
        wall_ms: UnixMillis::EPOCH,
    }
}

/// A lane of 4 handlers and a prefetch of 8, started with a full claim of 12: 4 running,
/// 8 buffered. The slots and messages, in claim order.
fn full_lane(config: LaneConfig) -> (LaneCore, Instant, Vec<OutboxMessage>, Vec<Slot>) {
    let now = Instant::now();
    let mut core = LaneCore::new(config, false);
    let messages: Vec<_> = (0..12).map(|_| message(None)).collect();
    let out = running_with(&mut core, now, &messages);
    let slots: Vec<Slot> = delivered(&out).into_iter().map(|(s, _)| s).collect();
    assert_eq!((core.in_flight(), core.buffered()), (4, 8));
    (core, now, messages, slots)
}

#[test]
fn a_slow_answer_lets_a_second_claim_take_the_room_freed_since_once_the_buffer_is_half_empty() {
    let (mut core, now, messages, slots) = full_lane(config(4, 8));
    // The first finish: its slot takes a buffered message, the ack rides on a claim of 1.
    let out = core.handle(now, done(slots[0], &messages[0]));
    assert_eq!(claims(&out), vec![1]);
    // That claim is slow. Two more finish: the buffer is still above half (6, 5 of 8).
    for i in 1..3 {
        let out = core.handle(now, done(slots[i], &messages[i]));
        assert!(claims(&out).is_empty(), "{out:?}");
    }
    // The fourth finish leaves half the prefetch: a claim ahead takes the room freed since
    // the first claim went out (3, at least a quarter of the prefetch).
    let out = core.handle(now, done(slots[3], &messages[3]));
    assert_eq!(core.buffered(), 4);
    assert_eq!(ahead(&out), vec![3], "{out:?}");
    // Held and asked for: 4 running + 4 buffered + 1 + 3 out = concurrency + prefetch.
    // Never a third claim while both are out.
    let (slot, id) = delivered(&out)[0];
    let next = messages.iter().find(|m| m.outbox_id == id).unwrap().clone();
    let out = core.handle(now, done(slot, &next));
    assert!(claims(&out).is_empty(), "{out:?}");

    // The first claim answers with its 1: the acks that waited go out with a claim that
    // counts the one ahead still out (room 8 - 4 buffered, less the 3 ahead).
    let one = message(None);
    let out = core.handle(now, acked_and_claimed(1, &[one]));
    assert_eq!(core.buffered(), 4);
    assert_eq!(claims(&out), vec![1], "{out:?}");
    assert_eq!(acks(&out).len(), 4);
    // The claim ahead answers: its messages join the buffer.
    let three: Vec<_> = (0..3).map(|_| message(None)).collect();
    core.handle(
        now,
        Input::ClaimedAhead(Ok(ClaimBatch {
            messages: three,
            dead_lettered: Vec::new(),
            next_due: NextDue::Unknown,
        })),
    );
    assert_eq!(core.buffered(), 7);
}

#[test]
fn a_quick_answer_keeps_one_claim_in_flight() {
    let (mut core, now, messages, slots) = full_lane(config(4, 8));
    for i in 0..4 {
        let out = core.handle(now, done(slots[i], &messages[i]));
        assert!(ahead(&out).is_empty(), "{out:?}");
        // Answered before the next finish: the buffer is back at the prefetch.
        if !claims(&out).is_empty() {
            let fresh = message(None);
            let out = core.handle(now, acked_and_claimed(acks(&out).len(), &[fresh]));
            assert!(ahead(&out).is_empty(), "{out:?}");
        }
        assert!(core.buffered() > 4);
    }
}

#[test]
fn a_lane_with_a_gate_never_claims_ahead() {
    let rate: crate::config::RateLimit = "100000/s".parse().unwrap();
    let (mut core, now, messages, slots) = full_lane(config(4, 8).rate_limit(Some(rate)));
    for i in 0..4 {
        let out = core.handle(now, done(slots[i], &messages[i]));
        assert!(ahead(&out).is_empty(), "{out:?}");
    }
    assert_eq!(core.buffered(), 4);
}

#[test]
fn a_drain_waits_for_the_claim_ahead_and_hands_its_messages_back() {
    let (mut core, now, messages, slots) = full_lane(config(4, 8));
    let mut last = Vec::new();
    for i in 0..4 {
        last = core.handle(now, done(slots[i], &messages[i]));
    }
    assert_eq!(ahead(&last), vec![3]);
    core.handle(
        now,
        Input::Drain {
            timeout: Duration::from_secs(10),
        },
    );
    let fresh: Vec<_> = (0..3).map(|_| message(None)).collect();
    let out = core.handle(
        now,
        Input::ClaimedAhead(Ok(ClaimBatch {
            messages: fresh.clone(),
            dead_lettered: Vec::new(),
            next_due: NextDue::Unknown,
        })),
    );
    let back = released(&out);
    assert_eq!(back, fresh.iter().map(|m| m.outbox_id).collect::<Vec<_>>());
    assert!(
        !has(&out, |c| matches!(c, Command::Stop(_))),
        "deliveries still run"
    );
}
