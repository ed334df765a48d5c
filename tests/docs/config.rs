//! The configuration reference names every key the config parser knows and no other; each
//! default it states is the code's, and so is each default a page states for a key; the
//! config snippets parse and teach no older key.

use std::collections::{BTreeMap, BTreeSet};

use outbox_relay::config::file::{FileConfig, ListenerSection, SupervisorSection};
use outbox_relay::database::PostgresOptions;

use super::markdown::{pages, spans_of, table, Page};
use super::CONFIG_PAGE;

/// The reference's tables: the heading each sits under, and the dotted prefix of its keys.
const TABLES: &[(&str, &str)] = &[
    ("Top level", ""),
    ("`[listener]`", "listener."),
    ("`[postgres]`", "postgres."),
    ("`[supervisor]`", "supervisor."),
    ("`[[lanes]]`", "lanes."),
    ("A lane's `retention`", "lanes.retention."),
    ("A lane's `breaker`", "lanes.breaker."),
    ("`[[lane_patterns]]`", "lane_patterns."),
];

/// One row of the reference: the dotted key, and its default cell as written.
#[derive(Debug, Clone)]
struct Row {
    key: String,
    default: String,
}

fn reference() -> Vec<Row> {
    let page = Page::read(CONFIG_PAGE);
    let mut rows = Vec::new();
    for (heading, prefix) in TABLES {
        let section = page
            .section(heading)
            .unwrap_or_else(|| panic!("{CONFIG_PAGE} has no heading {heading:?}"));
        let cells = table(section);
        assert_eq!(
            cells[0][..2],
            ["key", "default"],
            "{CONFIG_PAGE}, {heading}"
        );
        for row in &cells[1..] {
            let key = spans_of(&row[0]).first().cloned().unwrap_or_else(|| {
                panic!("{CONFIG_PAGE}, {heading}: a row without a key: {row:?}")
            });
            rows.push(Row {
                key: format!("{prefix}{key}"),
                default: row[1].clone(),
            });
        }
    }
    rows
}

/// A lane the reference's checks add keys to.
const LANE: &str =
    "[[lanes]]\nlane = \"orders\"\ntarget = \"billing\"\nsink = { kind = \"log\" }\n";
/// A lane pattern the reference's checks add a pattern's own keys to (after [`LANE`]).
const PATTERN: &str =
    "[[lane_patterns]]\nlane = \"tenant-*\"\ntarget = \"billing\"\nsink = { kind = \"log\" }\n";

fn parse(text: &str) -> FileConfig {
    FileConfig::from_toml_str("the reference", text)
        .unwrap_or_else(|error| panic!("{error}\n{text}"))
}

fn object_keys(value: serde_json::Value) -> BTreeSet<String> {
    value
        .as_object()
        .expect("a table")
        .keys()
        .cloned()
        .collect()
}

/// Every key the config parser knows, dotted (`listener.address`, `lanes.lease`).
pub(super) fn parser_keys() -> BTreeSet<String> {
    let config = parse(&format!(
        "{LANE}retention = {{ delivered = \"7d\" }}\nbreaker = {{ cool_down = \"30s\" }}\n"
    ));
    let mut keys = BTreeSet::new();
    let json = |v: serde_json::Result<serde_json::Value>| object_keys(v.expect("serializes"));
    let tables = [
        "listener",
        "postgres",
        "supervisor",
        "lanes",
        "lane_patterns",
    ];
    for key in json(serde_json::to_value(&config)) {
        if !tables.contains(&key.as_str()) {
            keys.insert(key);
        }
    }
    let sections = [
        (
            "listener.",
            json(serde_json::to_value(ListenerSection::default())),
        ),
        (
            "postgres.",
            json(serde_json::to_value(PostgresOptions::default())),
        ),
        (
            "supervisor.",
            json(serde_json::to_value(SupervisorSection::default())),
        ),
        ("lanes.", json(serde_json::to_value(&config.lanes[0]))),
        (
            "lanes.retention.",
            json(serde_json::to_value(config.lanes[0].retention)),
        ),
        (
            "lanes.breaker.",
            json(serde_json::to_value(config.lanes[0].breaker)),
        ),
    ];
    // A pattern's own keys; the rest are a lane's, documented once under `[[lanes]]`.
    let patterns = parse(&format!(
        "{LANE}{PATTERN}max_lanes = 5\nidle_stop = \"1m\"\n"
    ));
    let lane_keys = json(serde_json::to_value(&config.lanes[0]));
    let pattern_keys = json(serde_json::to_value(&patterns.lane_patterns[0]))
        .into_iter()
        .filter(|key| !lane_keys.contains(key) || key == "lane" || key == "target");
    keys.extend(pattern_keys.map(|name| format!("lane_patterns.{name}")));
    for (prefix, names) in sections {
        keys.extend(names.into_iter().map(|name| format!("{prefix}{name}")));
    }
    keys
}

