//! Claim gates in the core, on a manual clock: the rate limit caps claims and throughput,
//! an open breaker claims nothing, a half-open one claims one probe, and a lane recovers
//! within one cool-down of its target's return.

use super::sim::{RowState, Sim};
use super::*;
use crate::config::{CircuitBreakerConfig, RateLimit};
use crate::lane::{BreakerState, GateKind};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn throughput_is_capped_at_the_rate_within_5_percent_over_30_virtual_seconds() {
    let lane = config(16, 16)
        .rate_limit(Some(RateLimit::new(200, secs(1)).burst(20)))
        .lease(secs(30));
    let mut sim = Sim::new(lane, 6_500, Box::new(|_| Ok(())));
    let end = sim.start + secs(30);
    sim.run_until(end);
    let delivered = sim.delivered_at.len();
    eprintln!(
        "delivered {delivered} in 30 virtual s at 200/s (burst 20), {} claims, throttled {:?}",
        sim.claims.len(),
        sim.throttled
    );
    // 200/s for 30 s, plus the burst the bucket starts with.
    assert!(
        delivered.abs_diff(6_000) <= 300,
        "delivered {delivered} in 30 virtual seconds at 200/s"
    );
    assert!(delivered <= 6_000 + 20, "over the budget: {delivered}");
    // It claims in batches (50 ms' worth, 10 tokens), not one statement per token.
    assert!(
        sim.claims.len() <= 6_000 / 8,
        "{} claims for {delivered} messages",
        sim.claims.len()
    );
    // No claim goes beyond the budget: within any one second, at most 200 + the burst.
    let mut window = std::collections::VecDeque::new();
    for &(at, _, got, _) in &sim.claims {
        for _ in 0..got {
            window.push_back(at);
        }
        while window
            .front()
            .is_some_and(|first| at.duration_since(*first) >= secs(1))
        {
            window.pop_front();
        }
        assert!(
            window.len() <= 220,
            "{} claimed within a second",
            window.len()
        );
    }
    // Claimed messages never wait for tokens: they start almost at once, far within the
    // lease.
    assert!(
        sim.longest_wait_for_handler <= secs(30) / 100,
        "a claimed message waited {:?} for its handler",
        sim.longest_wait_for_handler
    );
    assert!(
        sim.throttled > secs(20),
        "the lane was held back most of the time: {:?}",
        sim.throttled
    );
}

#[test]
fn without_a_rate_limit_the_same_lane_is_not_throttled() {
    let mut sim = Sim::new(config(16, 16), 2_000, Box::new(|_| Ok(())));
    let end = sim.start + secs(30);
    sim.run_until(end);
    assert_eq!(sim.count(RowState::Delivered), 2_000);
    assert_eq!(sim.throttled, Duration::ZERO);
}

/// A breaker lane against a target that is down for `outage`, then up.
fn outage(outage: Duration, messages: usize) -> Sim {
    let lane = config(4, 4)
        .circuit_breaker(Some(
            CircuitBreakerConfig::default()
                .consecutive_failures(Some(5))
                .cool_down(secs(10))
                .max_cool_down(secs(60)),
        ))
        .retry(RetryPolicy::new(secs(1), secs(60)).jitter(false));
    let target = move |at: Duration| {
        if at < outage {
            Err(DeliveryError::retryable("503 Service Unavailable"))
        } else {
            Ok(())
        }
    };
    Sim::new(lane, messages, Box::new(target))
}

