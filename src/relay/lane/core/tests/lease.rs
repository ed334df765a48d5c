//! Lease timers: extension of running and buffered claims, lapses, and our own claim
//! adopted when we claim it again.

use super::*;

#[test]
fn a_lease_check_extends_running_and_buffered_claims_and_reports_a_lost_one_once() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 1), false);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let Some((batch_id, generation)) = out.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Lease { batch },
            generation,
            ..
        } => Some((*batch, *generation)),
        _ => None,
    }) else {
        panic!("{out:?}")
    };
    let at = now + Duration::from_secs(20);
    let out = core.handle(
        at,
        Input::timer(TimerKind::Lease { batch: batch_id }, generation),
    );
    let Some(Command::Store(StoreRequest::Extend {
        claims: extending,
        generation: next,
        ..
    })) = out
        .into_iter()
        .find(|c| matches!(c, Command::Store(StoreRequest::Extend { .. })))
    else {
        panic!("no extension")
    };
    assert_eq!(extending.len(), 2, "running and buffered");
    // The old timer is stale now.
    assert!(core
        .handle(
            at,
            Input::timer(TimerKind::Lease { batch: batch_id }, generation)
        )
        .is_empty());
    let outcomes = extending
        .iter()
        .map(|c| {
            if c.outbox_id == messages[1].outbox_id {
                ClaimOutcome::LostClaim
            } else {
                ClaimOutcome::Applied
            }
        })
        .collect();
    let out = core.handle(
        at,
        Input::Store(StoreAnswer::Extended {
            batch: batch_id,
            generation: next,
            claims: extending,
            result: Ok(outcomes),
        }),
    );
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::LeaseExtended { count: 1, .. })
    )));
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::LeaseExpired { outbox_ids, .. }) if outbox_ids == &vec![messages[1].outbox_id]
    )));
    assert_eq!(
        core.buffered(),
        0,
        "a buffered message whose lease lapsed is dropped"
    );
    let Some(Command::TimerAt {
        kind: TimerKind::Lease { .. },
        generation: again,
        ..
    }) = out.iter().find(|c| {
        matches!(
            c,
            Command::TimerAt {
                kind: TimerKind::Lease { .. },
                ..
            }
        )
    })
    else {
        panic!("{out:?}")
    };
    let out = core.handle(
        at,
        Input::timer(TimerKind::Lease { batch: batch_id }, *again),
    );
    let Some(Command::Store(StoreRequest::Extend { claims: left, .. })) = out
        .iter()
        .find(|c| matches!(c, Command::Store(StoreRequest::Extend { .. })))
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        left,
        &vec![messages[0].claim().unwrap()],
        "the lost one is not extended again"
    );
}

#[test]
fn our_own_running_message_claimed_again_is_adopted_with_its_fresh_token() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let first = message(None);
    let out = running_with(&mut core, now, std::slice::from_ref(&first));
    let slot = delivered(&out)[0].0;
    core.handle(now, Input::Wake);
    let again = reclaimed(&first);
    let out = core.handle(now, batch(&core, std::slice::from_ref(&again)));
    assert!(delivered(&out).is_empty(), "one delivery is enough");
    let out = core.handle(now, done(slot, &first));
    assert_eq!(acks(&out), vec![again.claim().unwrap()]);
}

#[test]
fn without_extension_a_lapse_is_timed_from_the_claims_answer_with_it_from_the_send() {
    // The store starts a lease somewhere between the claim's send and its answer. An
    // extension must not come late (timed from the send); a lapse must not be declared
    // early, while the store still holds the claim for us (timed from the answer).
    let sent = Instant::now();
    let answered = sent + Duration::from_millis(700);
    let lease_check = |config: LaneConfig| {
        let mut core = LaneCore::new(config, false);
        let out = core.handle(sent, Input::Start);
        assert_eq!(claims(&out).len(), 1, "{out:?}");
        let out = core.handle(answered, batch(&core, &[message(None)]));
        out.into_iter()
            .find_map(|c| match c {
                Command::TimerAt {
                    kind: TimerKind::Lease { .. },
                    at,
                    ..
                } => Some(at),
                _ => None,
            })
            .expect("a lease check")
    };
    let lease = Duration::from_secs(30);
    assert_eq!(
        lease_check(config(1, 0).lease_extend_margin(None)),
        answered + lease
    );
    let margin = Duration::from_secs(10);
    assert_eq!(
        lease_check(config(1, 0).lease_extend_margin(Some(margin))),
        sent + lease - margin
    );
}

