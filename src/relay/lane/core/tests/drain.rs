//! Pause, resume and drain: what a drain releases, waits for and abandons.

use super::*;

#[test]
fn pause_holds_claims_and_resume_claims() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), true);
    assert!(claims(&core.handle(now, Input::Start)).is_empty());
    assert!(claims(&core.handle(now, Input::Wake)).is_empty());
    assert_eq!(claims(&core.handle(now, Input::Resume)), vec![1]);
    core.handle(now, Input::Pause);
    core.handle(now, batch(&core, &[]));
    assert!(claims(&core.handle(now, Input::Wake)).is_empty());
}

#[test]
fn a_pause_releases_the_buffer_and_only_running_deliveries_finish() {
    let now = Instant::now();
    // Concurrency 1, prefetch 4: one running, four buffered.
    let mut core = LaneCore::new(config(1, 4), false);
    let messages: Vec<_> = (0..5).map(|_| message(None)).collect();
    let out = running_with(&mut core, now, &messages);
    let [(slot, running)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    assert_eq!(running, messages[0].outbox_id);
    assert_eq!(core.buffered(), 4);
    let out = core.handle(now, Input::Pause);
    let buffered: Vec<Uuid> = messages[1..].iter().map(|m| m.outbox_id).collect();
    assert_eq!(released(&out), buffered, "the buffer goes back: {out:?}");
    assert_eq!(core.buffered(), 0);
    core.handle(
        now,
        Input::Store(StoreAnswer::Released {
            sent: 4,
            result: Ok(vec![ClaimOutcome::Applied; 4]),
        }),
    );
    // The running delivery finishes and is acked; its slot takes nothing.
    let out = core.handle(now, done(slot, &messages[0]));
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert_eq!(acks(&out), vec![messages[0].claim().unwrap()]);
    assert!(claims(&out).is_empty(), "no claim while paused: {out:?}");
    let out = core.handle(now, acked_all(1));
    assert!(
        delivered(&out).is_empty() && claims(&out).is_empty(),
        "{out:?}"
    );
    // Resumed: it claims again (the released rows are due now).
    assert_eq!(claims(&core.handle(now, Input::Resume)), vec![5]);
}

#[test]
fn a_claim_that_comes_back_after_a_pause_goes_back_unused() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 2), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![4]);
    core.handle(now, Input::Pause);
    let messages: Vec<_> = (0..3).map(|_| message(None)).collect();
    let out = core.handle(now, batch(&core, &messages));
    assert!(delivered(&out).is_empty(), "{out:?}");
    let ids: Vec<Uuid> = messages.iter().map(|m| m.outbox_id).collect();
    assert_eq!(released(&out), ids, "{out:?}");
    assert_eq!((core.in_flight(), core.buffered(), core.held()), (0, 0, 0));
}

#[test]
fn a_drain_releases_the_buffer_and_stops_once_deliveries_are_recorded() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 2), false);
    let messages = [message(None), message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let slot = delivered(&out)[0].0;
    let out = core.handle(
        now,
        Input::Drain {
            timeout: Duration::from_secs(10),
        },
    );
    assert!(has(
        &out,
        |c| matches!(c, Command::TimerAt { kind: TimerKind::DrainDeadline, at, .. } if *at == now + Duration::from_secs(10))
    ));
    let Some(Command::Store(StoreRequest::Release(released))) = out
        .iter()
        .find(|c| matches!(c, Command::Store(StoreRequest::Release(_))))
    else {
        panic!("{out:?}")
    };
    assert_eq!(released.len(), 2);
    core.handle(
        now,
        Input::Store(StoreAnswer::Released {
            sent: 2,
            result: Ok(vec![ClaimOutcome::Applied; 2]),
        }),
    );
    let out = core.handle(now, done(slot, &messages[0]));
    assert!(claims(&out).is_empty(), "no claims while draining");
    assert!(
        !has(&out, |c| matches!(c, Command::Stop(_))),
        "its ack is still out"
    );
    let out = core.handle(now, acked_all(1));
    assert!(
        has(&out, |c| matches!(
            c,
            Command::Stop(DrainReport {
                completed: 1,
                released: 2,
                ..
            })
        )),
        "{out:?}"
    );
    assert!(core.handle(now, Input::Wake).is_empty(), "stopped");
}

#[test]
fn a_drain_deadline_abandons_running_deliveries_and_releases_their_claims() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let slots: Vec<Slot> = delivered(&out).into_iter().map(|(s, _)| s).collect();
    core.handle(
        now,
        Input::Drain {
            timeout: Duration::from_secs(1),
        },
    );
    let out = core.handle(now, Input::timer(TimerKind::DrainDeadline, 0));
    let killed: Vec<Slot> = out
        .iter()
        .filter_map(|c| match c {
            Command::KillHandler(slot) => Some(*slot),
            _ => None,
        })
        .collect();
    assert_eq!(killed.len(), 2);
    assert!(slots.iter().all(|s| killed.contains(s)));
    assert!(has(
        &out,
        |c| matches!(c, Command::Store(StoreRequest::Release(r)) if r.len() == 2)
    ));
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
                released: 2,
                ..
            })
        )),
        "{out:?}"
    );
}

#[test]
fn a_drain_deadline_does_not_wait_for_acks_the_store_will_not_take() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false);
    let first = message(None);
    let out = running_with(&mut core, now, std::slice::from_ref(&first));
    core.handle(now, done(delivered(&out)[0].0, &first));
    core.handle(
        now,
        Input::Store(StoreAnswer::Acked {
            result: Err(unavailable()),
            wall_ms: UnixMillis::EPOCH,
        }),
    );
    core.handle(
        now,
        Input::Drain {
            timeout: Duration::from_secs(1),
        },
    );
    let out = core.handle(now, Input::timer(TimerKind::DrainDeadline, 0));
    assert!(
        has(&out, |c| matches!(
            c,
            Command::Stop(DrainReport {
                completed: 0,
                released: 0,
                ..
            })
        )),
        "{out:?}"
    );
}
