//! Key runs: a claim hands out a key's head with the messages queued behind it; the lane
//! delivers them one after another and hands the rest back when one fails.

use super::*;

fn keyed(key: &str, seq: i64) -> OutboxMessage {
    let mut m = message(Some(key));
    m.seq = seq;
    m
}

fn ids(messages: &[&OutboxMessage]) -> Vec<Uuid> {
    messages.iter().map(|m| m.outbox_id).collect()
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

fn key_runs(commands: &[Command]) -> Vec<usize> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Store(StoreRequest::Claim { key_run, .. })
            | Command::Store(StoreRequest::AckAndClaim { key_run, .. }) => Some(*key_run),
            _ => None,
        })
        .collect()
}

#[test]
fn a_key_run_is_delivered_one_message_after_another() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(4, 4).key_run(16), false);
    let (k1, k2, k3) = (keyed("k", 1), keyed("k", 2), keyed("k", 4));
    let (l1, free) = (keyed("l", 3), message(None));
    let batch_in = [k1.clone(), k2.clone(), k3.clone(), l1.clone(), free.clone()];
    let out = running_with(&mut core, now, &batch_in);
    assert_eq!(
        started(&out),
        ids(&[&k1, &l1, &free]),
        "k's run waits for its head, though a slot is idle"
    );
    assert_eq!(core.buffered(), 2);

    let out = core.handle(now, done(slot_of(&out, &k1), &k1));
    assert_eq!(
        started(&out),
        ids(&[&k2]),
        "the next of k, once k1 succeeded"
    );
    let out = core.handle(now, done(slot_of(&out, &k2), &k2));
    assert_eq!(started(&out), ids(&[&k3]));
    assert_eq!(core.buffered(), 0);
}

#[test]
fn a_failed_run_message_hands_the_rest_of_its_key_back() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 4).key_run(16), false);
    let (k1, k2, k3) = (keyed("k", 1), keyed("k", 2), keyed("k", 3));
    let (l1, l2) = (keyed("l", 4), keyed("l", 5));
    let out = running_with(
        &mut core,
        now,
        &[k1.clone(), k2.clone(), k3.clone(), l1.clone(), l2.clone()],
    );
    assert_eq!(started(&out), ids(&[&k1, &l1]));

    let out = core.handle(now, failed(slot_of(&out, &k1), &k1));
    assert_eq!(released(&out), ids(&[&k2, &k3]), "{out:?}");
    assert!(has(
        &out,
        |c| matches!(c, Command::Store(StoreRequest::Nack(n)) if n[0].claim == k1.claim().unwrap())
    ));
    assert!(
        started(&out).is_empty(),
        "nothing of k runs after its failure, and l2 waits for l1"
    );
    assert_eq!(core.buffered(), 1, "l's run stays");
}

#[test]
fn a_handler_that_dies_mid_run_hands_the_rest_of_its_key_back() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(1, 2).key_run(16), false);
    let (k1, k2, k3) = (keyed("k", 1), keyed("k", 2), keyed("k", 3));
    let out = running_with(&mut core, now, &[k1.clone(), k2.clone(), k3.clone()]);
    let out = core.handle(now, done(slot_of(&out, &k1), &k1));
    let slot = slot_of(&out, &k2);
    let out = core.handle(
        now,
        Input::HandlerDied {
            slot,
            reason: "boom".into(),
        },
    );
    assert_eq!(released(&out), ids(&[&k3]), "{out:?}");
    assert!(started(&out).is_empty());
    assert_eq!(core.buffered(), 0);
}

#[test]
fn runs_are_asked_for_once_deliveries_are_quick_against_a_claim_round_trip() {
    let now = Instant::now();
    let mut core = LaneCore::new(config(2, 0).key_run(16), false);
    let out = core.handle(now, Input::Start);
    assert_eq!(key_runs(&out), [1], "heads only until both are timed");
    // The claim took 2 ms; a delivery takes 100 µs: 20 fit in a round trip, capped at 16.
    let (a, b) = (message(None), message(None));
    let both = [a.clone(), b.clone()];
    let later = now + Duration::from_millis(2);
    let out = core.handle(later, batch(&core, &both));
    let quick = |slot, m: &OutboxMessage| Input::DeliveryDone {
        slot,
        outbox_id: m.outbox_id,
        result: Ok(()),
        elapsed: Duration::from_micros(100),
    };
    let slot = slot_of(&out, &a);
    let out = core.handle(later, quick(slot, &a));
    assert_eq!(acks(&out), [a.claim().unwrap()]);
    // The ack rides on a claim of 1, which a run would fill alone: heads only.
    assert_eq!(claims(&out), [1], "{out:?}");
    assert_eq!(key_runs(&out), [1], "{out:?}");
    // A claim of 128 asks for runs of 16 (20 fit; the configured cap).
    assert_eq!(core.key_run(128), 16);

    // Slow deliveries (the average moves an eighth at a time): heads only again.
    // `key_run = 1`: heads only, however quick the deliveries.
    let mut heads = LaneCore::new(config(2, 0).key_run(1), false);
    heads.cadence.claim_time = Some(Duration::from_millis(2));
    heads.cadence.delivery_time = Some(Duration::from_micros(100));
    assert_eq!(heads.key_run(128), 1);

    let mut slow = LaneCore::new(config(2, 0).key_run(4), false);
    slow.cadence.claim_time = Some(Duration::from_millis(2));
    slow.cadence.delivery_time = Some(Duration::from_micros(100));
    assert_eq!(slow.key_run(128), 4, "the configured cap");
    slow.cadence.delivery_time = Some(Duration::from_millis(10));
    assert_eq!(
        slow.key_run(128),
        1,
        "a 10 ms delivery does not fit in a 2 ms claim"
    );
    slow.cadence.delivery_time = Some(Duration::from_micros(700));
    assert_eq!(slow.key_run(128), 2);
}