/// A claim whose answer comes back a lease after it was sent (a store that went silent
/// after committing it) may have lapsed: another relay may hold it and its key by now. The
/// lane starts none of it, and says the leases lapsed. (The whole-relay simulation found
/// this: a message delivered by two relays at once, the stale one started on arrival.)
#[test]
fn a_claim_answered_after_its_lease_could_lapse_starts_nothing() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![2]);
    let messages = [message(Some("k")), message(None)];
    let late = now + Duration::from_secs(30);
    let out = core.handle(late, batch(&core, &messages));
    assert!(delivered(&out).is_empty(), "{out:?}");
    let lapsed: usize = out
        .iter()
        .map(|c| match c {
            Command::Emit(RelayEvent::LeaseExpired { outbox_ids, .. }) => outbox_ids.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(lapsed, 2, "{out:?}");
    assert_eq!((core.in_flight(), core.buffered(), core.held()), (0, 0, 0));
}

/// A buffered message waits for a handler past its lease's earliest lapse while the
/// extension is still out: it does not start until the store confirmed the extension.
#[test]
fn a_buffered_message_starts_only_while_its_lease_surely_holds() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 1), false);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let Some((batch_id, generation)) = out.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Lease { batch },
            generation,
            ..
        } => Some((*batch, *generation)),
        _ => None,
    }) else {
        panic!("{out:?}")
    };
    // The extension goes out at 20 s; its answer has not come by 30 s, when the first
    // delivery ends.
    let out = core.handle(
        now + Duration::from_secs(20),
        Input::timer(TimerKind::Lease { batch: batch_id }, generation),
    );
    let Some(Command::Store(StoreRequest::Extend {
        claims: extending,
        generation: next,
        ..
    })) = out
        .into_iter()
        .find(|c| matches!(c, Command::Store(StoreRequest::Extend { .. })))
    else {
        panic!("no extension")
    };
    let out = core.handle(now + Duration::from_secs(30), done(slot, &messages[0]));
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert_eq!(core.buffered(), 0, "the unsure claim left the buffer");

    // Confirmed in time, the same wait starts the buffered message.
    let mut core = LaneCore::new(config(1, 1), false);
    let out = running_with(&mut core, now, &messages);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(
        now + Duration::from_secs(20),
        Input::timer(TimerKind::Lease { batch: batch_id }, generation),
    );
    assert!(has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::Extend { .. })
    )));
    let applied = vec![ClaimOutcome::Applied; extending.len()];
    core.handle(
        now + Duration::from_secs(21),
        Input::Store(StoreAnswer::Extended {
            batch: batch_id,
            generation: next,
            claims: extending,
            result: Ok(applied),
        }),
    );
    let out = core.handle(now + Duration::from_secs(30), done(slot, &messages[0]));
    assert_eq!(
        delivered(&out)
            .into_iter()
            .map(|(_, id)| id)
            .collect::<Vec<_>>(),
        vec![messages[1].outbox_id]
    );
}

/// Without extension, a buffered message starts only while its lease surely holds for the
/// delivery timeout (the start margin): else it goes back unused, and the rest of its key
/// run with it, so no delivery can run past its lapse beside the next holder's.
#[test]
fn a_buffered_message_whose_lease_would_not_outlast_its_delivery_timeout_goes_back_unused() {
    let now = Instant::now();
    let margin = || {
        config(1, 3)
            .lease_extend_margin(None)
            .delivery_timeout(Duration::from_secs(10))
    };
    let (first, head, next) = (message(None), message(Some("k")), message(Some("k")));
    let messages = [first.clone(), head.clone(), next.clone()];
    let started =
        |out: &[Command]| -> Vec<Uuid> { delivered(out).into_iter().map(|(_, id)| id).collect() };

    // 15 s of the 30 s lease left, more than the timeout: the key's head starts.
    let mut core = LaneCore::new(margin(), false);
    let out = running_with(&mut core, now, &messages);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(now + Duration::from_secs(15), done(slot, &first));
    assert_eq!(started(&out), vec![head.outbox_id], "{out:?}");

    // 5 s left, less than the timeout: the head and the rest of its key go back unused.
    let mut core = LaneCore::new(margin(), false);
    let out = running_with(&mut core, now, &messages);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(now + Duration::from_secs(25), done(slot, &first));
    assert!(started(&out).is_empty(), "{out:?}");
    let mut back = released(&out);
    back.sort();
    let mut want = vec![head.outbox_id, next.outbox_id];
    want.sort();
    assert_eq!(back, want, "{out:?}");
    assert!(
        !has(&out, |c| matches!(
            c,
            Command::Emit(RelayEvent::LeaseExpired { .. })
        )),
        "handed back, not lapsed: {out:?}"
    );
    assert_eq!(core.buffered(), 0);
}

