//! `LaneCore` driven directly: inputs in, commands out, time as a value. No tokio runtime,
//! no actors, no store.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use uuid::Uuid;

use super::*;
use crate::delivery::DeliveryError;
use crate::delivery::DeliveryFailure;
use crate::lane::DrainReport;
use crate::message::ClaimRef;
use crate::message::{OutboxMessageDraft, OutboxStatus, UnixMillis};
use crate::retry::RetryPolicy;
use crate::store::StoreOp;
use crate::store::{AckAndClaim, ClaimBatch, ClaimOutcome, NackDisposition, NackOutcome, NextDue};

mod drain;
mod gates;
mod hand_off;
mod idle;
mod lapse;
mod lease;
mod linger;
mod parallel;
mod prefetch;
mod runs;
mod sim;
mod watched;

/// A lane whose prefetch stays at `prefetch` (the grown prefetch has its own tests,
/// `tests/prefetch.rs`).
fn config(concurrency: usize, prefetch: usize) -> LaneConfig {
    LaneConfig::new("orders", "billing")
        .concurrency(concurrency)
        .prefetch(prefetch)
        .prefetch_max(0)
        .claim_linger(Duration::ZERO)
        .lease(Duration::from_secs(30))
        .retry(RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60)).jitter(false))
}

fn message(ordering_key: Option<&str>) -> OutboxMessage {
    let mut draft = OutboxMessageDraft::new("orders", "billing", json!({})).unwrap();
    if let Some(key) = ordering_key {
        draft = draft.with_ordering_key(key);
    }
    let mut message = OutboxMessage::pending(draft, Uuid::new_v4(), 1, UnixMillis::EPOCH);
    message.status = OutboxStatus::Claimed;
    message.attempt_count = 1;
    message.claim_token = Some(Uuid::new_v4());
    message
}

/// The same message claimed again, with a fresh token.
fn reclaimed(message: &OutboxMessage) -> OutboxMessage {
    let mut again = message.clone();
    again.attempt_count += 1;
    again.claim_token = Some(Uuid::new_v4());
    again
}

/// The answer to the oldest claim out.
fn batch(core: &LaneCore, messages: &[OutboxMessage]) -> Input {
    claimed(
        core,
        Ok(ClaimBatch {
            messages: messages.to_vec(),
            dead_lettered: Vec::new(),
            unreadable: Vec::new(),
            next_due: NextDue::Unknown,
        }),
    )
}

/// `result` as the answer to the oldest claim out.
fn claimed(core: &LaneCore, result: Result<ClaimBatch, StoreError>) -> Input {
    Input::Store(StoreAnswer::Claimed {
        claim: oldest_claim(core),
        result,
    })
}

/// The oldest claim out (a test's answers name it as the store's would).
fn oldest_claim(core: &LaneCore) -> ClaimId {
    core.claim_loop.oldest().unwrap_or(ClaimId(0))
}

/// A short claim that also said when the next message is due (as memory and SQLite do).
fn batch_saying(core: &LaneCore, messages: &[OutboxMessage], due: Option<Duration>) -> Input {
    claimed(
        core,
        Ok(ClaimBatch {
            messages: messages.to_vec(),
            dead_lettered: Vec::new(),
            unreadable: Vec::new(),
            next_due: NextDue::Known(due),
        }),
    )
}

fn unavailable() -> StoreError {
    StoreError::unavailable(StoreOp::Claim, "connection refused (test)")
}

fn claims(commands: &[Command]) -> Vec<usize> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Store(StoreRequest::Claim { limit, .. })
            | Command::Store(StoreRequest::AckAndClaim { limit, .. }) => Some(*limit),
            _ => None,
        })
        .collect()
}

fn delivered(commands: &[Command]) -> Vec<(Slot, Uuid)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Deliver { slot, message } => Some((*slot, message.outbox_id)),
            _ => None,
        })
        .collect()
}

