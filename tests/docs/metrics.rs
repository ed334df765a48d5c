//! The metrics the documentation names are the crate's: the table of
//! `docs/src/operations/metrics.md` has one row per metric of the catalogue
//! (`metrics::ALL`, `metrics::PROCESS`, `metrics::STORE_WIDE`, `metrics::PATTERNS`, `metrics::http::HTTP`,
//! `metrics::kafka::KAFKA`), with its kind and labels, and nothing else; every metric name
//! anywhere in the README and the guide is one of them; and every metric the crate's
//! sources record is in the catalogue.

use std::collections::{BTreeMap, BTreeSet};

use outbox_relay::metrics::{
    http::HTTP, kafka::KAFKA, MetricInfo, MetricKind, ALL, PATTERNS, PROCESS, STORE_WIDE,
};

use crate::markdown::{pages, root, spans_of, table, Page};

const METRICS_PAGE: &str = "docs/src/operations/metrics.md";

fn catalogue() -> Vec<&'static MetricInfo> {
    ALL.iter()
        .chain(PROCESS)
        .chain(STORE_WIDE)
        .chain(PATTERNS)
        .chain(HTTP)
        .chain(KAFKA)
        .collect()
}

/// Words that start like a metric and are not one: what else the crate names `outbox_…`
/// (the crate, a message's id, the PostgreSQL and SQLite objects the migrations make, the
/// UI's cookie).
const NOT_METRICS: &[&str] = &[
    "outbox_relay",
    "outbox_id",
    "outbox_enqueue",
    "outbox_messages",
    "outbox_migrations",
    "outbox_lane_control",
    "outbox_keys",
    "outbox_ui_session",
    "outbox_cycle_1a2b3c4d",
];

/// A documented metric: its name as written, with the labels in braces it names.
fn parse_metric(span: &str) -> Option<(String, Option<BTreeSet<String>>)> {
    let (name, labels) = match span.split_once('{') {
        Some((name, rest)) => {
            let labels = rest.trim_end_matches('}');
            let labels: BTreeSet<String> = labels
                .split(',')
                .map(|l| {
                    l.split(['=', '~', '!'])
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_owned()
                })
                .filter(|l| !l.is_empty())
                .collect();
            (name, Some(labels))
        }
        None => (span, None),
    };
    let metric_like = (name.starts_with("outbox_") || name.starts_with("process_"))
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    metric_like.then(|| (name.to_owned(), labels))
}

#[test]
fn the_metrics_table_has_one_row_per_metric_with_its_kind_and_labels() {
    let page = Page::read(METRICS_PAGE);
    let rows = table(page.section("Metrics").expect("the metrics page"));
    assert_eq!(
        rows[0][..2],
        ["metric", "type"],
        "{METRICS_PAGE}: the table's header"
    );
    let mut rows_of: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut problems = Vec::new();
    let by_name: BTreeMap<&str, &MetricInfo> =
        catalogue().into_iter().map(|m| (m.name, m)).collect();
    for (index, row) in rows.iter().enumerate().skip(1) {
        let documented: Vec<_> = spans_of(&row[0])
            .iter()
            .filter_map(|s| parse_metric(s))
            .collect();
        if documented.is_empty() {
            problems.push(format!("row {index} names no metric: {row:?}"));
        }
        for (name, labels) in documented {
            rows_of.entry(name.clone()).or_default().push(index);
            let Some(metric) = by_name.get(name.as_str()) else {
                problems.push(format!(
                    "{name}: documented, but no such metric in the crate"
                ));
                continue;
            };
            let kind = match metric.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            if row[1] != kind {
                problems.push(format!(
                    "{name}: documented as a {}, recorded as a {kind}",
                    row[1]
                ));
            }
            let own: BTreeSet<String> = metric
                .labels
                .iter()
                .filter(|l| **l != "lane" && **l != "target")
                .map(|l| l.to_string())
                .collect();
            if labels.clone().unwrap_or_default() != own {
                problems.push(format!(
                    "{name}: documented with the labels {labels:?}, recorded with {own:?} (besides lane and target)"
                ));
            }
        }
    }
    for (name, rows) in &rows_of {
        if rows.len() > 1 {
            problems.push(format!(
                "{name}: documented in {} rows (one name, one meaning)",
                rows.len()
            ));
        }
    }
    for metric in catalogue() {
        if !rows_of.contains_key(metric.name) {
            problems.push(format!("{}: recorded, but not in the table", metric.name));
        }
    }
    assert!(
        problems.is_empty(),
        "{METRICS_PAGE}:\n{}",
        problems.join("\n")
    );
}

