//! `simulate`: a lane's real settings against a stated load and target, in virtual time.
//! The report's numbers must add up (every enqueued message ends delivered or
//! dead-lettered after the drain), follow the stated target (failures make retries, a
//! healthy target makes none, an outage opens the breaker, a low rate limit throttles),
//! and repeat exactly for one seed.

use std::collections::HashMap;
use std::time::Duration;

use crate::Sandbox;

/// The report's lines for one lane, by label (`delivered`, `latency`, ...).
fn report(stdout: &str, lane: &str) -> HashMap<String, String> {
    let header = format!("lane {lane}");
    let mut lines = stdout.lines().skip_while(|line| !line.starts_with(&header));
    assert!(lines.next().is_some(), "no report for {lane}:\n{stdout}");
    lines
        .take_while(|line| line.starts_with("  "))
        .map(|line| {
            let line = line.trim();
            let at = line.find("  ").unwrap_or(line.len());
            (line[..at].to_owned(), line[at..].trim().to_owned())
        })
        .collect()
}

fn count(report: &HashMap<String, String>, label: &str) -> u64 {
    report[label]
        .parse()
        .unwrap_or_else(|_| panic!("{label}: {report:?}"))
}

/// Reads `22ms`, `15.2s` or `10m06s`.
fn duration(text: &str) -> Duration {
    if let Some(ms) = text.strip_suffix("ms") {
        Duration::from_millis(ms.parse().expect(text))
    } else if let Some((m, s)) = text.strip_suffix('s').and_then(|t| t.split_once('m')) {
        Duration::from_secs(m.parse::<u64>().expect(text) * 60 + s.parse::<u64>().expect(text))
    } else {
        Duration::from_secs_f64(text.strip_suffix('s').expect(text).parse().expect(text))
    }
}

fn time(report: &HashMap<String, String>, label: &str) -> Duration {
    duration(&report[label])
}

#[test]
fn simulate_of_a_flaky_target_adds_up_and_repeats_for_a_seed() {
    let sandbox = Sandbox::new();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/relay.toml");
    let args = [
        "--config",
        config,
        "simulate",
        "--duration",
        "10m",
        "--failure-rate",
        "0.2",
        "--seed",
        "7",
    ];
    let stdout = sandbox.ok(&args);
    // The store the config names gives what the lane leaves unset.
    assert!(
        stdout.starts_with(
            "simulated on the sqlite store (a lane that leaves claims_in_flight unset keeps 1 out)"
        ),
        "{stdout}"
    );
    let lane = report(&stdout, "default -> log");
    assert!(lane["claims in flight"].starts_with("1 "), "{stdout}");
    // 50/s (the default) for 600 s.
    assert_eq!(count(&lane, "enqueued"), 30_000, "{stdout}");
    assert_eq!(
        count(&lane, "delivered") + count(&lane, "dead-lettered"),
        30_000,
        "{stdout}"
    );
    // One delivery in five fails: about 0.2 / 0.8 retries per message.
    let retried = count(&lane, "retried");
    assert!((6_000..9_000).contains(&retried), "{stdout}");
    // Five attempts all failing: about 30000 × 0.2^5 ≈ 10 dead letters.
    assert!(count(&lane, "dead-lettered") > 0, "{stdout}");
    let latency: Vec<Duration> = lane["latency"]
        .split_whitespace()
        .skip(1)
        .step_by(2)
        .map(duration)
        .collect();
    assert_eq!(latency.len(), 4, "{stdout}");
    assert!(latency.windows(2).all(|w| w[0] <= w[1]), "{stdout}");
    // A first-try delivery takes the stated 20 ms (plus the claim's round trip); a retry
    // waits at least retry_base (1 s).
    assert!(latency[0] >= Duration::from_millis(20), "{stdout}");
    assert!(latency[3] >= Duration::from_secs(1), "{stdout}");
    let settled = time(&lane, "all settled at");
    assert!(settled >= Duration::from_secs(600), "{stdout}");
    assert_eq!(sandbox.ok(&args), stdout, "one seed, one report");
    let other = sandbox.ok(&[&args[..8], &["8"]].concat());
    assert_ne!(other, stdout, "another seed draws other failures");
}

#[test]
fn simulate_of_a_healthy_target_retries_nothing_and_gates_show_their_time() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "relay.toml",
        r#"
database_url = "sqlite:relay.db"

[[lanes]]
lane = "orders"
target = "audit"
retry_base = "100ms"
retry_max = "5s"
rate_limit = "20/s"
sink = { kind = "log" }

[[lanes]]
lane = "invoices"
target = "audit"
retry_base = "100ms"
retry_max = "5s"
breaker = { consecutive_failures = 3, cool_down = "5s" }
sink = { kind = "log" }
"#,
    );
    let stdout = sandbox.ok(&[
        "--config",
        "relay.toml",
        "simulate",
        "--duration",
        "3m",
        "--rate",
        "10/s",
        "--keys",
        "hot",
        "--failure-rate",
        "0",
        "--max-attempts",
        "100",
        "--outage",
        "30s@1m",
    ]);
    for lane in ["orders -> audit", "invoices -> audit"] {
        let lane = report(&stdout, lane);
        assert_eq!(count(&lane, "enqueued"), 1_800, "{stdout}");
        assert_eq!(count(&lane, "delivered"), 1_800, "{stdout}");
        assert_eq!(count(&lane, "dead-lettered"), 0, "{stdout}");
        // Only the outage fails deliveries; a hot key waits through it.
        assert!(count(&lane, "retried") > 0, "{stdout}");
        assert!(
            time(&lane, "longest key wait") >= Duration::from_secs(20),
            "{stdout}"
        );
    }
    let orders = report(&stdout, "orders -> audit");
    assert_eq!(time(&orders, "breaker open"), Duration::ZERO, "{stdout}");
    let invoices = report(&stdout, "invoices -> audit");
    assert!(
        time(&invoices, "breaker open") >= Duration::from_secs(5),
        "{stdout}"
    );
    assert_eq!(time(&invoices, "rate limited"), Duration::ZERO, "{stdout}");

    // No outage, no failures: nothing retried, nothing dead-lettered; 50/s against a
    // 20/s limit is throttled.
    let stdout = sandbox.ok(&[
        "--config",
        "relay.toml",
        "simulate",
        "--duration",
        "1m",
        "--failure-rate",
        "0",
    ]);
    let orders = report(&stdout, "orders -> audit");
    assert_eq!(count(&orders, "retried"), 0, "{stdout}");
    assert_eq!(count(&orders, "dead-lettered"), 0, "{stdout}");
    assert_eq!(count(&orders, "delivered"), 3_000, "{stdout}");
    assert!(
        time(&orders, "rate limited") >= Duration::from_secs(60),
        "{stdout}"
    );
    // 3000 messages at 20/s take 150 s.
    assert!(
        time(&orders, "all settled at") >= Duration::from_secs(149),
        "{stdout}"
    );
}

#[test]
fn simulate_names_the_bad_flag() {
    let sandbox = Sandbox::new();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/relay.toml");
    for (flag, value) in [
        ("--failure-rate", "1.5"),
        ("--retry-after-rate", "-0.1"),
        ("--keys", "warm"),
        ("--rate", "50/day"),
        ("--outage", "10m"),
        ("--duration", "an hour"),
        ("--seed", "x"),
    ] {
        let arg = format!("{flag}={value}");
        let stderr = sandbox.fails(2, &["--config", config, "simulate", &arg]);
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
    let stderr = sandbox.fails(2, &["--config", config, "simulate", "--bogus"]);
    assert!(stderr.contains("--bogus"), "{stderr}");
}
