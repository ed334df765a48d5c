//! Hand-off credits: granted only while the lane is idle and empty, at most its room;
//! revoked before any claim, drain or pause; counted as held while in transit.

use super::*;
use crate::config::RateLimit;

fn grants(commands: &[Command]) -> Vec<usize> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::GrantCredits(n) => Some(*n),
            _ => None,
        })
        .collect()
}

fn revokes(commands: &[Command]) -> bool {
    has(commands, |c| matches!(c, Command::RevokeCredits))
}

/// A lane that takes hand-offs, started, whose first claim found nothing: it sleeps, and
/// grants its room. Returns that grant.
fn idle(core: &mut LaneCore, now: Instant) -> Vec<usize> {
    core.enable_hand_off();
    core.handle(now, Input::Start);
    let out = core.handle(now, batch_saying(core, &[], None));
    assert!(
        has(&out, |c| matches!(
            c,
            Command::TimerAt {
                kind: TimerKind::Poll,
                ..
            }
        )),
        "{out:?}"
    );
    grants(&out)
}

fn handed(message: &OutboxMessage, sent_at: Instant) -> Input {
    Input::HandedOff {
        message: Box::new(message.clone()),
        sent_at,
    }
}

#[test]
fn an_idle_lane_grants_its_room_and_only_when_asked_to() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 3).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![5]);

    let mut core = LaneCore::new(config(4, 8).batch_size(6).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![6], "capped by the batch size");

    let mut core = LaneCore::new(config(2, 3).hand_off(false), false);
    assert!(
        idle(&mut core, now).is_empty(),
        "hand_off off in the config"
    );

    let rate: RateLimit = "10/s".parse().unwrap();
    let mut core = LaneCore::new(config(2, 3).hand_off(true).rate_limit(Some(rate)), false);
    assert!(
        idle(&mut core, now).is_empty(),
        "a hand-off would take no token"
    );
}

#[test]
fn a_handed_off_message_is_held_like_a_claim_and_acked_without_a_claim() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 2).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![4]);
    let first = message(None);
    let sent_at = now + Duration::from_millis(1);
    let arrived = now + Duration::from_millis(2);
    let out = core.handle(arrived, handed(&first, sent_at));
    let [(slot, id)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    assert_eq!(id, first.outbox_id);
    // The lease started with the enqueue's statement: the extension is timed from it.
    assert!(has(&out, |c| matches!(
        c,
        Command::TimerAt { kind: TimerKind::Lease { .. }, generation: 0, at, .. } if *at == sent_at + Duration::from_secs(20)
    )));
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::Claimed { outbox_ids, redeliveries: 0, .. })
            if outbox_ids == &[first.outbox_id]
    )));
    assert!(
        claims(&out).is_empty() && !revokes(&out) && grants(&out).is_empty(),
        "{out:?}"
    );
    assert_eq!(core.held(), 1);

    // Done: a plain ack (no claim rides on it), and no `next_due`: the lane sleeps on.
    let out = core.handle(arrived, done(slot, &first));
    assert_eq!(acks(&out), vec![first.claim().unwrap()]);
    assert!(
        has(&out, |c| matches!(c, Command::Store(StoreRequest::Ack(_)))),
        "{out:?}"
    );
    assert!(claims(&out).is_empty() && !revokes(&out), "{out:?}");
    // Recorded: the credit it used is granted again.
    let out = core.handle(arrived, acked_all(1));
    assert_eq!(grants(&out), vec![1], "{out:?}");
    assert!(
        claims(&out).is_empty()
            && !has(&out, |c| matches!(c, Command::Store(StoreRequest::NextDue)))
    );
}

