//! The Grafana dashboard and the Prometheus alert rules in `grafana/` agree with
//! `outbox_relay::metrics::ALL`. That Prometheus's own `promtool` accepts them is
//! `tests/promtool.rs` (the monitoring tier: it needs Prometheus's tools).

use std::collections::{BTreeMap, BTreeSet};

use outbox_relay::metrics::{MetricKind, ALL, PATTERNS, PROCESS, STORE_WIDE};
use outbox_relay::relay::{BreakerState, LaneState};
use serde_json::Value;

// Shared with tests/promtool.rs, which reads the fields of a query this file does not.
#[allow(dead_code)]
#[path = "support/dashboard.rs"]
mod dashboard;

use dashboard::{dashboard, panel_queries, panels, read, substitute_selected, DASHBOARD};

const ALERTS: &str = "grafana/alerts.yml";
const ALERT_TESTS: &str = "grafana/alerts.test.yml";
const HISTOGRAM_SERIES_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// The `outbox_…` tokens in `text`, histogram series suffixes kept.
fn outbox_tokens(text: &str) -> BTreeSet<String> {
    let mut tokens = BTreeSet::new();
    let bytes = text.as_bytes();
    let is_name = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_';
    let mut at = 0;
    while let Some(found) = text[at..].find("outbox_") {
        let start = at + found;
        let mut end = start + "outbox_".len();
        while end < bytes.len() && is_name(bytes[end]) {
            end += 1;
        }
        let preceded_by_name = start > 0 && (is_name(bytes[start - 1]) || bytes[start - 1] == b':');
        if !preceded_by_name {
            tokens.insert(text[start..end].to_owned());
        }
        at = end;
    }
    tokens
}

/// Maps each token to the declared metric it names; collects tokens that name none.
/// A histogram must be referenced through one of its series (`_bucket`, `_sum`,
/// `_count`), anything else by its own name.
fn declared_metrics(tokens: &BTreeSet<String>) -> (BTreeSet<&'static str>, BTreeSet<String>) {
    let mut declared = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for token in tokens {
        let histogram_series = HISTOGRAM_SERIES_SUFFIXES.iter().find_map(|suffix| {
            let base = token.strip_suffix(suffix)?;
            ALL.iter()
                .find(|m| m.name == base && m.kind == MetricKind::Histogram)
        });
        let plain = ALL
            .iter()
            .chain(PROCESS)
            .chain(STORE_WIDE)
            .chain(PATTERNS)
            .find(|m| m.name == token && m.kind != MetricKind::Histogram);
        match histogram_series.or(plain) {
            Some(metric) => {
                declared.insert(metric.name);
            }
            None => {
                unknown.insert(token.clone());
            }
        }
    }
    (declared, unknown)
}

#[test]
fn dashboard_and_alerts_use_declared_metrics_and_the_dashboard_shows_them_all() {
    let dashboard = dashboard();
    let queries = panel_queries(&dashboard);
    let promql: String = queries.iter().map(|q| format!("{}\n", q.expr)).collect();
    let (on_dashboard, unknown) = declared_metrics(&outbox_tokens(&promql));
    assert!(
        unknown.is_empty(),
        "{DASHBOARD} uses undeclared metrics {unknown:?}"
    );
    let missing: Vec<_> = ALL
        .iter()
        .map(|m| m.name)
        .filter(|name| !on_dashboard.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "{DASHBOARD} shows no panel of {missing:?}"
    );
    // The process-wide metrics (`outbox_build_info` and Prometheus' `process_*`), the
    // store-wide ones (the lanes nobody serves) and the lane patterns' (labelled with the
    // pattern, not a lane).
    let missing: Vec<_> = PROCESS
        .iter()
        .chain(STORE_WIDE)
        .chain(PATTERNS)
        .map(|m| m.name)
        .filter(|name| !promql.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "{DASHBOARD} shows no panel of {missing:?}"
    );

    let variables = dashboard["templating"]["list"].to_string();
    let (_, unknown) = declared_metrics(&outbox_tokens(&variables));
    assert!(unknown.is_empty(), "{DASHBOARD} variables use {unknown:?}");

    for file in [ALERTS, ALERT_TESTS] {
        let (used, unknown) = declared_metrics(&outbox_tokens(&read(file)));
        assert!(
            unknown.is_empty(),
            "{file} uses undeclared metrics {unknown:?}"
        );
        assert!(!used.is_empty(), "{file} uses no metric at all");
    }
}

/// The scope every query keeps to, so two environments in one Prometheus never mix.
const SCOPE: &str = r#"job=~"$job", namespace=~"$namespace", instance=~"$instance""#;

