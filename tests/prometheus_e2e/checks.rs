//! The checks once the scenario ran: every metric has moved series for both lanes, every
//! dashboard query returns data, and every alert rule evaluates (the dead-letter alert
//! fires).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use outbox_relay::metrics::process::{features, GIT_SHA, VERSION};
use outbox_relay::metrics::{
    MetricKind, ALL, BUILD_INFO, LABEL_LANE, LABEL_TARGET, PROCESS, REQUEUED_TOTAL,
    STORE_CALL_DURATION_SECONDS, STORE_WIDE,
};
use outbox_relay::store::StoreOp;
use serde_json::Value;

use crate::prometheus::Prometheus;
use crate::{dashboard, until, JOB, LEDGER, NAMESPACE, WEBHOOK};

/// Every metric has a series for both lanes, and the scenario moved it: a counter or a
/// histogram's count is above zero, a gauge was above zero in some scrape. Returns how
/// many metrics were checked.
pub(crate) async fn check_every_metric(prometheus: &Prometheus) -> usize {
    let lanes: BTreeSet<(String, String)> = [WEBHOOK, LEDGER]
        .iter()
        .map(|(l, t)| (l.to_string(), t.to_string()))
        .collect();
    let mut problems = Vec::new();
    for metric in ALL {
        let (series, moved) = match metric.kind {
            MetricKind::Counter => (metric.name.to_owned(), format!("sum({})", metric.name)),
            MetricKind::Histogram => {
                let count = format!("{}_count", metric.name);
                (count.clone(), format!("sum({count})"))
            }
            MetricKind::Gauge => (
                metric.name.to_owned(),
                format!("max(max_over_time({}[10m]))", metric.name),
            ),
        };
        let found = prometheus.query(&series).await.expect("query a metric");
        let labelled: BTreeSet<(String, String)> = found
            .iter()
            .map(|(labels, _)| {
                let label = |name: &str| labels[name].as_str().unwrap_or_default().to_owned();
                (label(LABEL_LANE), label(LABEL_TARGET))
            })
            .collect();
        // A store-wide metric (no lane label) has series, none of them a lane's.
        let expected = if metric.labels.first() == Some(&LABEL_LANE) {
            lanes.clone()
        } else {
            BTreeSet::from([(String::new(), String::new())])
        };
        if labelled != expected {
            problems.push(format!(
                "{series}: series for lanes {labelled:?}, expected {expected:?}"
            ));
        }
        let value = prometheus.query(&moved).await.expect("query a metric");
        if !value.first().is_some_and(|(_, v)| *v > 0.0) {
            problems.push(format!("{moved} = {value:?}: the scenario did not move it"));
        }
    }
    // Only the operator's requeue counts as one; the retries after the retryable failure
    // and the handler panic do not.
    let requeued = format!("sum by (lane) ({REQUEUED_TOTAL})");
    let by_lane = prometheus.query(&requeued).await.expect("query requeues");
    let by_lane: Vec<(&str, f64)> = by_lane
        .iter()
        .map(|(labels, n)| (labels[LABEL_LANE].as_str().unwrap_or_default(), *n))
        .filter(|(_, n)| *n != 0.0)
        .collect();
    if by_lane != [(WEBHOOK.0, 1.0)] {
        problems.push(format!(
            "{requeued} = {by_lane:?}, expected the one operator requeue on {}",
            WEBHOOK.0
        ));
    }
    // Every store call the lanes made is timed: claim, ack, nack, extend_lease, next_due
    // and stats. (Enqueue is not the lanes' call, and they release claims only at shutdown,
    // after these checks.)
    let timed = format!("sum by (op) ({STORE_CALL_DURATION_SECONDS}_count)");
    let ops: BTreeSet<String> = prometheus
        .query(&timed)
        .await
        .expect("query store call durations")
        .iter()
        .filter(|(_, n)| *n > 0.0)
        .map(|(labels, _)| labels["op"].as_str().unwrap_or_default().to_owned())
        .collect();
    // The calls a lane makes in the scenario (it enqueues through the service's outbox and
    // releases nothing).
    let expected: BTreeSet<String> = [
        StoreOp::Claim,
        StoreOp::Ack,
        StoreOp::Nack,
        StoreOp::ExtendLease,
        StoreOp::NextDue,
        StoreOp::Stats,
    ]
    .iter()
    .map(|op| op.to_string())
    .collect();
    if ops != expected {
        problems.push(format!("{timed}: ops {ops:?}, expected {expected:?}"));
    }
    assert!(
        problems.is_empty(),
        "metrics missing or unmoved in Prometheus:\n  {}",
        problems.join("\n  ")
    );
    ALL.len()
}

