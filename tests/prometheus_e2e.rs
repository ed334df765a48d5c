//! End to end: a relay that delivers, fails, retries, dead-letters, panics, extends and
//! loses leases, meets a store error and restarts a lane records its metrics; the
//! Prometheus exporter serves them; a real Prometheus (`/usr/bin/prometheus`) scrapes
//! them; and then every metric of `outbox_relay::metrics::ALL` has series that moved,
//! every process-wide metric (`outbox_relay::metrics::PROCESS`) is there, every query of
//! every panel of `grafana/outbox-relay.json` returns data, with its job, namespace and
//! instance variables at "All" and at the one scraped process, every store-wide metric
//! (`outbox_relay::metrics::STORE_WIDE`: the lanes nobody serves) counts the scenario's
//! unserved lane, and every rule of `grafana/alerts.yml` evaluates without error, the
//! dead-letter alert firing and the unserved-lane alert raised.
//!
//! One test function in a binary of its own: `install_prometheus_exporter` installs the
//! process's global recorder, and a process gets one. The relay runs on the real clock
//! (Prometheus scrapes in real time); the scenario waits on `RelayEvent`s and on what
//! Prometheus answers, never on sleeps.
//!
//! Prometheus is required, never skipped: without `/usr/bin/prometheus` (Debian's
//! `prometheus` package, which `.ci/run` installs) or `$PROMETHEUS` the test fails.
//!
//! Here: the test, the exporter and the waits. In `prometheus_e2e/`: the scenario that moves
//! every metric (`scenario.rs`) and its handler (`handler.rs`), and what is checked against
//! Prometheus afterwards (`checks.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use outbox_relay::http::install_prometheus_exporter;
use tokio::time::Instant;

#[path = "prometheus_e2e/checks.rs"]
mod checks;
#[path = "support/dashboard.rs"]
mod dashboard;
#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "prometheus_e2e/handler.rs"]
mod handler;
#[path = "support/prometheus.rs"]
mod prometheus;
#[path = "prometheus_e2e/scenario.rs"]
mod scenario;

use checks::{
    check_every_alert_rule, check_every_metric, check_every_panel_query, check_process_metrics,
    check_store_wide_metrics,
};
use prometheus::Prometheus;
use scenario::run_scenario;

/// The scrape job; `grafana/alerts.yml`'s `OutboxRelayDown` matches this name.
const JOB: &str = "outbox-relay";

/// The namespace label the scrape adds, as Kubernetes service discovery would.
const NAMESPACE: &str = "relay-e2e";

/// How long any one wait may take: an event, a scrape, a rule evaluation. Generous,
/// because other builds share this machine; a passing run waits far less.
const WAIT: Duration = Duration::from_secs(60);

/// Lane one: fast deliveries with every kind of failure, lease extension, a restart.
const WEBHOOK: (&str, &str) = ("orders", "webhook");
/// Lane two: one delivery at a time, no lease extension, a blocked ordering key.
const LEDGER: (&str, &str) = ("billing", "ledger");
/// A lane no relay serves: one message waits in it.
const UNSERVED: (&str, &str) = ("order", "webhook");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_panel_and_alert_rule_works_against_a_real_prometheus() {
    let started = Instant::now();
    let exporter = install_exporter();
    let alerts = dashboard::repo_path("grafana/alerts.yml");
    // Killed, its data removed, when `server` drops, also when an assertion panics.
    let labels = [("namespace", NAMESPACE)];
    let server = Prometheus::start(JOB, exporter, &labels, &[alerts.as_path()]).await;
    let prometheus = &server;
    eprintln!(
        "exporter on {exporter}, Prometheus on {} (ready after {:?})",
        prometheus.addr(),
        started.elapsed()
    );

    let relay = run_scenario(prometheus).await;
    let scenario_done = unix_seconds();
    eprintln!("scenario done after {:?}", started.elapsed());

    // Rates need two samples after the last events: wait for two scrapes that started
    // after the scenario ended.
    until(
        prometheus,
        "two scrapes after the scenario",
        || async move {
            let window_ms = ((unix_seconds() - scenario_done) * 1000.0).ceil() as u64;
            let promql = format!("count_over_time(up{{job=\"{JOB}\"}}[{window_ms}ms])");
            let scrapes = prometheus.query(&promql).await.ok()?;
            (scrapes.first()?.1 >= 2.0).then_some(())
        },
    )
    .await;
    let up = prometheus
        .query(&format!("up{{job=\"{JOB}\"}}"))
        .await
        .expect("query up");
    assert_eq!(up.len(), 1, "one scrape target: {up:?}");
    assert_eq!(up[0].1, 1.0, "the exporter's scrape failed: {up:?}");

    let metrics = check_every_metric(prometheus).await;
    let process = check_process_metrics(prometheus, exporter).await;
    let store_wide = check_store_wide_metrics(prometheus).await;
    let queries = check_every_panel_query(prometheus, exporter).await;
    let rules = check_every_alert_rule(prometheus).await;
    eprintln!(
        "checked {metrics} lane metrics, {process} process metrics, {store_wide} store-wide \
         metrics, {queries} panel queries and {rules} alert rules against Prometheus in {:?}",
        started.elapsed()
    );
    relay
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shut the relay down");
}

// ---- The exporter ----------------------------------------------------------------------

/// Installs the exporter on a free loopback port, trying another if it was taken meanwhile.
fn install_exporter() -> SocketAddr {
    for _ in 0..5 {
        let addr = prometheus::free_loopback_addr();
        match install_prometheus_exporter(addr) {
            Ok(_handle) => return addr,
            Err(error) if !error.recorder_already_installed() => {
                eprintln!("{error}; trying another port")
            }
            Err(error) => panic!("{error}: this test must be alone in its binary"),
        }
    }
    panic!("no free loopback port for the exporter after 5 attempts");
}

// ---- Waiting ---------------------------------------------------------------------------

/// Polls `check` every 200 ms until it answers, for at most [`WAIT`].
async fn until<T, F, Fut>(prometheus: &Prometheus, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(answer) = check().await {
            return answer;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {WAIT:?} waiting for {what}; Prometheus's log ends:\n{}",
                prometheus.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}
