//! The crash bound with a grown prefetch: a relay process whose quick deliveries grew its
//! prefetch past the concurrency is SIGKILLed while it holds at least 80 % of its lane's
//! bound, `concurrency + max(prefetch, prefetch_max)`; what it held is all that comes again.

use std::collections::HashMap;
use std::time::Instant;

use uuid::Uuid;

use crate::fleet::{assert_printed_attempts, claims_of, wait_all_delivered, Fleet, LANE, TARGET};
use crate::{direct_store, enqueue, postgres_url, wait_until, with_application_name, Schema};

const CONCURRENCY: usize = 4;
const PREFETCH_MAX: usize = 60;
/// `concurrency + max(prefetch, prefetch_max)`, as the guide's Guarantees state it.
const BOUND: usize = CONCURRENCY + PREFETCH_MAX;

/// A relay of the fleet's lane with quick deliveries (the log sink, no delay) and a
/// prefetch that may grow from the concurrency (4) to [`PREFETCH_MAX`].
fn quick_relay(database_url: &str, schema: &str, consumer_id: &str) -> String {
    format!(
        r#"
database_url = "{database_url}"
schema = "{schema}"
metrics_listen = false
connect_timeout = "2s"
shutdown_timeout = "10s"
consumer_id = "{consumer_id}"

[[lanes]]
lane = "{LANE}"
target = "{TARGET}"
concurrency = {CONCURRENCY}
prefetch_max = {PREFETCH_MAX}
lease = "3s"
max_poll_interval = "60s"
sink = {{ kind = "log" }}
"#
    )
}