#[test]
fn every_panel_query_is_scoped_by_job_namespace_and_instance_and_lane_metrics_by_lane() {
    let dashboard = dashboard();
    for panel in panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            let name = format!("panel {:?} query {:?}", panel["title"], target["refId"]);
            // Every selector of the query, not just one of them.
            let selectors = expr.matches('{').count();
            assert_eq!(
                expr.matches(SCOPE).count(),
                selectors,
                "{name} ignores the job, namespace or instance selection: {expr}"
            );
            let lane_metric = ALL.iter().any(|m| expr.contains(m.name));
            let lane_filtered =
                expr.contains(r#"lane=~"$lane""#) && expr.contains(r#"target=~"$target""#);
            assert_eq!(
                lane_filtered, lane_metric,
                "{name}: lane metrics follow the lane and target selection, process-wide \
                 ones (no lane label) must not: {expr}"
            );
        }
    }
}

#[test]
fn dashboard_has_its_variables_unique_panel_ids_and_a_sane_layout() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().expect("schemaVersion") >= 39);
    assert!(dashboard["uid"].as_str().is_some_and(|uid| !uid.is_empty()));

    let variables: BTreeMap<&str, &Value> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| (v["name"].as_str().expect("variable name"), v))
        .collect();
    let datasource = variables.get("datasource").expect("a datasource variable");
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");
    let order: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(
        order,
        [
            "datasource",
            "job",
            "namespace",
            "instance",
            "lane",
            "target"
        ],
        "each variable's query may use only the variables before it"
    );
    for (name, scoped_by) in [
        ("job", ""),
        ("namespace", r#"{job=~"$job"}"#),
        ("instance", r#"{job=~"$job", namespace=~"$namespace"}"#),
        ("lane", SCOPE),
        ("target", SCOPE),
    ] {
        let query = variables[name]["query"]["query"].as_str().expect("query");
        assert!(query.contains(scoped_by), "${name}: {query}");
    }
    for (name, metric_of_query) in [
        ("job", "job"),
        ("namespace", "namespace"),
        ("instance", "instance"),
        ("lane", "lane"),
        ("target", "target"),
    ] {
        let variable = variables.get(name).unwrap_or_else(|| panic!("no ${name}"));
        assert_eq!(variable["type"], "query", "${name}");
        assert_eq!(variable["multi"], true, "${name}");
        assert_eq!(variable["includeAll"], true, "${name}");
        assert_eq!(variable["allValue"], ".*", "${name}");
        assert_eq!(variable["datasource"]["uid"], "${datasource}", "${name}");
        let query = variable["query"]["query"].as_str().expect("query");
        assert!(
            query.starts_with("label_values(outbox_")
                && query.ends_with(&format!(", {metric_of_query})")),
            "${name}: {query}"
        );
    }

    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let id = panel["id"].as_u64().expect("every panel has a numeric id");
        assert!(ids.insert(id), "panel id {id} is used twice");
        let grid = &panel["gridPos"];
        let (x, w) = (
            grid["x"].as_u64().expect("x"),
            grid["w"].as_u64().expect("w"),
        );
        assert!(x + w <= 24, "panel {id} is wider than the dashboard");
        if panel["type"] == "row" {
            continue;
        }
        assert!(
            panel["title"].as_str().is_some_and(|t| !t.is_empty()),
            "panel {id}"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "panel {id}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} has no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "panel {id}");
        }
    }
}

/// The `state="…"` values a state-timeline panel over `metric` encodes, and the texts its
/// value mappings show.
fn states_shown(dashboard: &Value, metric: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut shown = BTreeSet::new();
    let mut mapped = BTreeSet::new();
    for panel in panels(dashboard)
        .into_iter()
        .filter(|p| p["type"] == "state-timeline")
        .filter(|p| p["targets"].to_string().contains(metric))
    {
        let promql = panel["targets"].to_string().replace("\\\"", "\"");
        let mut rest = promql.as_str();
        while let Some(at) = rest.find("state=\"") {
            rest = &rest[at + "state=\"".len()..];
            let end = rest.find('"').expect("closing quote");
            shown.insert(rest[..end].to_owned());
        }
        mapped.extend(
            panel["fieldConfig"]["defaults"]["mappings"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["options"].as_object().cloned())
                .flat_map(|options| options.into_iter().map(|(_, v)| v["text"].to_string()))
                .map(|text| text.trim_matches('"').to_owned()),
        );
    }
    (shown, mapped)
}