fn acks(commands: &[Command]) -> Vec<ClaimRef> {
    commands
        .iter()
        .flat_map(|c| match c {
            Command::Store(StoreRequest::Ack(acks))
            | Command::Store(StoreRequest::AckAndClaim { acks, .. }) => acks.clone(),
            _ => Vec::new(),
        })
        .collect()
}

fn has(commands: &[Command], pred: impl Fn(&Command) -> bool) -> bool {
    commands.iter().any(pred)
}

fn done(slot: Slot, message: &OutboxMessage) -> Input {
    Input::DeliveryDone {
        slot,
        outbox_id: message.outbox_id,
        result: Ok(()),
        elapsed: Duration::from_millis(5),
    }
}

/// A delivery that failed with a retryable error.
fn failed(slot: Slot, message: &OutboxMessage) -> Input {
    Input::DeliveryDone {
        slot,
        outbox_id: message.outbox_id,
        result: Err(DeliveryFailure::from_error(&DeliveryError::retryable(
            "503 (test)",
        ))),
        elapsed: Duration::from_millis(5),
    }
}

/// The claims released, in order.
fn released(commands: &[Command]) -> Vec<Uuid> {
    commands
        .iter()
        .flat_map(|c| match c {
            Command::Store(StoreRequest::Release(claims)) => {
                claims.iter().map(|c| c.outbox_id).collect()
            }
            _ => Vec::new(),
        })
        .collect()
}

/// The store recorded `n` nacks (retries).
fn nacked(n: usize) -> Input {
    Input::Store(StoreAnswer::Nacked(Ok(vec![NackOutcome::Requeued; n])))
}

/// The store took back `n` released claims.
fn released_all(n: usize) -> Input {
    Input::Store(StoreAnswer::Released {
        sent: n,
        result: Ok(vec![ClaimOutcome::Applied; n]),
    })
}

fn acked_all(n: usize) -> Input {
    Input::Store(StoreAnswer::Acked {
        result: Ok(vec![ClaimOutcome::Applied; n]),
        wall_ms: UnixMillis::EPOCH,
    })
}

/// A started lane that claimed `messages` (claim limit `concurrency + prefetch`).
fn running_with(core: &mut LaneCore, now: Instant, messages: &[OutboxMessage]) -> Vec<Command> {
    let out = core.handle(now, Input::Start);
    assert_eq!(claims(&out).len(), 1, "{out:?}");
    core.handle(now, batch(core, messages))
}

#[test]
fn a_claim_asks_for_free_slots_plus_prefetch_room_capped_by_batch_size() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 3), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![5]);

    let mut core = LaneCore::new(config(4, 8).batch_size(6), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![6]);

    let mut core = LaneCore::new(config(2, 0), false);
    assert_eq!(claims(&core.handle(now, Input::Start)), vec![2]);
}

#[test]
fn claimed_messages_fill_free_slots_and_the_rest_wait_in_the_buffer() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 2), false);
    let messages: Vec<_> = (0..3).map(|_| message(None)).collect();
    let out = running_with(&mut core, now, &messages);
    let started: Vec<Uuid> = delivered(&out).into_iter().map(|(_, id)| id).collect();
    assert_eq!(started, vec![messages[0].outbox_id, messages[1].outbox_id]);
    assert_eq!((core.in_flight(), core.buffered()), (2, 1));
    // The lease timer counts from when the claim was sent.
    assert!(has(&out, |c| matches!(
        c,
        Command::TimerAt { kind: TimerKind::Lease { .. }, generation: 0, at, .. } if *at == now + Duration::from_secs(20)
    )));
    // A short claim: no more claims, and no `next_due` while deliveries run.
    assert!(claims(&out).is_empty());
    assert!(!has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::NextDue)
    )));
}

#[test]
fn a_finished_delivery_is_acked_at_once_and_its_slot_takes_the_buffered_message() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 1), false);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(now, done(slot, &messages[0]));
    assert_eq!(delivered(&out), vec![(slot, messages[1].outbox_id)]);
    assert_eq!(acks(&out), vec![messages[0].claim().unwrap()]);
    // The claim came back full, so a claim is due: the ack rides with it.
    assert!(has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::AckAndClaim { limit: 1, .. })
    )));
}