#[test]
fn a_five_minute_outage_ends_with_no_dead_letters_and_everything_delivered() {
    let mut sim = outage(secs(300), 200);
    let back = sim.start + secs(300);
    sim.run_until(sim.start + secs(900));
    assert_eq!(
        sim.count(RowState::Dead),
        0,
        "dead letters after the outage"
    );
    assert_eq!(sim.count(RowState::Delivered), 200);
    assert_eq!(
        sim.attempts_while_open, 0,
        "claims while the breaker was open"
    );
    // While half-open, a claim asks for one message: the probe.
    for &(at, limit, _, state) in &sim.claims {
        if state == Some(BreakerState::HalfOpen) {
            assert_eq!(limit, 1, "a half-open claim at {:?}", at - sim.start);
        }
    }
    // Few attempts during the outage: the first failures, then one probe per cool-down.
    let during: usize = sim
        .claims
        .iter()
        .filter(|(at, ..)| *at < back)
        .map(|(_, _, got, _)| got)
        .sum();
    assert!(during <= 20, "{during} attempts spent during the outage");
    // Recovery within one cool-down (at most the longest, 60 s) of the target's return.
    let first = sim.delivered_at.first().copied().expect("a delivery");
    eprintln!(
        "outage: {during} attempts during 300 s, first delivery {:?} after the return, \
         breaker {:?}",
        first.saturating_duration_since(back),
        sim.breaker_changes
            .iter()
            .map(|(at, s)| (at.duration_since(sim.start).as_secs(), *s))
            .collect::<Vec<_>>()
    );
    assert!(
        first >= back && first <= back + secs(60),
        "first delivery {:?} after the return",
        first.saturating_duration_since(back)
    );
    let closed = sim
        .breaker_changes
        .iter()
        .find(|(at, state)| *at >= back && *state == BreakerState::Closed)
        .expect("the breaker closes");
    assert!(closed.0 <= back + secs(60), "{:?}", sim.breaker_changes);
}

#[test]
fn an_open_breaker_claims_nothing_then_sends_one_probe_per_cool_down() {
    let mut sim = outage(secs(3600), 50);
    sim.run_until(sim.start + secs(1));
    let opened: Vec<_> = sim
        .breaker_changes
        .iter()
        .filter(|(_, s)| *s == BreakerState::Open)
        .collect();
    assert_eq!(opened.len(), 1, "{:?}", sim.breaker_changes);
    // Buffered claims went back unused when it opened: at most the five failures and the
    // deliveries already running spent an attempt.
    let attempts: u32 = sim.rows.iter().map(|r| r.message.attempt_count).sum();
    assert!(attempts <= 8, "{attempts} attempts before the breaker held");
    let claims_before = sim.claims.len();
    sim.run_until(sim.start + secs(9));
    assert_eq!(
        sim.claims.len(),
        claims_before,
        "claimed during the cool-down"
    );
    sim.run_until(sim.start + secs(11));
    let probes: Vec<_> = sim.claims[claims_before..].to_vec();
    assert_eq!(probes.len(), 1, "{probes:?}");
    assert_eq!((probes[0].1, probes[0].2), (1, 1), "one probe message");
    // The probe failed: open again, for twice the cool-down.
    let last = sim.breaker_changes.last().copied();
    assert_eq!(last.map(|(_, s)| s), Some(BreakerState::Open));
    sim.run_until(sim.start + secs(29));
    assert_eq!(
        sim.claims.len(),
        claims_before + 1,
        "claimed before 20 s passed"
    );
    sim.run_until(sim.start + secs(31));
    assert_eq!(sim.claims.len(), claims_before + 2);
}

#[test]
fn retry_after_holds_the_whole_lane_when_configured() {
    let lane = config(2, 0)
        .retry_after_holds_lane(true)
        .retry(RetryPolicy::new(secs(1), secs(120)).jitter(false));
    let first = std::cell::Cell::new(true);
    let mut sim = Sim::new(
        lane,
        10,
        Box::new(move |_| {
            if first.replace(false) {
                Err(DeliveryError::retry_after(
                    secs(30),
                    "429 Too Many Requests",
                ))
            } else {
                Ok(())
            }
        }),
    );
    sim.run_until(sim.start + secs(29));
    // The two first claims ran (one hit the 429); then nothing until the hold is over.
    assert_eq!(sim.count(RowState::Delivered), 1, "{:?}", sim.claims);
    sim.run_until(sim.start + secs(31));
    assert_eq!(sim.count(RowState::Delivered), 10);
}