/// Every process-wide metric has one series, from the one scraped process, carrying the
/// scrape's job, namespace and instance; `outbox_build_info` names this build; the
/// gauges that cannot be zero for a running process are not. Returns how many metrics.
pub(crate) async fn check_process_metrics(prometheus: &Prometheus, exporter: SocketAddr) -> usize {
    let instance = exporter.to_string();
    let mut problems = Vec::new();
    for metric in PROCESS {
        let found = prometheus.query(metric.name).await.expect("query a metric");
        let scopes: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|(labels, _)| {
                let label = |name: &str| labels[name].as_str().unwrap_or_default();
                (label("job"), label("namespace"), label("instance"))
            })
            .collect();
        if scopes != [(JOB, NAMESPACE, instance.as_str())] {
            problems.push(format!("{}: series {found:?}", metric.name));
        }
    }
    let build = prometheus
        .query(BUILD_INFO)
        .await
        .expect("query build info");
    let labels = build.first().map(|(labels, value)| {
        let label = |name: &str| labels[name].as_str().unwrap_or_default().to_owned();
        (
            label("version"),
            label("git_sha"),
            label("features"),
            *value,
        )
    });
    let expected = (VERSION.to_owned(), GIT_SHA.to_owned(), features(), 1.0);
    if labels.as_ref() != Some(&expected) {
        problems.push(format!("{BUILD_INFO}: {labels:?}, expected {expected:?}"));
    }
    for name in [
        "process_resident_memory_bytes",
        "process_threads",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let value = prometheus.query(name).await.expect("query a metric");
        if !value.first().is_some_and(|(_, v)| *v > 0.0) {
            problems.push(format!("{name} = {value:?}, expected above 0"));
        }
    }
    assert!(
        problems.is_empty(),
        "process metrics missing or wrong in Prometheus:\n  {}",
        problems.join("\n  ")
    );
    PROCESS.len()
}

/// What Grafana's `label_values(metric{selector}, label)` offers, from Prometheus's series
/// API.
async fn label_values(prometheus: &Prometheus, query: &str) -> BTreeSet<String> {
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a label_values query: {query}"));
    let (selector, label) = inner
        .rsplit_once(", ")
        .expect("label_values(selector, label)");
    let series = prometheus
        .api("series", &[("match[]", selector)])
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    series
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|labels| labels[label].as_str().map(str::to_owned))
        .collect()
}

/// Each scope variable (job, namespace, instance) offers the one value the scrape gave,
/// each chained on the ones before it, as Grafana resolves them; returns the selection
/// of those values.
async fn resolve_scope_variables(
    prometheus: &Prometheus,
    exporter: SocketAddr,
) -> Vec<(&'static str, String)> {
    let dashboard = dashboard::dashboard();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    let query_of = |name: &str| -> String {
        let variable: &Value = variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name}"));
        variable["query"]["query"]
            .as_str()
            .expect("query")
            .to_owned()
    };
    let mut selected: Vec<(&'static str, String)> = Vec::new();
    for (name, expected) in [
        ("job", JOB.to_owned()),
        ("namespace", NAMESPACE.to_owned()),
        ("instance", exporter.to_string()),
    ] {
        let pairs: Vec<(&str, &str)> = selected.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let query = dashboard::substitute_selected(&query_of(name), &pairs);
        let offered = label_values(prometheus, &query).await;
        assert_eq!(
            offered,
            BTreeSet::from([expected.clone()]),
            "${name} offers {offered:?} ({query})"
        );
        selected.push((name, expected));
    }
    selected
}