#[test]
fn the_config_reference_names_every_key_the_parser_knows_and_no_other() {
    let rows = reference();
    let documented: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
    let unique: BTreeSet<&str> = documented.iter().copied().collect();
    assert_eq!(
        unique.len(),
        documented.len(),
        "a key listed twice: {documented:?}"
    );
    let known = parser_keys();
    let unique: BTreeSet<String> = unique.into_iter().map(str::to_owned).collect();
    let undocumented: Vec<_> = known.difference(&unique).collect();
    let unknown: Vec<_> = unique.difference(&known).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{CONFIG_PAGE}: keys the parser knows and the reference lacks: {undocumented:?}; \
         keys in the reference the parser refuses: {unknown:?}"
    );
}

/// What a config file resolves to, everything the daemon reads from it.
fn resolved(text: &str) -> String {
    let config = parse(text);
    let routes = config.listener.routes.clone().unwrap_or_else(|| {
        outbox_relay::http::RouteGroup::ALL
            .iter()
            .map(|group| group.as_str().to_owned())
            .collect()
    });
    format!(
        "{:?}",
        (
            (
                config.database_url(),
                &config.table_prefix,
                &config.schema,
                config.connect_timeout(),
                config.shutdown_timeout(),
                &config.consumer_id,
                &config.otlp_endpoint,
                &config.otlp_ca_file,
            ),
            (
                config.listen_address(),
                config.listener.to_config(),
                routes,
                config.listener.api_settings(),
                config.listener.control_token().map_err(|e| e.to_string()),
            ),
            &config.postgres,
            config.supervisor(),
            // Each lane's retention is part of its config.
            config.lanes(),
            config.lane_patterns(),
        )
    )
}

/// The reference's config with `key` set to `value`: a top-level key before the lane, a
/// table's key in its table, a lane's key (or its retention's or breaker's) in the lane.
fn with_key(key: &str, value: &str) -> String {
    match key.split_once('.') {
        None => format!("{key} = {value}\n{LANE}"),
        Some(("lanes", rest)) => match rest.split_once('.') {
            None => format!("{LANE}{rest} = {value}\n"),
            Some((table, field)) => format!("{LANE}{table} = {{ {field} = {value} }}\n"),
        },
        Some(("lane_patterns", field)) => format!("{LANE}{PATTERN}{field} = {value}\n"),
        Some((table, field)) => format!("[{table}]\n{field} = {value}\n{LANE}"),
    }
}

/// The config a key's default is compared against: the lane alone, or for a breaker's key
/// a lane with a breaker (its keys' defaults apply only to one).
fn base_for(key: &str) -> String {
    if key.starts_with("lanes.breaker.") {
        format!("{LANE}breaker = {{ }}\n")
    } else if key.starts_with("lane_patterns.") {
        format!("{LANE}{PATTERN}")
    } else {
        LANE.to_owned()
    }
}