#[test]
fn a_retry_after_of_a_year_is_held_to_the_lanes_ceiling() {
    let lane = config(1, 0)
        .retry(RetryPolicy::new(secs(1), secs(120)).jitter(false))
        .retry_after_max(secs(60));
    let first = std::cell::Cell::new(true);
    let mut sim = Sim::new(
        lane,
        1,
        Box::new(move |_| {
            if first.replace(false) {
                Err(DeliveryError::retry_after(
                    secs(365 * 24 * 3600),
                    "503 Service Unavailable",
                ))
            } else {
                Ok(())
            }
        }),
    );
    sim.run_until(sim.start + secs(59));
    assert_eq!(sim.count(RowState::Delivered), 0, "{:?}", sim.claims);
    // Retried at the ceiling, not in a year.
    sim.run_until(sim.start + secs(61));
    assert_eq!(sim.count(RowState::Delivered), 1, "{:?}", sim.claims);
}

#[test]
fn an_opening_hands_back_the_buffer_and_a_claim_answered_after_it_unused() {
    let now = Instant::now();
    let breaker = CircuitBreakerConfig::default().consecutive_failures(Some(2));
    let mut core = LaneCore::new(config(2, 2).circuit_breaker(Some(breaker)), false);
    let messages: Vec<_> = (0..5).map(|_| message(None)).collect();
    let out = running_with(&mut core, now, &messages[..4]);
    let slots: Vec<Slot> = delivered(&out).into_iter().map(|(s, _)| s).collect();
    assert_eq!(slots.len(), 2);
    // The first failure frees a slot for a buffered message, and once its nack is
    // recorded a claim goes out.
    let out = core.handle(now, failed(slots[0], &messages[0]));
    assert!(
        claims(&out).is_empty(),
        "the nack still holds its message: {out:?}"
    );
    let out = core.handle(now, nacked(1));
    assert_eq!(claims(&out), vec![1], "{out:?}");
    // The second opens the breaker while that claim is in flight: the buffered message
    // goes back unused.
    let out = core.handle(now, failed(slots[1], &messages[1]));
    assert_eq!(core.breaker_state(), Some(BreakerState::Open));
    assert_eq!(released(&out), vec![messages[3].outbox_id], "{out:?}");
    assert!(has(&out, |c| matches!(
        c,
        Command::Emit(RelayEvent::BreakerChanged {
            state: BreakerState::Open,
            ..
        })
    )));
    // The claim's answer comes after the opening: handed back, not delivered.
    let out = core.handle(now, batch(&core, &messages[4..]));
    assert_eq!(released(&out), vec![messages[4].outbox_id], "{out:?}");
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert!(claims(&out).is_empty(), "{out:?}");
}

#[test]
fn a_breaker_lane_claims_nothing_during_the_cool_down_and_asks_again_when_it_ends() {
    let now = Instant::now();
    let breaker = CircuitBreakerConfig::default()
        .consecutive_failures(Some(1))
        .cool_down(secs(10));
    let mut core = LaneCore::new(config(1, 0).circuit_breaker(Some(breaker)), false);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages[..1]);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    // The failure opens the breaker; once its nack is recorded (until then the failed
    // message is still claimed, and fills the lane's bound) the lane wants to claim, so a
    // timer is set for the cool-down's end.
    let out = core.handle(now, failed(slot, &messages[0]));
    assert!(claims(&out).is_empty(), "{out:?}");
    let out = core.handle(now, nacked(1));
    let gate_at = out.iter().find_map(|c| match c {
        Command::TimerAt {
            kind: TimerKind::Gate,
            generation,
            at,
        } => Some((*generation, *at)),
        _ => None,
    });
    let Some((generation, at)) = gate_at else {
        panic!("no gate timer: {out:?}")
    };
    assert_eq!(at, now + secs(10));
    // A wake-up during the cool-down claims nothing (and needs no second timer).
    let out = core.handle(now + secs(1), Input::Wake);
    assert!(claims(&out).is_empty(), "{out:?}");
    assert!(
        !has(&out, |c| matches!(
            c,
            Command::TimerAt {
                kind: TimerKind::Gate,
                ..
            }
        )),
        "{out:?}"
    );
    let out = core.handle(at, Input::timer(TimerKind::Gate, generation));
    assert_eq!(claims(&out), vec![1], "the probe: {out:?}");
    assert_eq!(core.breaker_state(), Some(BreakerState::HalfOpen));
    // The throttled time counted is the wait for the gate.
    assert!(has(&out, |c| matches!(
        c,
        Command::Throttled { gate: GateKind::Breaker, duration } if *duration == secs(10)
    )));
}