#[test]
fn one_flush_at_a_time_and_what_finishes_meanwhile_goes_out_together() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(3, 1), false);
    let messages: Vec<_> = (0..3).map(|_| message(None)).collect();
    // Four asked, three came: the store is drained, so acks go out alone.
    core.handle(now, Input::Start);
    let out = core.handle(
        now,
        claimed(
            &core,
            Ok(ClaimBatch {
                messages: messages.clone(),
                dead_lettered: Vec::new(),
                unreadable: Vec::new(),
                next_due: NextDue::Unknown,
            }),
        ),
    );
    let slots: Vec<Slot> = delivered(&out).into_iter().map(|(s, _)| s).collect();
    let out = core.handle(now, done(slots[0], &messages[0]));
    assert!(has(
        &out,
        |c| matches!(c, Command::Store(StoreRequest::Ack(a)) if a.len() == 1)
    ));
    let out = core.handle(now, done(slots[1], &messages[1]));
    let out2 = core.handle(now, done(slots[2], &messages[2]));
    assert!(
        acks(&out).is_empty() && acks(&out2).is_empty(),
        "a flush is in flight"
    );
    let out = core.handle(now, acked_all(1));
    assert_eq!(acks(&out).len(), 2, "{out:?}");
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::Delivered { .. })
    )));
}

#[test]
fn the_idle_path_claims_once_per_wake_and_rides_a_claim_on_the_last_ack() {
    // A short claim that did not say when the next message is due (PostgreSQL's
    // one-statement claim): the lane asks nothing while it holds the claim, then asks by
    // riding a claim on the last ack, and sleeps on that claim's empty answer.
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 2), false);
    let first = message(None);
    let out = running_with(&mut core, now, std::slice::from_ref(&first));
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(now, done(slot, &first));
    assert!(
        !has(&out, |c| matches!(
            c,
            Command::Store(StoreRequest::NextDue) | Command::Store(StoreRequest::Ack(_))
        )),
        "{out:?}"
    );
    assert!(
        has(&out, |c| matches!(
            c,
            Command::Store(StoreRequest::AckAndClaim { acks, limit: 4, .. }) if acks == &[first.claim().unwrap()]
        )),
        "the last ack carries the claim that answers next_due: {out:?}"
    );
    let later = now + Duration::from_millis(3);
    let empty = ClaimBatch {
        next_due: NextDue::Known(Some(Duration::from_secs(3))),
        ..ClaimBatch::default()
    };
    let out = core.handle(
        later,
        Input::Store(StoreAnswer::AckedAndClaimed {
            claim: oldest_claim(&core),
            result: Ok(AckAndClaim {
                acked: vec![ClaimOutcome::Applied],
                claimed: Ok(empty),
            }),
            wall_ms: UnixMillis::EPOCH,
        }),
    );
    assert!(
        !has(&out, |c| matches!(c, Command::Store(StoreRequest::NextDue))),
        "{out:?}"
    );
    assert!(has(&out, |c| matches!(
        c,
        Command::TimerAt { kind: TimerKind::Poll, at, .. } if *at == later + Duration::from_secs(3)
    )));
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::Idle { .. })
    )));
    // A burst of wakes while the claim is out: still one claim.
    assert_eq!(claims(&core.handle(later, Input::Wake)), vec![4]);
    assert!(claims(&core.handle(later, Input::Wake)).is_empty());
}

#[test]
fn a_short_claim_that_said_when_next_is_due_is_slept_on_after_a_plain_ack() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 2), false);
    core.handle(now, Input::Start);
    let first = message(None);
    let out = core.handle(
        now,
        batch_saying(
            &core,
            std::slice::from_ref(&first),
            Some(Duration::from_secs(3)),
        ),
    );
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(now, done(slot, &first));
    assert!(claims(&out).is_empty(), "the store said: {out:?}");
    assert_eq!(acks(&out), vec![first.claim().unwrap()]);
    let out = core.handle(now, acked_all(1));
    assert!(
        !has(&out, |c| matches!(c, Command::Store(StoreRequest::NextDue))),
        "{out:?}"
    );
    assert!(has(&out, |c| matches!(
        c,
        Command::TimerAt { kind: TimerKind::Poll, at, .. } if *at == now + Duration::from_secs(3)
    )));
}

