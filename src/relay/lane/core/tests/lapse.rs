//! Past a lease's lapse, nothing of its batch starts: not a buffered message whose lease
//! extension failed or hangs, and not a key's next message while its predecessor's ack is
//! unrecorded and the predecessor's lease may have lapsed. Another claimer may hold those
//! messages by then, and deliver them (or the predecessor again) beside ours.

use super::*;
use crate::store::StoreOp;

const LEASE: Duration = Duration::from_secs(30);

fn keyed(key: &str, seq: i64) -> OutboxMessage {
    let mut m = message(Some(key));
    m.seq = seq;
    m
}

fn started(commands: &[Command]) -> Vec<Uuid> {
    delivered(commands).into_iter().map(|(_, id)| id).collect()
}

fn slot_of(commands: &[Command], message: &OutboxMessage) -> Slot {
    delivered(commands)
        .into_iter()
        .find(|(_, id)| *id == message.outbox_id)
        .map(|(slot, _)| slot)
        .unwrap_or_else(|| panic!("{} not delivered: {commands:?}", message.outbox_id))
}

/// The lease check a batch's claim scheduled: (batch, generation, at).
fn lease_check(commands: &[Command]) -> Option<(u64, u64, Instant)> {
    commands.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Lease { batch },
            generation,
            at,
        } => Some((*batch, *generation, *at)),
        _ => None,
    })
}