/// Every query of every dashboard panel returns at least one series, and at least one of
/// them has a number (not NaN: Grafana shows NaN as no data): with every variable at
/// "All", and with job, namespace and instance each set to the one the scrape gave.
/// Another job's selection shows no store-call latency. Returns how many queries ran.
pub(crate) async fn check_every_panel_query(
    prometheus: &Prometheus,
    exporter: SocketAddr,
) -> usize {
    let dashboard = dashboard::dashboard();
    let selected = resolve_scope_variables(prometheus, exporter).await;
    let selected: Vec<(&str, &str)> = selected.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let all = dashboard::panel_queries(&dashboard);
    assert!(all.len() >= 20, "only {} panel queries", all.len());
    let scoped = dashboard::panel_queries_selected(&dashboard, &selected);
    let queries: Vec<&dashboard::PanelQuery> = all.iter().chain(&scoped).collect();
    for title in ["Store call latency by operation", "Version", "Memory"] {
        assert!(
            queries.iter().any(|q| q.panel_title == title),
            "no panel {title:?}"
        );
    }
    let elsewhere = dashboard::panel_queries_selected(&dashboard, &[("job", "another-relay")]);
    for query in elsewhere
        .iter()
        .filter(|q| q.panel_title.starts_with("Store call"))
    {
        let series = prometheus.query(&query.expr).await.expect("query");
        assert!(
            series.is_empty(),
            "another job's selection shows this job's data: {series:?} from {}",
            query.expr
        );
    }
    let mut problems = Vec::new();
    for query in queries.iter().copied() {
        let name = format!(
            "panel {} {:?} query {}",
            query.panel_id, query.panel_title, query.ref_id
        );
        assert!(
            !query.expr.contains('$'),
            "{name}: a variable is left unsubstituted in {}",
            query.expr
        );
        match prometheus.query(&query.expr).await {
            Err(error) => problems.push(format!("{name}: {error}")),
            Ok(series) if series.is_empty() => {
                problems.push(format!("{name} returned no series: {}", query.expr))
            }
            Ok(series) if series.iter().all(|(_, v)| v.is_nan()) => problems.push(format!(
                "{name} returned only NaN ({series:?}): {}",
                query.expr
            )),
            Ok(_) => {}
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} dashboard queries show no data:\n  {}",
        problems.len(),
        queries.len(),
        problems.join("\n  ")
    );
    queries.len()
}

/// Every alert rule of `grafana/alerts.yml` is loaded and has been evaluated without
/// error, and the dead-letter alert fires on the scenario's dead letters. Returns how many
/// rules.
pub(crate) async fn check_every_alert_rule(prometheus: &Prometheus) -> usize {
    let declared = dashboard::read("grafana/alerts.yml")
        .lines()
        .filter(|line| line.trim_start().starts_with("- alert:"))
        .count();
    let rules = until(
        prometheus,
        "every alert rule to be evaluated",
        || async move {
            let data = prometheus.api("rules", &[]).await.ok()?;
            let rules: Vec<serde_json::Value> = data["groups"]
                .as_array()?
                .iter()
                .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            let evaluated =
                rules.len() == declared && rules.iter().all(|r| r["health"] != "unknown");
            evaluated.then_some(rules)
        },
    )
    .await;
    let unhealthy: Vec<String> = rules
        .iter()
        .filter(|r| r["health"] != "ok" || r["lastError"].as_str().is_some_and(|e| !e.is_empty()))
        .map(|r| format!("{}: {} {}", r["name"], r["health"], r["lastError"]))
        .collect();
    assert!(
        unhealthy.is_empty(),
        "alert rules failed to evaluate:\n  {}",
        unhealthy.join("\n  ")
    );

    let firing = until(
        prometheus,
        "OutboxDeadLettersGrowing to fire",
        || async move {
            let data = prometheus.api("alerts", &[]).await.ok()?;
            let lanes: BTreeSet<String> = data["alerts"]
                .as_array()?
                .iter()
                .filter(|a| a["labels"]["alertname"] == "OutboxDeadLettersGrowing")
                .filter(|a| a["state"] == "firing")
                .filter_map(|a| a["labels"]["lane"].as_str().map(str::to_owned))
                .collect();
            (lanes.len() == 2).then_some(lanes)
        },
    )
    .await;
    assert_eq!(
        firing,
        BTreeSet::from([WEBHOOK.0.to_owned(), LEDGER.0.to_owned()])
    );

    // The scenario's lane nobody serves raises OutboxLaneUnserved: pending, its expression
    // true on the scraped gauge, until its 5-minute `for` has passed (alerts.test.yml has
    // it firing after that, in promtool's simulated time).
    let raised = until(
        prometheus,
        "OutboxLaneUnserved to be raised",
        || async move {
            let data = prometheus.api("alerts", &[]).await.ok()?;
            data["alerts"]
                .as_array()?
                .iter()
                .find(|a| a["labels"]["alertname"] == "OutboxLaneUnserved")
                .and_then(|a| a["state"].as_str().map(str::to_owned))
        },
    )
    .await;
    assert!(
        raised == "pending" || raised == "firing",
        "OutboxLaneUnserved is {raised}"
    );
    rules.len()
}

/// Every store-wide metric counts the scenario's one lane nobody serves, with its one
/// message, from the one scraped process. Returns how many metrics.
pub(crate) async fn check_store_wide_metrics(prometheus: &Prometheus) -> usize {
    for metric in STORE_WIDE {
        let found = until(prometheus, metric.name, || async move {
            let found = prometheus.query(metric.name).await.ok()?;
            (found.len() == 1 && found[0].1 == 1.0).then_some(found)
        })
        .await;
        assert_eq!(found.len(), 1, "{}: {found:?}", metric.name);
    }
    STORE_WIDE.len()
}