#[test]
fn a_retry_after_hold_hands_back_the_buffer_and_claims_nothing_until_it_ends() {
    let now = Instant::now();
    let lane = config(1, 1)
        .retry_after_holds_lane(true)
        .retry(RetryPolicy::new(secs(1), secs(60)).jitter(false));
    let mut core = LaneCore::new(lane, false);
    let messages = [message(None), message(None)];
    let out = running_with(&mut core, now, &messages);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(
        now,
        Input::DeliveryDone {
            slot,
            outbox_id: messages[0].outbox_id,
            result: Err(DeliveryFailure::from_error(&DeliveryError::retry_after(
                secs(30),
                "429 (test)",
            ))),
            elapsed: Duration::from_millis(5),
        },
    );
    assert_eq!(released(&out), vec![messages[1].outbox_id], "{out:?}");
    assert!(delivered(&out).is_empty(), "{out:?}");
    assert!(claims(&out).is_empty(), "{out:?}");
    assert!(claims(&core.handle(now, nacked(1))).is_empty());
    assert!(claims(&core.handle(now, released_all(1))).is_empty());
    let out = core.handle(now + secs(29), Input::Wake);
    assert!(claims(&out).is_empty(), "{out:?}");
    let out = core.handle(now + secs(30), Input::Wake);
    assert_eq!(claims(&out).len(), 1, "{out:?}");
}

#[test]
fn a_probe_answered_with_a_429_reopens_for_twice_the_cool_down_then_probes_again() {
    let now = Instant::now();
    let breaker = CircuitBreakerConfig::default()
        .consecutive_failures(Some(1))
        .cool_down(secs(10));
    let lane = config(1, 1)
        .circuit_breaker(Some(breaker))
        .retry_after_holds_lane(true)
        .retry(RetryPolicy::new(secs(1), secs(60)).jitter(false));
    let mut core = LaneCore::new(lane, false);
    let messages: Vec<_> = (0..3).map(|_| message(None)).collect();
    let out = running_with(&mut core, now, &messages[..1]);
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    core.handle(now, failed(slot, &messages[0]));
    assert_eq!(core.breaker_state(), Some(BreakerState::Open));
    // After the cool-down the probe is claimed; its 429 re-opens the breaker and holds the
    // lane (5 s, within the 20 s re-opening).
    let out = core.handle(now + secs(10), Input::Wake);
    assert_eq!(claims(&out), vec![1], "{out:?}");
    let out = core.handle(now + secs(10), batch(&core, &messages[1..2]));
    let [(slot, _)] = delivered(&out)[..] else {
        panic!("{out:?}")
    };
    let out = core.handle(
        now + secs(10),
        Input::DeliveryDone {
            slot,
            outbox_id: messages[1].outbox_id,
            result: Err(DeliveryFailure::from_error(&DeliveryError::retry_after(
                secs(5),
                "429 (test)",
            ))),
            elapsed: Duration::from_millis(5),
        },
    );
    assert_eq!(core.breaker_state(), Some(BreakerState::Open), "{out:?}");
    assert!(claims(&core.handle(now + secs(10), nacked(1))).is_empty());
    // The re-opening doubled the cool-down: nothing until 30 s.
    let out = core.handle(now + secs(29), Input::Wake);
    assert!(claims(&out).is_empty(), "{out:?}");
    let out = core.handle(now + secs(30), Input::Wake);
    assert_eq!(claims(&out), vec![1], "the next probe: {out:?}");
}