#[test]
fn every_default_the_config_reference_states_is_the_codes() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for row in reference() {
        // A default that is one literal value (`"30s"`, `8`, `true`) is set and must change
        // nothing; one in words ("the concurrency", "none") is read by people.
        let spans = spans_of(&row.default);
        let literal = spans.len() == 1 && row.default == format!("`{}`", spans[0]);
        if !literal {
            continue;
        }
        checked += 1;
        let value = &spans[0];
        let text = if row.key.starts_with("lanes.breaker.") {
            let field = row.key.trim_start_matches("lanes.breaker.");
            format!("{LANE}breaker = {{ {field} = {value} }}\n")
        } else {
            with_key(&row.key, value)
        };
        let base = resolved(&base_for(&row.key));
        let set = match FileConfig::from_toml_str("the reference", &text) {
            Ok(_) => resolved(&text),
            Err(error) => {
                problems.push(format!(
                    "{}: its default {value} is refused: {error}",
                    row.key
                ));
                continue;
            }
        };
        if set != base {
            problems.push(format!(
                "{}: the reference says the default is {value}; setting it changes what the \
                 file means, so the code's default is another",
                row.key
            ));
        }
    }
    assert!(checked > 30, "too few literal defaults checked: {checked}");
    assert!(
        problems.is_empty(),
        "{CONFIG_PAGE}:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_claims_in_flight_default_is_the_stores() {
    let row = reference()
        .into_iter()
        .find(|row| row.key == "lanes.claims_in_flight")
        .expect("claims_in_flight in the reference");
    let spans = spans_of(&row.default);
    let postgres = outbox_relay::database::postgres::CLAIMS_IN_FLIGHT.to_string();
    let others = outbox_relay::config::DEFAULT_CLAIMS_IN_FLIGHT.to_string();
    assert_eq!(
        spans,
        [postgres, others],
        "{CONFIG_PAGE}: claims_in_flight's default cell ({}) must name PostgreSQL's and the other stores'",
        row.default
    );
}

/// A duration or number as the docs write it (`30 s`, `"30s"`, `500 µs`, `50,000`), in one
/// spelling.
fn normalized(value: &str) -> String {
    let value = value
        .trim()
        .trim_matches('`')
        .trim_matches('"')
        .replace(',', "");
    let compact = value.replace(' ', "").replace('µ', "u");
    match humantime::parse_duration(&compact) {
        Ok(duration) => format!("{duration:?}"),
        Err(_) => compact.to_lowercase(),
    }
}

/// What follows a key in prose as its default: "`lease` (default 30 s)", "`lease`,
/// default 30 s".
fn stated_default(after: &str) -> Option<String> {
    let rest = after
        .strip_prefix(" (default ")
        .or_else(|| after.strip_prefix(", default "))?;
    let end = [")", ";", ":", ", ", ",\n"]
        .iter()
        .filter_map(|stop| rest.find(stop))
        .min()
        .unwrap_or(rest.len());
    let value = rest[..end].trim();
    (!value.is_empty()).then(|| value.to_owned())
}

