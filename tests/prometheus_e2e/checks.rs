//! The checks once the scenario ran: every metric has moved series for both lanes, every
//! dashboard query returns data, and every alert rule evaluates (the dead-letter alert
//! fires).

use std::collections::BTreeSet;

use outbox_relay::metrics::{MetricKind, ALL, LABEL_LANE, LABEL_TARGET, REQUEUED_TOTAL};

use crate::prometheus::Prometheus;
use crate::{dashboard, until, LEDGER, WEBHOOK};

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
    assert!(
        problems.is_empty(),
        "metrics missing or unmoved in Prometheus:\n  {}",
        problems.join("\n  ")
    );
    ALL.len()
}

/// Every query of every dashboard panel returns at least one series, and at least one of
/// them has a number (not NaN: Grafana shows NaN as no data). Returns how many queries.
pub(crate) async fn check_every_panel_query(prometheus: &Prometheus) -> usize {
    let queries = dashboard::panel_queries(&dashboard::dashboard());
    assert!(queries.len() >= 20, "only {} panel queries", queries.len());
    let mut problems = Vec::new();
    for query in &queries {
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
    rules.len()
}