/// The extension a lease check sent: (generation, claims).
fn extension(commands: &[Command]) -> (u64, Vec<ClaimRef>) {
    commands
        .iter()
        .find_map(|c| match c {
            Command::Store(StoreRequest::Extend {
                generation, claims, ..
            }) => Some((*generation, claims.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no extension: {commands:?}"))
}

/// Every lease check of the batch, from its first at `check`, answered with a failed
/// extension, until one comes due past `until`. Returns everything the lane did.
fn fail_extensions_until(
    core: &mut LaneCore,
    mut check: (u64, u64, Instant),
    until: Instant,
) -> Vec<Command> {
    let mut all = Vec::new();
    loop {
        let (batch, generation, at) = check;
        let out = core.handle(at, Input::timer(TimerKind::Lease { batch }, generation));
        let (generation, claims) = extension(&out);
        all.extend(out);
        let out = core.handle(
            at,
            Input::Store(StoreAnswer::Extended {
                batch,
                generation,
                claims,
                result: Err(StoreError::unavailable(
                    StoreOp::ExtendLease,
                    "connection refused (test)",
                )),
            }),
        );
        let next = lease_check(&out);
        all.extend(out);
        match next {
            Some(next) if at <= until => check = next,
            _ => return all,
        }
    }
}

#[test]
fn a_failing_lease_extension_never_starts_a_buffered_message_past_the_lapse() {
    let t0 = Instant::now();
    let mut core = LaneCore::new(config(1, 2), false);
    let [x, y, z] = [message(None), message(None), message(None)];
    let out = running_with(&mut core, t0, &[x.clone(), y.clone(), z.clone()]);
    assert_eq!(started(&out), vec![x.outbox_id]);
    let slot = slot_of(&out, &x);
    let check = lease_check(&out).expect("a lease check");
    let lapse = t0 + LEASE;
    let out = fail_extensions_until(&mut core, check, lapse);
    assert!(started(&out).is_empty(), "{out:?}");
    assert!(
        has(&out, |c| matches!(
            c,
            Command::Emit(RelayEvent::LeaseExpired { outbox_ids, .. })
                if outbox_ids.contains(&y.outbox_id) && outbox_ids.contains(&z.outbox_id)
        )),
        "the buffered claims count as lapsed once the lapse passed: {out:?}"
    );
    // The running delivery ends after the lapse: its slot takes nothing of the batch.
    let out = core.handle(lapse + Duration::from_secs(1), done(slot, &x));
    assert!(started(&out).is_empty(), "{out:?}");
    assert_eq!(core.buffered(), 0);
}

#[test]
fn a_hanging_lease_extension_never_starts_a_buffered_message_past_the_lapse() {
    let t0 = Instant::now();
    let mut core = LaneCore::new(config(1, 2), false);
    let [x, y] = [message(None), message(None)];
    let out = running_with(&mut core, t0, &[x.clone(), y.clone()]);
    let slot = slot_of(&out, &x);
    let (batch, generation, at) = lease_check(&out).expect("a lease check");
    let out = core.handle(at, Input::timer(TimerKind::Lease { batch }, generation));
    extension(&out); // sent, and never answered
    let out = core.handle(t0 + LEASE + Duration::from_millis(1), done(slot, &x));
    assert!(
        started(&out).is_empty(),
        "y started past its lapse while its extension hangs: {out:?}"
    );
    assert_eq!(core.buffered(), 0, "y counts as lapsed");
}

#[test]
fn an_applied_extension_lets_the_buffered_message_start_after_the_first_lease() {
    // The control of the two above: the same timeline, the extension applied.
    let t0 = Instant::now();
    let mut core = LaneCore::new(config(1, 2), false);
    let [x, y] = [message(None), message(None)];
    let out = running_with(&mut core, t0, &[x.clone(), y.clone()]);
    let slot = slot_of(&out, &x);
    let (batch, generation, at) = lease_check(&out).expect("a lease check");
    let out = core.handle(at, Input::timer(TimerKind::Lease { batch }, generation));
    let (generation, claims) = extension(&out);
    let n = claims.len();
    core.handle(
        at,
        Input::Store(StoreAnswer::Extended {
            batch,
            generation,
            claims,
            result: Ok(vec![ClaimOutcome::Applied; n]),
        }),
    );
    // Lapses no earlier than `at + LEASE` now.
    let out = core.handle(t0 + LEASE + Duration::from_secs(1), done(slot, &x));
    assert_eq!(started(&out), vec![y.outbox_id]);
}

/// A key run `a`, `b` of key `k` with `x` between them in claim order, on one handler:
/// `a` is delivered and its ack goes out and hangs; `x` runs past the first lease's lapse.
/// Answers the lease check at 20 s with `answer` (given the claims it extends), then ends
/// `x` at 31 s. Returns the claims extended and what the lane did when `x` ended.
fn run_with_an_unrecorded_ack(
    answer: impl FnOnce(&OutboxMessage, &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError>,
) -> (OutboxMessage, OutboxMessage, Vec<ClaimRef>, Vec<Command>) {
    let t0 = Instant::now();
    let mut core = LaneCore::new(config(1, 2).key_run(16), false);
    let (a, x, b) = (keyed("k", 1), message(None), keyed("k", 3));
    let out = running_with(&mut core, t0, &[a.clone(), x.clone(), b.clone()]);
    assert_eq!(started(&out), vec![a.outbox_id]);
    let check = lease_check(&out).expect("a lease check");
    let out = core.handle(t0 + Duration::from_secs(1), done(slot_of(&out, &a), &a));
    assert_eq!(
        acks(&out),
        vec![a.claim().unwrap()],
        "a's ack goes out (and hangs)"
    );
    assert_eq!(started(&out), vec![x.outbox_id]);
    let slot = slot_of(&out, &x);
    let (batch, generation, at) = check;
    let out = core.handle(at, Input::timer(TimerKind::Lease { batch }, generation));
    let (generation, claims) = extension(&out);
    core.handle(
        at,
        Input::Store(StoreAnswer::Extended {
            batch,
            generation,
            claims: claims.clone(),
            result: answer(&a, &claims),
        }),
    );
    let out = core.handle(t0 + LEASE + Duration::from_secs(1), done(slot, &x));
    (a, b, claims, out)
}

#[test]
fn a_keys_next_message_never_starts_while_its_predecessors_ack_is_unrecorded_past_its_lapse() {
    // Every claim the lease check names is extended: b may start at 31 s only if a's lease
    // was among them, since a's ack is unrecorded and its first lease lapsed at 30 s.
    let (a, b, extended, out) =
        run_with_an_unrecorded_ack(|_, claims| Ok(vec![ClaimOutcome::Applied; claims.len()]));
    let a_kept = extended.contains(&a.claim().unwrap());
    if started(&out).contains(&b.outbox_id) {
        assert!(
            a_kept,
            "b started at 31 s while a's ack was unrecorded and a's lease, not extended, \
             lapsed at 30 s: {extended:?}"
        );
    }
    assert!(
        a_kept,
        "a finished claim whose ack is unrecorded keeps its lease: {extended:?}"
    );
    assert_eq!(started(&out), vec![b.outbox_id]);
}

#[test]
fn a_keys_next_message_is_handed_back_when_its_predecessors_unrecorded_claim_is_lost() {
    // a's extension finds its claim lost: another claimer may deliver a again. b must not
    // run beside it: it goes back to the store, which hands it out after a.
    let (a, b, extended, out) = run_with_an_unrecorded_ack(|a, claims| {
        Ok(claims
            .iter()
            .map(|c| {
                if c.outbox_id == a.outbox_id {
                    ClaimOutcome::LostClaim
                } else {
                    ClaimOutcome::Applied
                }
            })
            .collect())
    });
    assert!(extended.contains(&a.claim().unwrap()), "{extended:?}");
    assert!(!started(&out).contains(&b.outbox_id), "{out:?}");
    assert!(
        !has(&out, |c| matches!(
            c,
            Command::Emit(RelayEvent::LeaseExpired { outbox_ids, .. }) if outbox_ids.contains(&a.outbox_id)
        )),
        "a's lapse is answered by its ack, not reported twice"
    );
}

#[test]
fn a_keys_next_message_does_not_start_when_the_extension_fails_past_the_lapse() {
    let (_, b, _, out) = run_with_an_unrecorded_ack(|_, _| {
        Err(StoreError::unavailable(
            StoreOp::ExtendLease,
            "connection refused (test)",
        ))
    });
    assert!(!started(&out).contains(&b.outbox_id), "{out:?}");
}
