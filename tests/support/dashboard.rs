//! The Grafana dashboard's panels and their PromQL, shared by `tests/grafana_assets.rs`
//! (which checks the queries statically) and `tests/prometheus_e2e.rs` (which runs them
//! against a real Prometheus), so both read the dashboard and substitute its variables
//! the same way.
//!
//! It lives in a subdirectory so that cargo does not build it as a test binary of its
//! own; each test includes it with `#[path = "support/dashboard.rs"] mod dashboard;`.

use std::path::{Path, PathBuf};

use serde_json::Value;

pub const DASHBOARD: &str = "grafana/outbox-relay.json";

pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

pub fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

pub fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// One PromQL query of one dashboard panel, ready to send to Prometheus.
#[derive(Debug, Clone)]
pub struct PanelQuery {
    pub panel_id: u64,
    pub panel_title: String,
    pub ref_id: String,
    /// The query with the dashboard variables replaced (see [`substitute_selected`]).
    pub expr: String,
}

/// Every query of every panel, rows' nested panels included, in dashboard order, with
/// every variable at "All".
pub fn panel_queries(dashboard: &Value) -> Vec<PanelQuery> {
    panel_queries_selected(dashboard, &[])
}

/// [`panel_queries`], with the variables of `selected` set to one value each.
pub fn panel_queries_selected(dashboard: &Value, selected: &[(&str, &str)]) -> Vec<PanelQuery> {
    let mut queries = Vec::new();
    for panel in panels(dashboard) {
        let targets = panel["targets"].as_array().into_iter().flatten();
        for target in targets {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            queries.push(PanelQuery {
                panel_id: panel["id"].as_u64().expect("panel id"),
                panel_title: panel["title"].as_str().unwrap_or_default().to_owned(),
                ref_id: target["refId"].as_str().unwrap_or_default().to_owned(),
                expr: substitute_selected(expr, selected),
            });
        }
    }
    queries
}

/// The dashboard's own variables, each matched with `=~` and `.*` for "All": the scope
/// (`$job`, `$namespace`, `$instance`) and the lane (`$lane`, `$target`).
pub const VARIABLES: [&str; 5] = ["job", "namespace", "instance", "lane", "target"];

/// Replaces the dashboard's variables as Grafana would: those in `selected` by their one
/// value (as a user picking one job or one instance would), every other of [`VARIABLES`]
/// by `.*` ("All", their `allValue`), and Grafana's built-in intervals by what a default
/// time range would give: `$__rate_interval` by `1m`, `$__interval` by `15s`, `$__range`
/// by `5m`.
pub fn substitute_selected(expr: &str, selected: &[(&str, &str)]) -> String {
    let intervals = [
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "15s"),
        ("$__interval", "15s"),
        ("${__range}", "5m"),
        ("$__range", "5m"),
    ];
    let mut expr = intervals
        .iter()
        .fold(expr.to_owned(), |expr, (variable, value)| {
            expr.replace(variable, value)
        });
    for name in VARIABLES {
        let value = selected
            .iter()
            .find(|(variable, _)| *variable == name)
            .map_or(".*", |(_, value)| *value);
        expr = expr
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    expr
}

/// Every panel, with the panels of rows (collapsed rows keep theirs inside).
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}