/// The victim relay runs alone on a backlog of quick messages. It is frozen (SIGSTOP) now
/// and then, its sessions left to finish what they ran, and its claims counted in the
/// database; once it holds at least 80 % of [`BOUND`] it is SIGKILLed where it stands. A
/// survivor started after the kill delivers everything; the messages attempted twice are
/// exactly the victim's claims, at most [`BOUND`].
#[test]
fn a_relay_killed_holding_most_of_its_grown_prefetch_redelivers_at_most_the_bound() {
    const MESSAGES: usize = 20_000;
    const KEYS: usize = 5_000;
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let schema = Schema::new();
    let store = runtime.block_on(direct_store(&schema));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let victim_app = format!("{}_victim", schema.name);
    let mut sent = Vec::with_capacity(MESSAGES);
    for from in (0..MESSAGES).step_by(2_000) {
        sent.extend(runtime.block_on(enqueue(&store, LANE, TARGET, from..from + 2_000, KEYS)));
    }
    let victim = Fleet::start_with(
        dir.path(),
        &[(
            "victim",
            with_application_name(&postgres_url(), &victim_app),
        )],
        |url, name| quick_relay(url, &schema.name, name),
    );
    let sessions = |busy_only: bool| -> i64 {
        let state = if busy_only {
            " AND state <> 'idle'"
        } else {
            ""
        };
        runtime
            .block_on(
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1{state}"
                )))
                .bind(&victim_app)
                .fetch_one(crate::pg(&store).pool()),
            )
            .expect("count sessions")
    };

    let victim_ports = || -> Vec<u16> {
        runtime
            .block_on(
                sqlx::query_scalar::<_, Option<i32>>(
                    "SELECT client_port FROM pg_stat_activity WHERE application_name = $1",
                )
                .bind(&victim_app)
                .fetch_all(crate::pg(&store).pool()),
            )
            .expect("the victim's client ports")
            .into_iter()
            .flatten()
            .filter_map(|port| u16::try_from(port).ok())
            .collect()
    };

    // Freeze, count, kill or go on: the count of a frozen relay whose statements have all
    // come back is what it holds when it dies.
    let want = (BOUND * 4).div_ceil(5);
    let mut counted = Vec::new();
    let mut lines = 200;
    let held_at_kill = loop {
        wait_until(
            &format!("{lines} deliveries by the victim"),
            || (victim.stream.len() >= lines).then_some(()),
            || victim.stderr(),
        );
        victim.relay("victim").freeze(true);
        // A statement the relay wrote just before the freeze can still sit unread in its
        // server's socket while every session shows idle; a count is taken only while no
        // victim session runs a statement or has one unread, and it must hold across two
        // such looks.
        let quiet = || sessions(true) == 0 && unread_by_the_server(&victim_ports()) == 0;
        let held = wait_until(
            "the frozen victim's statements to finish",
            || {
                if !quiet() {
                    return None;
                }
                let held = claims_of(&runtime, &store, "victim").len();
                (quiet() && claims_of(&runtime, &store, "victim").len() == held).then_some(held)
            },
            String::new,
        );
        counted.push(held);
        if held >= want {
            victim.relay("victim").sigkill();
            break held;
        }
        assert!(
            counted.len() < 100 && lines + 100 < MESSAGES,
            "the victim never held {want} of its bound {BOUND}: held {counted:?}"
        );
        victim.relay("victim").freeze(false);
        lines += 100;
    };
    wait_until(
        "the victim's database sessions to end",
        || (sessions(false) == 0).then_some(()),
        String::new,
    );
    let orphans: HashMap<Uuid, u32> = claims_of(&runtime, &store, "victim")
        .into_iter()
        .map(|m| (m.outbox_id, m.attempt_count))
        .collect();
    assert_eq!(orphans.len(), held_at_kill, "claims counted at the kill");
    assert!(orphans.len() <= BOUND, "{} over the bound", orphans.len());
    eprintln!(
        "killed holding {} claims, {:.0} % of the bound {BOUND} \
         (concurrency {CONCURRENCY} + prefetch_max {PREFETCH_MAX}); counts before: {counted:?}",
        orphans.len(),
        orphans.len() as f64 * 100.0 / BOUND as f64
    );

    let survivor = Fleet::start_with(dir.path(), &[("survivor", postgres_url())], |url, name| {
        quick_relay(url, &schema.name, name)
    });
    let rows = wait_all_delivered(&runtime, &store, &survivor, MESSAGES);
    let again: Vec<Uuid> = rows
        .iter()
        .filter(|row| row.attempt_count > 1)
        .map(|row| row.outbox_id)
        .collect();
    assert!(
        again.len() <= BOUND && again.iter().all(|id| orphans.contains_key(id)),
        "attempted again: {} (the victim held {}, the bound is {BOUND})",
        again.len(),
        orphans.len()
    );
    assert_eq!(again.len(), orphans.len(), "every orphan is claimed again");
    let mut lines = victim.stop();
    lines.extend(survivor.stop());
    let printed = assert_printed_attempts(&lines, &rows);
    let twice = printed.values().filter(|seen| seen.len() > 1).count();
    assert!(
        twice <= BOUND,
        "printed twice: {twice}, over the bound {BOUND}"
    );
    let order: Vec<Uuid> = lines.iter().map(|l| l.outbox_id).collect();
    crate::assert_first_deliveries_in_enqueue_order(&sent, &order);
    eprintln!(
        "redelivered after the kill: {} attempted again, {twice} printed twice (bound {BOUND}); \
         test {:?}",
        again.len(),
        started.elapsed()
    );
}

/// The bytes the server's sockets of these client ports have received and not yet read
/// (`rx_queue` in `/proc/net/tcp` and `tcp6`, the server on this machine).
fn unread_by_the_server(client_ports: &[u16]) -> u64 {
    let server_port = url::Url::parse(&postgres_url())
        .ok()
        .and_then(|url| url.port())
        .unwrap_or(5432);
    let mut unread = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = |address: &str| {
                address
                    .rsplit(':')
                    .next()
                    .and_then(|hex| u16::from_str_radix(hex, 16).ok())
            };
            let (Some(local), Some(remote), Some(queues)) = (
                fields.get(1).and_then(|a| port(a)),
                fields.get(2).and_then(|a| port(a)),
                fields.get(4),
            ) else {
                continue;
            };
            if local == server_port && client_ports.contains(&remote) {
                unread += queues
                    .split(':')
                    .nth(1)
                    .and_then(|rx| u64::from_str_radix(rx, 16).ok())
                    .unwrap_or(0);
            }
        }
    }
    unread
}
