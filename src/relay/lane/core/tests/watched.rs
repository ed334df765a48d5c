//! A lane the relay's due watcher looks after (`LaneCore::watched`): idle, it arms no poll
//! ceiling of its own, sleeps until its own known due time, and claims when poked.

use super::*;

/// The poll timer among `commands`: when it fires and its generation.
fn poll_timer(commands: &[Command]) -> Option<(Instant, u64)> {
    commands.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Poll,
            at,
            generation,
        } => Some((*at, *generation)),
        _ => None,
    })
}

/// A watched lane that started and found its store empty.
fn idle_watched(now: Instant) -> LaneCore {
    let mut core = LaneCore::new(config(1, 0), false).watched();
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![1]);
    let out = core.handle(now, batch_saying(&core, &[], None));
    assert!(poll_timer(&out).is_none(), "no ceiling poll: {out:?}");
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::Idle { .. })
    )));
    core
}

#[test]
fn an_idle_watched_lane_sends_no_claim_on_the_ceiling_and_claims_when_poked() {
    let now = Instant::now();
    let mut core = idle_watched(now);
    // Long past the ceiling nothing has woken it: it has no timer, and nothing else came.
    let later = now + DEFAULT_MAX_POLL * 100;
    // Poked for a time still ahead: it sleeps until then and claims nothing yet.
    let due = later + Duration::from_secs(2);
    let out = core.handle(later, Input::DueAt(due));
    assert!(claims(&out).is_empty(), "{out:?}");
    let (at, generation) = poll_timer(&out).expect("a timer for the poke");
    assert_eq!(at, due);
    assert_eq!(
        claims(&core.handle(due, Input::timer(TimerKind::Poll, generation))),
        vec![1],
        "one claim when the poked time comes"
    );
    core.handle(due, batch_saying(&core, &[], None));
    // Poked for a time already come: it claims at once, one claim.
    let now = due + Duration::from_secs(1);
    assert_eq!(claims(&core.handle(now, Input::DueAt(now))), vec![1]);
}

#[test]
fn a_watched_lane_sleeps_until_its_known_due_time_and_a_later_poke_changes_nothing() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false).watched();
    core.handle(now, Input::Start);
    let due = Duration::from_secs(60);
    let out = core.handle(now, batch_saying(&core, &[], Some(due)));
    let (at, first) = poll_timer(&out).expect("a timer for the known due time");
    assert_eq!(
        at,
        now + due,
        "past the ceiling: the watcher watches the rest"
    );
    // The watcher sees the same message (or a later one): no new timer, no claim.
    let out = core.handle(now, Input::DueAt(now + due + Duration::from_secs(1)));
    assert!(out.is_empty(), "{out:?}");
    // An earlier one (another process's nack): the lane wakes then instead.
    let sooner = now + Duration::from_secs(10);
    let out = core.handle(now, Input::DueAt(sooner));
    let (at, second) = poll_timer(&out).expect("a sooner timer");
    assert_eq!(at, sooner);
    assert!(
        claims(&core.handle(now + due, Input::timer(TimerKind::Poll, first))).is_empty(),
        "the replaced timer is stale"
    );
    assert_eq!(
        claims(&core.handle(sooner, Input::timer(TimerKind::Poll, second))),
        vec![1]
    );
}

#[test]
fn a_watched_lane_holding_claims_keeps_its_poll_ceiling() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false).watched();
    core.handle(now, Input::Start);
    let out = core.handle(now, batch_saying(&core, &[message(None)], None));
    assert_eq!(delivered(&out).len(), 1);
    let (at, _) = poll_timer(&out).expect("the ceiling while a delivery runs");
    assert_eq!(at, now + DEFAULT_MAX_POLL);
    // A poke changes nothing while it holds claims, for later or for now: the ceiling is
    // its look at the store, and the watcher's next pass says it again.
    let out = core.handle(now, Input::DueAt(now + Duration::from_secs(1)));
    assert!(out.is_empty(), "{out:?}");
    assert!(claims(&core.handle(now, Input::DueAt(now))).is_empty());
}

#[test]
fn a_poke_while_the_lanes_claim_is_out_makes_no_second_claim() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false).watched();
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![1]);
    assert!(claims(&core.handle(now, Input::DueAt(now))).is_empty());
    // Its answer said nothing is due: it sleeps, and the next poke wakes it.
    core.handle(now, batch_saying(&core, &[], None));
    assert_eq!(claims(&core.handle(now, Input::DueAt(now))), vec![1]);
}

#[test]
fn a_paused_watched_lane_ignores_pokes_and_an_unwatched_one_polls_the_ceiling() {
    let now = Instant::now();
    let mut core = idle_watched(now);
    core.handle(now, Input::Pause);
    assert!(core.handle(now, Input::DueAt(now)).is_empty());
    assert_eq!(claims(&core.handle(now, Input::Resume)), vec![1]);

    let mut core = LaneCore::new(config(1, 0), false);
    core.handle(now, Input::Start);
    let out = core.handle(now, batch_saying(&core, &[], None));
    assert_eq!(
        poll_timer(&out).map(|(at, _)| at),
        Some(now + DEFAULT_MAX_POLL)
    );
}