#[test]
fn a_stale_idle_tick_is_ignored_and_the_current_one_claims() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false);
    core.handle(now, Input::Start);
    let out = core.handle(now, batch(&core, &[]));
    assert!(has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::NextDue)
    )));
    let out = core.handle(now, Input::Store(StoreAnswer::NextDue(Ok(None))));
    let Some(generation) = out.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Poll,
            generation,
            at,
        } => {
            assert_eq!(*at, now + DEFAULT_MAX_POLL);
            Some(*generation)
        }
        _ => None,
    }) else {
        panic!("{out:?}")
    };
    assert!(claims(&core.handle(now, Input::timer(TimerKind::Poll, generation - 1))).is_empty());
    assert_eq!(
        claims(&core.handle(now, Input::timer(TimerKind::Poll, generation))),
        vec![1]
    );
}

const DEFAULT_MAX_POLL: Duration = crate::config::DEFAULT_MAX_POLL_INTERVAL;

#[test]
fn store_errors_back_off_by_the_lanes_policy_and_hold_claims_until_the_retry() {
    let now = Instant::now();
    let backoff =
        RetryPolicy::new(Duration::from_millis(100), Duration::from_millis(300)).jitter(false);
    let mut core = LaneCore::new(config(1, 0).store_backoff(backoff), false);
    core.handle(now, Input::Start);
    let out = core.handle(now, claimed(&core, Err(unavailable())));
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::StoreError {
            op: StoreOp::Claim,
            ..
        })
    )));
    assert!(has(
        &out,
        |c| matches!(c, Command::TimerAt { kind: TimerKind::StoreRetry, at, .. } if *at == now + Duration::from_millis(100))
    ));
    assert!(
        claims(&core.handle(now, Input::Wake)).is_empty(),
        "backing off"
    );
    assert_eq!(
        claims(&core.handle(now, Input::timer(TimerKind::StoreRetry, 0))),
        vec![1]
    );
    let out = core.handle(now, claimed(&core, Err(unavailable())));
    assert!(has(
        &out,
        |c| matches!(c, Command::TimerAt { kind: TimerKind::StoreRetry, at, .. } if *at == now + Duration::from_millis(200))
    ));
    core.handle(now, Input::timer(TimerKind::StoreRetry, 0));
    core.handle(now, claimed(&core, Err(unavailable())));
    core.handle(now, Input::timer(TimerKind::StoreRetry, 0));
    let out = core.handle(now, claimed(&core, Err(unavailable())));
    assert!(
        has(
            &out,
            |c| matches!(c, Command::TimerAt { kind: TimerKind::StoreRetry, at, .. } if *at == now + Duration::from_millis(300))
        ),
        "capped"
    );
}

#[test]
fn a_failed_ack_is_kept_and_sent_again_after_the_backoff() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let first = message(None);
    let out = running_with(&mut core, now, std::slice::from_ref(&first));
    let slot = delivered(&out)[0].0;
    // The short claim did not say when the next message is due: the ack rides on the
    // claim that asks.
    let out = core.handle(now, done(slot, &first));
    assert!(
        has(&out, |c| matches!(
            c,
            Command::Store(StoreRequest::AckAndClaim { .. })
        )),
        "{out:?}"
    );
    let out = core.handle(
        now,
        Input::Store(StoreAnswer::AckedAndClaimed {
            claim: oldest_claim(&core),
            result: Err(unavailable()),
            wall_ms: UnixMillis::EPOCH,
        }),
    );
    assert!(acks(&out).is_empty());
    assert!(has(&out, |c| matches!(
        c,
        Command::TimerAt {
            kind: TimerKind::StoreRetry,
            ..
        }
    )));
    assert_eq!(core.held(), 1, "the finished claim is still ours to record");
    let out = core.handle(now, Input::timer(TimerKind::StoreRetry, 0));
    assert_eq!(acks(&out), vec![first.claim().unwrap()]);
}