/// Every `outbox_…` or `process_…` word of a page's code (spans and blocks) that is not in
/// [`NOT_METRICS`], with its offset. A word followed by `*` is a family (`outbox_kafka_*`).
fn metric_words(page: &Page) -> Vec<(usize, String, bool)> {
    let mut words = Vec::new();
    let mut code: Vec<(usize, String)> = page.code_spans();
    code.extend(page.code_blocks().into_iter().map(|b| (b.start, b.body)));
    for (offset, text) in code {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let starts_word =
                i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
            let candidate = matches!(bytes[i], b'o' | b'p') && starts_word;
            let rest = if candidate { &text[i..] } else { "" };
            if rest.starts_with("outbox_") || rest.starts_with("process_") {
                let len = rest
                    .bytes()
                    .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
                    .count();
                let word = &rest[..len];
                // `outbox_kafka_*`, or `grep '^outbox_'`: a family of names.
                let family = rest[len..].starts_with('*') || word.ends_with('_');
                if !NOT_METRICS.contains(&word) {
                    words.push((offset, word.to_owned(), family));
                }
                i += len;
            } else {
                i += 1;
            }
        }
    }
    words
}

#[test]
fn every_metric_the_docs_name_exists() {
    let names: BTreeSet<&str> = catalogue().iter().map(|m| m.name).collect();
    let histograms: BTreeSet<&str> = catalogue()
        .iter()
        .filter(|m| m.kind == MetricKind::Histogram)
        .map(|m| m.name)
        .collect();
    let mut unknown = Vec::new();
    let mut seen = 0;
    let mut checked: Vec<Page> = pages();
    checked.push(Page::read("grafana/README.md"));
    for page in checked {
        for (offset, word, family) in metric_words(&page) {
            seen += 1;
            let known = if family {
                names.iter().any(|name| name.starts_with(&word))
            } else {
                names.contains(word.as_str())
                    || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                        word.strip_suffix(suffix)
                            .is_some_and(|base| histograms.contains(base))
                    })
            };
            if !known {
                unknown.push(format!(
                    "{}: {word}{}",
                    page.at(offset),
                    if family { "*" } else { "" }
                ));
            }
        }
    }
    assert!(
        seen > 60,
        "too few metric names found ({seen}): is the reader broken?"
    );
    assert!(
        unknown.is_empty(),
        "metric names the crate does not record (or add a word that is not a metric to NOT_METRICS):\n{}",
        unknown.join("\n")
    );
}

/// The first argument of each `counter!(`, `gauge!(` and `histogram!(` in the library's
/// sources, outside their test modules, with where it is.
fn recordings() -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    collect_rust(&root().join("src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        // A file's unit tests sit in a `mod tests` at its end.
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or(&text);
        for macro_name in ["counter!(", "gauge!(", "histogram!("] {
            for (at, _) in code.match_indices(macro_name) {
                let argument: String = code[at + macro_name.len()..]
                    .chars()
                    .take_while(|&c| c != ',' && c != ')')
                    .collect();
                let line = code[..at].matches('\n').count() + 1;
                found.push((
                    argument.trim().to_owned(),
                    format!("{}:{line}", file.display()),
                ));
            }
        }
    }
    found
}

fn collect_rust(dir: &std::path::Path, into: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            collect_rust(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The `const NAME: &str = "…";` of the library's sources: what a recording may name.
fn string_consts() -> BTreeMap<String, String> {
    let mut consts = BTreeMap::new();
    let mut files = Vec::new();
    collect_rust(&root().join("src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for line in text.lines() {
            let line = line
                .trim()
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            let Some(rest) = line.strip_prefix("const ") else {
                continue;
            };
            let Some((name, value)) = rest.split_once(": &str = \"") else {
                continue;
            };
            if let Some(value) = value.strip_suffix("\";") {
                consts.insert(name.trim().to_owned(), value.to_owned());
            }
        }
    }
    consts
}

#[test]
fn every_metric_the_crate_records_is_in_the_catalogue() {
    let names: BTreeSet<&str> = catalogue().iter().map(|m| m.name).collect();
    let consts = string_consts();
    let mut problems = Vec::new();
    let recordings = recordings();
    assert!(
        recordings.len() > 10,
        "too few recordings found: {recordings:?}"
    );
    for (argument, at) in recordings {
        let name = if let Some(literal) = argument.strip_prefix('"') {
            literal.trim_end_matches('"').to_owned()
        } else if let Some(value) = consts.get(argument.as_str()) {
            value.clone()
        } else if ["name", "metric.name", "build_info.name"].contains(&argument.as_str()) {
            // The recording helpers take the name from the catalogue (`metrics/lane.rs`,
            // `metrics/process.rs`).
            continue;
        } else {
            problems.push(format!(
                "{at}: records {argument}, which this check cannot resolve"
            ));
            continue;
        };
        if !names.contains(name.as_str()) {
            problems.push(format!(
                "{at}: records {name}, which is not in the catalogue"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