#[test]
fn the_lane_state_panel_knows_every_lane_state() {
    let (shown, mapped) = states_shown(&dashboard(), "outbox_lane_state");
    let declared: BTreeSet<String> = LaneState::ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        shown, declared,
        "the lane state panel must encode every LaneState"
    );
    for state in declared {
        assert!(mapped.contains(&state), "no value mapping shows {state}");
    }
}

#[test]
fn the_breaker_panel_knows_every_breaker_state() {
    let (shown, mapped) = states_shown(&dashboard(), "outbox_breaker_state");
    let declared: BTreeSet<String> = BreakerState::ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        shown, declared,
        "the breaker panel must encode every BreakerState"
    );
    for state in declared {
        assert!(mapped.contains(&state), "no value mapping shows {state}");
    }
}

/// Every variable at "All".
fn substitute_variables_at_all(expr: &str) -> String {
    substitute_selected(expr, &[])
}

#[test]
fn token_scan_and_variable_substitution() {
    let tokens = outbox_tokens(
        r#"sum(rate(outbox_claim_batch_size_sum{lane=~"$lane"}[1m])) / x:outbox_no job="outbox-relay" my_outbox_x"#,
    );
    assert_eq!(
        tokens.into_iter().collect::<Vec<_>>(),
        ["outbox_claim_batch_size_sum"]
    );
    let (declared, unknown) = declared_metrics(
        &[
            "outbox_claim_batch_size",
            "outbox_pending_count",
            "outbox_pending",
        ]
        .map(String::from)
        .into(),
    );
    assert_eq!(declared.into_iter().collect::<Vec<_>>(), ["outbox_pending"]);
    assert_eq!(
        unknown.into_iter().collect::<Vec<_>>(),
        ["outbox_claim_batch_size", "outbox_pending_count"],
        "a bare histogram name and a suffix on a gauge are both wrong"
    );
    assert_eq!(
        substitute_variables_at_all(
            r#"rate(x{lane=~"$lane",target=~"${target}"}[$__rate_interval])"#
        ),
        r#"rate(x{lane=~".*",target=~".*"}[1m])"#
    );
    assert_eq!(
        substitute_variables_at_all("increase(x[$__range]) / y[${__interval}]"),
        "increase(x[5m]) / y[15s]"
    );
    assert_eq!(
        substitute_selected(
            r#"x{job=~"$job", namespace=~"${namespace}", instance=~"$instance"}"#,
            &[("job", "relay"), ("instance", "10.0.0.1:9464")]
        ),
        r#"x{job=~"relay", namespace=~".*", instance=~"10.0.0.1:9464"}"#
    );
}

// ---- The runbook ----------------------------------------------------------------------

/// Each alert of `grafana/alerts.yml` with its `runbook_url`, in file order.
fn alerts_and_runbook_urls() -> Vec<(String, Option<String>)> {
    let mut alerts: Vec<(String, Option<String>)> = Vec::new();
    for line in read(ALERTS).lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert:") {
            alerts.push((name.trim().to_owned(), None));
        } else if let Some(url) = line.strip_prefix("runbook_url:") {
            let (name, runbook) = alerts.last_mut().expect("runbook_url inside an alert");
            assert!(runbook.is_none(), "{name} has two runbook_urls");
            *runbook = Some(url.trim().trim_matches('"').to_owned());
        }
    }
    alerts
}

/// The guide's runbook: one section per alert.
const RUNBOOK: &str = "docs/src/operations/runbook.md";

#[test]
fn every_alert_links_its_section_of_the_guides_runbook() {
    let runbook = read(RUNBOOK);
    let alerts = alerts_and_runbook_urls();
    assert_eq!(alerts.len(), 11, "{alerts:?}");
    let sections: Vec<&str> = runbook.split("\n## ").skip(1).collect();
    let titles: Vec<&str> = sections
        .iter()
        .map(|s| s.lines().next().unwrap_or_default())
        .collect();
    let names: Vec<&str> = alerts.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        titles, names,
        "one runbook section per alert, in alerts.yml's order"
    );
    for ((name, url), section) in alerts.iter().zip(&sections) {
        // GitHub's anchor of a heading that is one CamelCase word: the word, lowercased.
        let expected = format!(
            "{}/blob/main/{RUNBOOK}#{}",
            env!("CARGO_PKG_REPOSITORY"),
            name.to_lowercase()
        );
        assert_eq!(
            url.as_deref(),
            Some(expected.as_str()),
            "{name}'s runbook_url"
        );
        for part in [
            "**What it means.**",
            "**How to confirm.**",
            "**What to do.**",
        ] {
            assert!(section.contains(part), "the runbook of {name} lacks {part}");
        }
    }
}