#[test]
fn a_wake_up_revokes_first_and_claims_only_the_room_left_by_credits_in_transit() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 3).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![5]);
    // Two credits taken by enqueues (their messages not here yet), three left.
    let out = core.handle(now, Input::Wake);
    assert!(revokes(&out), "{out:?}");
    assert!(
        claims(&out).is_empty(),
        "no claim before the revoke's answer: {out:?}"
    );
    let out = core.handle(now, Input::CreditsRevoked(3));
    assert_eq!(claims(&out), vec![3], "5 of room, 2 in transit");
    assert!(grants(&out).is_empty(), "no grant while claiming");
    // The claim fills its limit; the two in transit arrive: C+P held, no more.
    let claimed: Vec<_> = (0..3).map(|_| message(None)).collect();
    core.handle(now, batch(&core, &claimed));
    let a = message(None);
    let b = message(None);
    core.handle(now, handed(&a, now));
    let out = core.handle(now, handed(&b, now));
    assert_eq!(core.held(), 5);
    assert!(
        grants(&out).is_empty() && claims(&out).is_empty(),
        "{out:?}"
    );
}

#[test]
fn a_returned_credit_frees_its_room() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 1).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![2]);
    core.handle(now, Input::Wake);
    // One taken, one left; the taken one then comes back (a duplicate, a failed commit).
    let out = core.handle(now, Input::CreditsRevoked(1));
    assert_eq!(claims(&out), vec![1]);
    core.handle(now, Input::HandOffReturned(1));
    let out = core.handle(now, batch(&core, &[message(None)]));
    // Full claim: the store may have more; the room now counts the returned credit.
    assert_eq!(claims(&out), vec![1], "{out:?}");
}

#[test]
fn pause_and_drain_revoke_and_a_message_handed_off_during_the_drain_is_released() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![2]);
    let out = core.handle(now, Input::Pause);
    assert!(revokes(&out), "{out:?}");
    let out = core.handle(now, Input::CreditsRevoked(1));
    assert!(grants(&out).is_empty(), "no grant while paused: {out:?}");
    // One was in transit: it still arrives, and a paused lane hands it back unused.
    let late = message(None);
    let out = core.handle(now, handed(&late, now));
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert_eq!(released(&out), vec![late.outbox_id], "{out:?}");

    let mut core = LaneCore::new(config(2, 0).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![2]);
    let out = core.handle(
        now,
        Input::Drain {
            timeout: Duration::from_secs(5),
        },
    );
    // Nothing held: the drain ends, its revoke carried out before the stop.
    let revoke = out.iter().position(|c| matches!(c, Command::RevokeCredits));
    let stop = out.iter().position(|c| matches!(c, Command::Stop(_)));
    assert!(
        revoke.is_some() && stop.is_some() && revoke < stop,
        "{out:?}"
    );
    // Before the drain ended, a message in transit arriving is handed back, not delivered.
    let mut core = LaneCore::new(config(2, 0).hand_off(true), false);
    idle(&mut core, now);
    let running = message(None);
    core.handle(now, handed(&running, now));
    core.handle(
        now,
        Input::Drain {
            timeout: Duration::from_secs(5),
        },
    );
    core.handle(now, Input::CreditsRevoked(0));
    let late = message(None);
    let out = core.handle(now, handed(&late, now));
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert!(has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::Release(claims)) if claims == &[late.claim().unwrap()]
    )));
}

#[test]
fn a_lane_holding_handed_off_messages_keeps_its_credits_until_it_must_claim() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 2).hand_off(true), false);
    assert_eq!(idle(&mut core, now), vec![4]);
    let first = message(None);
    let out = core.handle(now, handed(&first, now));
    assert!(!revokes(&out), "{out:?}");
    // The poll ceiling fires while it runs: revoke, then claim what is left.
    let generation = core.claim_loop.poll_generation();
    let out = core.handle(now, Input::timer(TimerKind::Poll, generation));
    assert!(revokes(&out), "{out:?}");
    let out = core.handle(now, Input::CreditsRevoked(3));
    assert_eq!(claims(&out), vec![3], "4 of room, 1 held");
}
