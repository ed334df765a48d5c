//! The Kubernetes manifests in `deploy/kubernetes/`, checked without a cluster (Kubernetes'
//! schemas cannot be downloaded in CI):
//!
//! - `prometheus-rule.yaml` is generated from `grafana/alerts.yml`, and the test fails when
//!   the two drift apart (`OUTBOX_BLESS=1` regenerates it);
//! - `yamllint` (PyPI) accepts every file, strictly;
//! - `kubernetes_assets/check_manifests.py` (PyYAML) checks that the objects refer to each
//!   other by the names, labels and ports they have, that the probes hit `/healthz` and
//!   `/readyz` on the container's listener port, and that the PrometheusRule's spec is
//!   `alerts.yml`, value for value;
//! - `promtool` checks the PrometheusRule's rules and runs `grafana/alerts.test.yml`
//!   against them;
//! - the relay's own config reader parses and validates the ConfigMap's `relay.toml`,
//!   which must listen on all interfaces, port 9464, for the probes and the scrape, and
//!   serve nothing else there: no route that reads or changes messages (`api`, `control`,
//!   `ui`) on the Service's port.
//!
//! What is not checked: the objects against the Kubernetes and Prometheus Operator API
//! schemas (a misspelt optional field would pass), and anything a cluster decides
//! (admission, the image, the Secret).
//!
//! `.ci/run` installs `yamllint` and `promtool`; a missing one fails, never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

const ALERTS: &str = "grafana/alerts.yml";
const ALERT_TESTS: &str = "grafana/alerts.test.yml";
const DEPLOY: &str = "deploy/kubernetes";
const RULE: &str = "deploy/kubernetes/prometheus-rule.yaml";

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

/// The PrometheusRule for `alerts`: its `groups` become the rule's `spec`, comments
/// included, indented one level; what precedes `groups:` (how to load the file into a
/// Prometheus) is left out.
fn prometheus_rule(alerts: &str) -> String {
    let groups = alerts
        .find("\ngroups:")
        .map(|at| &alerts[at + 1..])
        .unwrap_or_else(|| panic!("{ALERTS} has no top-level `groups:`"));
    let mut rule = String::from(
        "# GENERATED from grafana/alerts.yml by tests/kubernetes_assets.rs: edit that file,\n\
         # then regenerate this one with\n\
         #   OUTBOX_BLESS=1 cargo test --all-features --test kubernetes_assets\n\
         # The test fails while the two differ.\n\
         apiVersion: monitoring.coreos.com/v1\n\
         kind: PrometheusRule\n\
         metadata:\n  \
           name: outbox-relay\n  \
           labels:\n    \
             app.kubernetes.io/name: outbox-relay\n\
         spec:\n",
    );
    for line in groups.lines() {
        if !line.is_empty() {
            rule.push_str("  ");
            rule.push_str(line);
        }
        rule.push('\n');
    }
    rule
}

#[test]
fn the_prometheus_rule_is_generated_from_the_alert_rules() {
    let expected = prometheus_rule(&read(ALERTS));
    if std::env::var("OUTBOX_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(repo_path(RULE), &expected).expect("write the PrometheusRule");
        return;
    }
    let actual = std::fs::read_to_string(repo_path(RULE)).unwrap_or_default();
    if actual != expected {
        let first = actual
            .lines()
            .zip(expected.lines())
            .position(|(a, e)| a != e)
            .unwrap_or_else(|| actual.lines().count().min(expected.lines().count()));
        panic!(
            "{RULE} is not what {ALERTS} generates (first difference at line {}: {:?} \
             instead of {:?}). Regenerate it: \
             OUTBOX_BLESS=1 cargo test --all-features --test kubernetes_assets",
            first + 1,
            actual.lines().nth(first).unwrap_or("<end of file>"),
            expected.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

#[test]
fn the_generated_rule_keeps_every_line_of_the_groups() {
    let rule = prometheus_rule("# how to load\ngroups:\n  - name: g\n\n    rules: []\n");
    assert!(
        rule.ends_with("spec:\n  groups:\n    - name: g\n\n      rules: []\n"),
        "{rule}"
    );
    assert!(!rule.contains("how to load"));
}

/// Runs `program` with `args`; its output when it fails. A program that is not installed
/// fails the test, saying how to install it.
fn run(program: &str, args: &[&str], install: &str) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}): {install}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{program} {} failed ({}):\n{text}",
        args.join(" "),
        output.status
    );
    text
}

/// `promtool`: `$PROMTOOL`, else the one on `PATH`.
fn promtool() -> String {
    std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".to_owned())
}

#[test]
fn yamllint_accepts_the_manifests() {
    let deploy = repo_path(DEPLOY);
    let config = "{extends: default, rules: {line-length: {max: 160}, document-start: disable}}";
    run(
        "yamllint",
        &[
            "--strict",
            "-d",
            config,
            deploy.to_str().expect("utf-8 path"),
        ],
        "pip install yamllint (.ci/run does)",
    );
}

#[test]
fn the_manifests_agree_with_each_other_the_alert_rules_and_the_relay() {
    let scratch = tempfile::tempdir().expect("temporary directory");
    let out = scratch.path();
    let path = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
    let checker = repo_path("tests/kubernetes_assets/check_manifests.py");
    let printed = run(
        "python3",
        &[
            &path(&checker),
            &path(&repo_path(DEPLOY)),
            &path(&repo_path(ALERTS)),
            &path(out),
        ],
        "install python3 and PyYAML (pip install yamllint brings it; .ci/run does)",
    );
    assert!(printed.contains("checked 6 objects"), "{printed}");

    // The PrometheusRule's rules, as Prometheus would load them: valid, and behaving as
    // alerts.yml's unit tests say (they load `alerts.yml` from their own directory).
    let install = "install Debian's prometheus package (.ci/run does), or set PROMTOOL";
    run(
        &promtool(),
        &["check", "rules", &path(&out.join("alerts.yml"))],
        install,
    );
    let tests = out.join("alerts.test.yml");
    std::fs::write(&tests, read(ALERT_TESTS)).expect("copy the rule tests");
    run(&promtool(), &["test", "rules", &path(&tests)], install);

    check_relay_toml(&std::fs::read_to_string(out.join("relay.toml")).expect("relay.toml"));
}

/// The ConfigMap's config file is one the relay accepts, listening where the probes and
/// the scrape reach it.
fn check_relay_toml(text: &str) {
    use outbox_relay::config::file::{FileConfig, MetricsListen};
    let config = FileConfig::from_toml_str("deploy/kubernetes/configmap.yaml", text)
        .unwrap_or_else(|e| panic!("{e}"));
    config.validate().unwrap_or_else(|e| panic!("{e}"));
    let lanes = config.lanes().unwrap_or_else(|e| panic!("{e}"));
    assert!(!lanes.is_empty());
    let MetricsListen::Listen(addr) = config.listen_address() else {
        panic!("the ConfigMap turns the listener off: no probes, no metrics")
    };
    assert!(
        addr.ip().is_unspecified() && addr.port() == 9464,
        "listener.address = {addr}: probes and scrapes come from outside the pod"
    );
    for group in ["api", "control", "ui"] {
        assert!(
            !config.listener.serves(group),
            "the Service's port serves the route group {group}: payloads and lane control \
             would be open to the cluster; listener.routes = [\"metrics\", \"probes\"]"
        );
    }
    for group in ["metrics", "probes"] {
        assert!(
            config.listener.serves(group),
            "the Service's port must serve {group}"
        );
    }
}
