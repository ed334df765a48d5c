//! A relay process killed with SIGKILL mid-batch on PostgreSQL, and the one that survives
//! it.

use std::collections::HashMap;
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::fleet::{
    assert_printed_attempts, claims_of, wait_all_delivered, wait_mid_batch, Fleet, LANE, TARGET,
};
use crate::{
    assert_first_deliveries_in_enqueue_order, direct_store, enqueue, postgres_url, wait_until,
    with_application_name, Schema, BIN,
};

/// Two relay processes share one schema and lane; one is SIGKILLed in the middle of its
/// deliveries. What must hold:
///
/// - every message ends `delivered`, no row stays `claimed` or `pending`, none is dead;
/// - the claims the dead relay held when it died (read from the database once its sessions
///   are gone) are taken by the survivor after their lease lapsed: each ends with
///   `attempt_count` 2 and has a log line with `attempt` 2; no other message is attempted
///   twice;
/// - at least once, precisely: a message printed twice is one the dead relay held (it wrote
///   the line, then died before its ack), printed with attempt 1 and then 2;
/// - per-key order over both relays' output (one pipe, so one true order): for each key, the
///   sequence of *first* deliveries is the key's messages in enqueue order, all of them. A
///   redelivery of a message the dead relay had already printed is allowed and ignored.
#[test]
fn a_killed_relay_process_loses_nothing_and_keeps_per_key_order() {
    const MESSAGES: usize = 200;
    const KEYS: usize = 16;
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let schema = Schema::new();
    let store = runtime.block_on(direct_store(&schema));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let victim_app = format!("{}_victim", schema.name);
    let fleet = Fleet::start(
        dir.path(),
        &[
            (
                "victim",
                with_application_name(&postgres_url(), &victim_app),
            ),
            ("survivor", postgres_url()),
        ],
        Some(&schema.name),
    );

    let sent = runtime.block_on(enqueue(&store, LANE, TARGET, 0..MESSAGES, KEYS));
    // Mid-batch: deliveries flowing, the victim holding claims.
    wait_mid_batch(&runtime, &store, &fleet, "victim", 30);
    fleet.relay("victim").sigkill();
    let killed_at = Instant::now();
    let lines_at_kill = fleet.stream.len();
    // The server may still be running a statement the victim sent (an ack, a claim); its
    // claims are settled only once its sessions have ended.
    wait_until(
        "the victim's database sessions to end",
        || {
            let sessions: i64 = runtime
                .block_on(
                    sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    )
                    .bind(&victim_app)
                    .fetch_one(crate::pg(&store).pool()),
                )
                .expect("count sessions");
            (sessions == 0).then_some(())
        },
        String::new,
    );
    let orphans: HashMap<Uuid, u32> = claims_of(&runtime, &store, "victim")
        .into_iter()
        .map(|m| (m.outbox_id, m.attempt_count))
        .collect();
    assert!(
        !orphans.is_empty(),
        "the victim died holding no claims: the test killed nothing in flight"
    );
    assert!(
        orphans.values().all(|&attempts| attempts == 1),
        "{orphans:?}"
    );

    let rows = wait_all_delivered(&runtime, &store, &fleet, MESSAGES);
    let drained_at = Instant::now();
    for row in &rows {
        let want = if orphans.contains_key(&row.outbox_id) {
            2
        } else {
            1
        };
        assert_eq!(
            row.attempt_count, want,
            "{}: attempts (the victim's orphaned claims take 2, the rest 1)",
            row.outbox_id
        );
    }

    // The operator's view agrees.
    let status = Command::new(BIN)
        .arg("--config")
        .arg(&fleet.configs[1])
        .args(["status", "--json"])
        .env_remove("OUTBOX_DATABASE_URL")
        .output()
        .expect("run outbox-relay status");
    assert!(status.status.success(), "{status:?}");
    let status: Vec<Value> = serde_json::from_slice(&status.stdout).expect("status --json");
    let row = status
        .iter()
        .find(|r| r["lane"] == LANE && r["target"] == TARGET)
        .expect("a status row");
    assert_eq!(
        (
            &row["delivered"],
            &row["claimed"],
            &row["pending"],
            &row["dead_letter"]
        ),
        (&json!(MESSAGES), &json!(0), &json!(0), &json!(0)),
        "{row}"
    );

    // An orphaned claim is printed by the victim before it died (then again by the
    // survivor), or only by the survivor; every other message once.
    let lines = fleet.stop();
    let attempts = assert_printed_attempts(&lines, &rows);
    let order: Vec<Uuid> = lines.iter().map(|l| l.outbox_id).collect();
    assert_first_deliveries_in_enqueue_order(&sent, &order);
    eprintln!(
        "killed relay: {} lines before the kill, {} orphaned claims, {} printed twice, \
         drained {:?} after the kill, test {:?}",
        lines_at_kill,
        orphans.len(),
        attempts.values().filter(|seen| seen.len() > 1).count(),
        drained_at - killed_at,
        started.elapsed()
    );
}
