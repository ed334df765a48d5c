//! Prometheus's own `promtool` accepts the alert rules in `grafana/`, runs their unit tests
//! (`grafana/alerts.test.yml`), and parses every query of the dashboard.
//!
//! The monitoring tier (CONTRIBUTING.md): `promtool` comes with Debian's `prometheus`
//! package (`apt-get install -y prometheus`; `.ci/run monitoring` installs it). A missing
//! one fails the test, naming the package; `PROMTOOL` may name another binary.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/dashboard.rs"]
mod dashboard;

use dashboard::{dashboard, panel_queries, repo_path, PanelQuery};

/// `promtool`: `$PROMTOOL`, else the first on `PATH`; missing is a failure.
fn promtool() -> PathBuf {
    if let Some(path) = std::env::var_os("PROMTOOL") {
        return PathBuf::from(path);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("promtool"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "promtool is not on PATH: install Debian's prometheus package \
                 (apt-get install -y prometheus, or `.ci/run monitoring`), or set PROMTOOL"
            )
        })
}

fn run_promtool(promtool: &Path, args: &[&str], dir: &Path) {
    let output = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    assert!(
        output.status.success(),
        "promtool {} failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The dashboard's queries as recording rules, so `promtool check rules` parses each.
fn dashboard_queries_as_rules(queries: &[PanelQuery]) -> String {
    let mut rules = String::from("groups:\n  - name: dashboard-queries\n    rules:\n");
    for query in queries {
        rules.push_str(&format!(
            "      # panel {} {:?}, query {}\n      - record: dashboard:panel_{}_{}\n        expr: |\n",
            query.panel_id, query.panel_title, query.ref_id, query.panel_id, query.ref_id
        ));
        for line in query.expr.lines() {
            rules.push_str(&format!("          {line}\n"));
        }
    }
    rules
}

#[test]
fn promtool_accepts_the_rules_their_unit_tests_and_every_dashboard_query() {
    let promtool = promtool();
    let grafana = repo_path("grafana");
    run_promtool(&promtool, &["check", "rules", "alerts.yml"], &grafana);
    run_promtool(&promtool, &["test", "rules", "alerts.test.yml"], &grafana);

    let queries = panel_queries(&dashboard());
    assert!(queries.len() >= 20, "only {} queries found", queries.len());
    let scratch = tempfile::tempdir().expect("temporary directory");
    let rules = scratch.path().join("dashboard-queries.yml");
    std::fs::write(&rules, dashboard_queries_as_rules(&queries)).expect("write rules");
    let rules = rules.to_str().expect("utf-8 path");
    run_promtool(&promtool, &["check", "rules", rules], scratch.path());
}