/// A message the lane holds in its buffer, claimed again by its own claim (its lease
/// lapsed on the way, a hand-off late in the mailbox), is delivered once, under the fresh
/// claim: the handler gets its token and attempt, as the ack will.
#[test]
fn our_own_buffered_message_claimed_again_goes_to_the_handler_under_the_fresh_claim() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 2), false);
    let [x, y] = [message(None), message(None)];
    let out = running_with(&mut core, now, &[x.clone(), y.clone()]);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(now, Input::Wake);
    assert_eq!(claims(&out), vec![1], "{out:?}");
    let again = reclaimed(&y);
    let out = core.handle(now, batch(&core, std::slice::from_ref(&again)));
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert_eq!(core.buffered(), 1, "one copy of y waits");
    let out = core.handle(now, done(slot, &x));
    let handed = out
        .iter()
        .find_map(|c| match c {
            Command::Deliver { message, .. } => Some(message.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("y does not start: {out:?}"));
    assert_eq!(
        (handed.outbox_id, handed.claim_token, handed.attempt_count),
        (y.outbox_id, again.claim_token, again.attempt_count)
    );
}

/// What [`lost_token_of_a_released_head`] saw.
struct LostToken {
    /// The extension's answer emitted a lease expiry.
    expired: bool,
    /// Claims buffered after that answer.
    buffered: usize,
    /// The messages started when the slot freed, with their tokens.
    started: Vec<(Uuid, Option<Uuid>)>,
    /// The head of key k as claimed again, with its fresh token.
    head: (Uuid, Option<Uuid>),
}

/// A key's head handed back (a pause) while its lease extension is out, claimed again
/// with the key's next message; then the extension answers that the head's old token is
/// lost. With `mutation` switched on in the lane.
fn lost_token_of_a_released_head(mutation: Option<Mutation>) -> LostToken {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 2), false).mutated_by(mutation);
    // One message runs; the head of key k waits in the buffer.
    let running = message(None);
    let head = message(Some("k"));
    let out = running_with(&mut core, now, &[running.clone(), head.clone()]);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let Some((batch_id, generation)) = out.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Lease { batch },
            generation,
            ..
        } => Some((*batch, *generation)),
        _ => None,
    }) else {
        panic!("{out:?}")
    };
    let at = now + Duration::from_secs(20);
    let out = core.handle(
        at,
        Input::timer(TimerKind::Lease { batch: batch_id }, generation),
    );
    let Some(Command::Store(StoreRequest::Extend {
        claims: extending,
        generation: next,
        ..
    })) = out
        .into_iter()
        .find(|c| matches!(c, Command::Store(StoreRequest::Extend { .. })))
    else {
        panic!("no extension")
    };
    // While the extension is out, a pause hands the head back, and after the resume the
    // lane claims it again (a fresh token) with the key's next message.
    core.handle(at, Input::Pause);
    assert_eq!(core.buffered(), 0);
    assert_eq!(claims(&core.handle(at, Input::Resume)).len(), 1);
    let again = reclaimed(&head);
    let next_of_key = message(Some("k"));
    core.handle(at, batch(&core, &[again.clone(), next_of_key.clone()]));
    assert_eq!(core.buffered(), 2);
    // The extension answers: the head's old token is lost (released). That is no lapse of
    // the fresh claim.
    let outcomes = extending
        .iter()
        .map(|c| {
            if c.outbox_id == head.outbox_id {
                ClaimOutcome::LostClaim
            } else {
                ClaimOutcome::Applied
            }
        })
        .collect();
    let out = core.handle(
        at,
        Input::Store(StoreAnswer::Extended {
            batch: batch_id,
            generation: next,
            claims: extending,
            result: Ok(outcomes),
        }),
    );
    let expired = has(&out, |c| {
        matches!(c, Command::Emit(RelayEvent::LeaseExpired { .. }))
    });
    let buffered = core.buffered();
    let out = core.handle(at, done(slot, &running));
    let started: Vec<_> = out
        .iter()
        .filter_map(|c| match c {
            Command::Deliver { message, .. } => Some((message.outbox_id, message.claim_token)),
            _ => None,
        })
        .collect();
    LostToken {
        expired,
        buffered,
        started,
        head: (again.outbox_id, again.claim_token),
    }
}

#[test]
fn the_loss_of_a_released_token_leaves_the_fresh_claim_of_the_same_message_alone() {
    let seen = lost_token_of_a_released_head(None);
    assert!(!seen.expired, "the loss of the old token is no lapse");
    assert_eq!(seen.buffered, 2, "the fresh claim stays");
    // The key's order holds: its head goes first, under its fresh token.
    assert_eq!(seen.started, vec![seen.head]);
}

/// The bug this guards against, put back (`Mutation::LostTokenLapsesFreshClaim`): the old
/// token's loss lapses the fresh claim, and the key's next message starts before its head.
#[test]
fn a_lost_token_that_lapses_the_fresh_claim_breaks_the_keys_order() {
    let seen = lost_token_of_a_released_head(Some(Mutation::LostTokenLapsesFreshClaim));
    assert!(seen.expired);
    assert_ne!(
        seen.started,
        vec![seen.head],
        "the key's head no longer goes first"
    );
}