#[test]
fn a_failure_is_nacked_with_the_retry_policys_delay() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 1), false);
    let first = message(None);
    let out = running_with(&mut core, now, std::slice::from_ref(&first));
    let slot = delivered(&out)[0].0;
    let out = core.handle(
        now,
        Input::DeliveryDone {
            slot,
            outbox_id: first.outbox_id,
            result: Err(DeliveryFailure::timeout(Duration::from_secs(1))),
            elapsed: Duration::from_secs(1),
        },
    );
    let nack = out
        .iter()
        .find_map(|c| match c {
            Command::Store(StoreRequest::Nack(nacks)) => nacks.first().cloned(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{out:?}"));
    assert_eq!(nack.claim, first.claim().unwrap());
    assert_eq!(
        nack.disposition,
        NackDisposition::Retry(Duration::from_secs(1))
    );
    let out = core.handle(
        now,
        Input::Store(StoreAnswer::Nacked(Ok(vec![NackOutcome::Requeued]))),
    );
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::Failed { .. })
    )));
    assert!(
        has(&out, |c| matches!(c, Command::Store(StoreRequest::NextDue))),
        "the retry's due time is new"
    );
}

#[test]
fn a_dead_handler_is_replaced_and_its_delivery_nacked_as_a_panic() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 0), false);
    let first = message(None);
    let out = running_with(&mut core, now, std::slice::from_ref(&first));
    let slot = delivered(&out)[0].0;
    let later = now + Duration::from_secs(2);
    let out = core.handle(
        later,
        Input::HandlerDied {
            slot,
            reason: "boom".into(),
        },
    );
    assert!(
        matches!(out[0], Command::ReplaceHandler(s) if s == slot),
        "{out:?}"
    );
    let Some(Command::Store(StoreRequest::Nack(nacks))) = out
        .iter()
        .find(|c| matches!(c, Command::Store(StoreRequest::Nack(_))))
    else {
        panic!("{out:?}")
    };
    assert!(nacks[0].error.contains("handler panicked: boom"));
    // Its late report (none will come from a dead actor, but a stale one must not count).
    assert!(acks(&core.handle(later, done(slot, &first))).is_empty());
}

#[test]
fn an_ack_that_frees_an_ordering_key_claims_again() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let head = message(Some("customer-7"));
    core.handle(now, Input::Start);
    // The store said nothing else is due: only the ack freeing the key makes the lane claim.
    let out = core.handle(now, batch_saying(&core, std::slice::from_ref(&head), None));
    let slot = delivered(&out)[0].0;
    let out = core.handle(now, done(slot, &head));
    assert!(claims(&out).is_empty(), "{out:?}");
    let out = core.handle(now, acked_all(1));
    assert_eq!(claims(&out), vec![2], "{out:?}");
}

#[test]
fn while_deliveries_run_the_poll_ceiling_still_claims_without_next_due() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0), false);
    let first = message(None);
    let out = running_with(&mut core, now, std::slice::from_ref(&first));
    assert!(!has(&out, |c| matches!(
        c,
        Command::Store(StoreRequest::NextDue)
    )));
    let Some(generation) = out.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Poll,
            generation,
            at,
        } if *at == now + DEFAULT_MAX_POLL => Some(*generation),
        _ => None,
    }) else {
        panic!("no poll ceiling: {out:?}")
    };
    // An empty claim on the ceiling arms it again, still without `next_due`.
    let out = core.handle(
        now + DEFAULT_MAX_POLL,
        Input::timer(TimerKind::Poll, generation),
    );
    assert_eq!(claims(&out), vec![1]);
    let out = core.handle(now + DEFAULT_MAX_POLL, batch(&core, &[]));
    assert!(
        !has(&out, |c| matches!(c, Command::Store(StoreRequest::NextDue))),
        "{out:?}"
    );
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
}