#[test]
fn every_default_the_pages_state_for_a_key_is_the_references() {
    let rows = reference();
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in &rows {
        let short = row.key.rsplit('.').next().unwrap_or(&row.key).to_owned();
        let cell = spans_of(&row.default)
            .first()
            .cloned()
            .unwrap_or_else(|| row.default.clone());
        by_key.entry(short).or_default().push(normalized(&cell));
        by_key
            .entry(row.key.clone())
            .or_default()
            .push(normalized(&cell));
    }
    // What the pages state defaults for that is no key of the file: the library's own.
    // The store's defaults as the daemon's PostgreSQL settings hold them (the library's
    // unit test `defaults_are_the_stores` keeps the two equal).
    use outbox_relay::database::postgres as pg;
    let postgres = pg::PostgresOptions::default();
    let library = [
        (
            "max_attempts",
            outbox_relay::message::DEFAULT_MAX_ATTEMPTS.to_string(),
        ),
        (
            "migration_statement_timeout",
            format!("{:?}", pg::DEFAULT_MIGRATION_STATEMENT_TIMEOUT),
        ),
        (
            "PostgresConfig::statement_timeout",
            format!("{:?}", postgres.statement_timeout),
        ),
        (
            "PostgresConfig::synchronous_commit",
            postgres.synchronous_commit.to_string(),
        ),
    ];
    for (name, default) in library {
        by_key.entry(name.to_owned()).or_default().push(default);
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        // The sinks have keys of their own with the same names (`connect_timeout`,
        // `batch_size`); their defaults are the sinks page's.
        if page.path.ends_with("sinks.md") {
            continue;
        }
        let prose = page.prose();
        for (offset, span) in page.code_spans() {
            let Some(defaults) = by_key.get(span.trim_start_matches('[')) else {
                continue;
            };
            let end = offset + span.len() + 2;
            let Some(stated) = prose.get(end..).and_then(stated_default) else {
                continue;
            };
            checked += 1;
            if !defaults.contains(&normalized(&stated)) {
                problems.push(format!(
                    "{}: `{span}` (default {stated}); the reference says {defaults:?}",
                    page.at(offset)
                ));
            }
        }
    }
    assert!(checked > 5, "too few stated defaults found: {checked}");
    assert!(
        problems.is_empty(),
        "defaults the pages state that the reference does not:\n{}",
        problems.join("\n")
    );
}

/// Each config snippet of the pages as a whole file: a snippet with lanes as it is; one
/// `sink = …` per line in a lane of its own; anything else before a lane.
fn toml_snippets() -> Vec<(String, String)> {
    let mut snippets = Vec::new();
    for page in pages() {
        for block in page.code_blocks() {
            if block.lang() != "toml" || block.body.contains("[dependencies]") {
                continue;
            }
            let at = page.at(block.start);
            let body = block.body.clone();
            if body.contains("[[lanes]]") {
                snippets.push((at, body));
            } else if body
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .all(|l| l.starts_with("sink ="))
            {
                for line in body.lines().filter(|l| l.starts_with("sink =")) {
                    snippets.push((
                        at.clone(),
                        format!("[[lanes]]\nlane = \"a\"\ntarget = \"b\"\n{line}\n"),
                    ));
                }
            } else {
                snippets.push((at, format!("{body}\n{LANE}")));
            }
        }
    }
    snippets
}

#[test]
fn every_config_snippet_parses_and_uses_no_older_key() {
    let snippets = toml_snippets();
    assert!(snippets.len() > 5, "too few config snippets found");
    let mut problems = Vec::new();
    for (at, text) in snippets {
        match FileConfig::from_toml_str(&at, &text) {
            Ok(config) => {
                let older = config.deprecated_keys();
                if !older.is_empty() {
                    problems.push(format!("{at}: teaches an older key: {older:?}"));
                }
            }
            Err(error) => problems.push(format!("{at}: {error}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_dotted_key_the_pages_name_is_known() {
    let known = parser_keys();
    let mut problems = Vec::new();
    for page in pages() {
        for (offset, span) in page.code_spans() {
            // `listener.token_env`, or "`[postgres] lock_timeout`".
            let dotted = match span.strip_prefix('[').and_then(|s| s.split_once("] ")) {
                Some((table, key)) if !table.starts_with('[') => {
                    let key = key.split_whitespace().next().unwrap_or_default();
                    format!("{table}.{key}")
                }
                _ => span.clone(),
            };
            let Some((table, key)) = dotted.split_once('.') else {
                continue;
            };
            if !["listener", "postgres", "supervisor"].contains(&table) {
                continue;
            }
            let key = key.split([' ', '=']).next().unwrap_or(key);
            if !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                continue;
            }
            if !known.contains(&format!("{table}.{key}")) {
                problems.push(format!("{}: {span}: no such key", page.at(offset)));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
