//! The claim linger: a claim that could take more waits a moment for running handlers.

use super::*;

fn lingering(concurrency: usize, prefetch: usize) -> LaneCore {
    LaneCore::new(
        config(concurrency, prefetch).claim_linger(Duration::from_millis(1)),
        false,
    )
}

fn gate_timers(commands: &[Command]) -> Vec<Instant> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::TimerAt {
                kind: TimerKind::Gate,
                at,
                ..
            } => Some(*at),
            _ => None,
        })
        .collect()
}

/// A delivery that took 100 µs: quicker than the 1 ms linger.
fn quick(slot: Slot, message: &OutboxMessage) -> Input {
    Input::DeliveryDone {
        slot,
        outbox_id: message.outbox_id,
        result: Ok(()),
        elapsed: Duration::from_micros(100),
    }
}

#[test]
fn quick_handlers_are_waited_for_then_acked_with_a_claim_of_the_whole_window() {
    let now = Instant::now();
    let mut core = lingering(2, 2);
    let messages: Vec<_> = (0..4).map(|_| message(None)).collect();
    let out = running_with(&mut core, now, &messages);
    let started = delivered(&out);
    assert_eq!(started.len(), 2, "{out:?}");
    // The first finishes: its slot takes a buffered message, and the claim of one (with
    // its ack) waits for the other handler instead of going out now.
    let out = core.handle(now, quick(started[0].0, &messages[0]));
    assert_eq!(delivered(&out).len(), 1);
    assert!(claims(&out).is_empty() && acks(&out).is_empty(), "{out:?}");
    assert_eq!(gate_timers(&out), vec![now + Duration::from_millis(1)]);
    let later = now + Duration::from_micros(300);
    let [(slot_1, _)] = delivered(&core.handle(later, quick(started[1].0, &messages[1])))[..]
    else {
        panic!("the second slot takes the last buffered message")
    };
    let out = core.handle(later, quick(started[0].0, &messages[2]));
    assert!(claims(&out).is_empty(), "one handler still runs: {out:?}");
    // The last one finishes: every slot is free, and one round trip acks all four and
    // claims the whole window.
    let out = core.handle(later, quick(slot_1, &messages[3]));
    assert_eq!(claims(&out), vec![4], "{out:?}");
    assert_eq!(acks(&out).len(), 4);
    assert!(has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::AckAndClaim { limit: 4, .. })
    )));
}

#[test]
fn the_wait_ends_at_the_linger_with_what_is_free_by_then() {
    let now = Instant::now();
    let mut core = lingering(2, 0);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let started = delivered(&out);
    let out = core.handle(now, quick(started[0].0, &messages[0]));
    assert!(claims(&out).is_empty(), "{out:?}");
    let [at] = gate_timers(&out)[..] else {
        panic!("a timer for the linger's end: {out:?}")
    };
    // Another timer firing first does not end the wait, and sets its end again.
    let early = core.handle(
        now + Duration::from_micros(100),
        Input::timer(TimerKind::Gate, 0),
    );
    assert!(claims(&early).is_empty(), "{early:?}");
    let out = core.handle(at, Input::timer(TimerKind::Gate, 1));
    assert_eq!(claims(&out), vec![1], "{out:?}");
    assert_eq!(acks(&out), vec![messages[0].claim().unwrap()]);
}

#[test]
fn an_idle_lane_a_big_claim_and_a_zero_linger_never_wait() {
    let now = Instant::now();
    // Nothing runs: a wake-up claims at once.
    let mut core = lingering(4, 4);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![8]);
    // A claim of 64 or more goes at once, handlers running or not.
    let mut core = lingering(100, 100);
    let messages: Vec<_> = (0..200).map(|_| message(None)).collect();
    let out = running_with(&mut core, now, &messages);
    let started = delivered(&out);
    let mut finished = Vec::new();
    for (slot, id) in started.iter().take(64) {
        let message = messages.iter().find(|m| m.outbox_id == *id).unwrap();
        finished.extend(core.handle(now, quick(*slot, message)));
    }
    // Each finished delivery's slot took a buffered message; the claim waited while it
    // could take fewer than 64, and went as soon as it could take 64.
    assert_eq!(claims(&finished), vec![64]);
    // Zero: the claim of one goes with the first finished delivery.
    let mut core = LaneCore::new(config(2, 0), false);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let started = delivered(&out);
    assert_eq!(
        claims(&core.handle(now, done(started[0].0, &messages[0]))),
        vec![1]
    );
}

#[test]
fn slow_handlers_are_not_waited_for() {
    let now = Instant::now();
    let mut core = lingering(2, 0);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let started = delivered(&out);
    // Deliveries that take 5 ms would not finish within a 1 ms linger: claim at once.
    let out = core.handle(now, done(started[0].0, &messages[0]));
    assert_eq!(claims(&out), vec![1], "{out:?}");
}
