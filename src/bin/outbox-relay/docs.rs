//! The documentation against the binary (tests only): every `outbox-relay …` command line
//! of the README and the guide parses with this command line, every flag the commands
//! table names exists, and the configuration reference (`docs/src/configuration.md`)
//! names the keys the config parser knows, with the defaults the code has, and the
//! environment variables the code reads. The rest of the checks (links, metrics, the
//! migrations page) are `tests/docs.rs`, whose Markdown reader this module shares.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use outbox_relay::config::file::{
    FileConfig, ListenerSection, PostgresSection, SupervisorSection, ENV_SETTINGS,
};

#[path = "../../../tests/docs/markdown.rs"]
mod markdown;

use markdown::{pages, shell_words, spans_of, split_row, table, Page};

// ---- Command lines ---------------------------------------------------------------------

/// A command line of the docs: where it is, and its words after `outbox-relay`.
#[derive(Debug)]
struct CommandLine {
    at: String,
    words: Vec<String>,
}

/// The words after `outbox-relay` in a shell line, if it runs the binary: directly, after
/// `VAR=value` assignments, after `kubectl exec … --`, or as `cargo run … --features cli
/// -- …`.
fn binary_words(words: &[String]) -> Option<Vec<String>> {
    let words = match words.first() {
        Some(prompt) if prompt == "$" => &words[1..],
        _ => words,
    };
    let rest: Vec<String> = words
        .iter()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'))
        .cloned()
        .collect();
    if let Some(at) = rest.iter().position(|w| w == "outbox-relay") {
        let before = &rest[..at];
        let runs_it = at == 0 || before.last().is_some_and(|w| w == "--");
        return runs_it.then(|| rest[at + 1..].to_vec());
    }
    let cargo_run = rest.len() > 2 && rest[0] == "cargo" && rest[1] == "run";
    let binary = rest
        .windows(2)
        .any(|w| w[0] == "--features" && w[1].contains("cli"));
    if cargo_run && binary {
        let at = rest.iter().position(|w| w == "--")?;
        return Some(rest[at + 1..].to_vec());
    }
    None
}

/// Every command line of the README and the guide that runs `outbox-relay`: in shell,
/// console and text blocks (a `\` continues a line), and in inline code.
fn command_lines() -> Vec<CommandLine> {
    let mut lines = Vec::new();
    for page in pages() {
        for block in page.code_blocks() {
            if !["", "sh", "bash", "console", "text", "shell"].contains(&block.lang()) {
                continue;
            }
            let mut logical = String::new();
            let mut first_line = 0;
            for (i, line) in block.body.lines().enumerate() {
                if logical.is_empty() {
                    first_line = i;
                }
                if let Some(continued) = line.strip_suffix('\\') {
                    logical.push_str(continued);
                    logical.push(' ');
                    continue;
                }
                logical.push_str(line);
                let text = std::mem::take(&mut logical);
                // In a console block only the prompted lines are commands.
                if block.lang() == "console" && !text.trim_start().starts_with('$') {
                    continue;
                }
                let at = format!(
                    "{}:{}",
                    page.path,
                    page.line_of(block.start) + 1 + first_line
                );
                if let Ok(words) = shell_words(&text) {
                    if let Some(words) = binary_words(&words) {
                        lines.push(CommandLine { at, words });
                    }
                }
            }
        }
        for (offset, span) in page.code_spans() {
            if !span.contains("outbox-relay ") {
                continue;
            }
            let at = page.at(offset);
            match shell_words(&span) {
                Ok(words) => {
                    if let Some(words) = binary_words(&words) {
                        lines.push(CommandLine { at, words });
                    }
                }
                Err(error) => lines.push(CommandLine {
                    at,
                    words: vec![format!("<{error}>")],
                }),
            }
        }
    }
    lines
}

/// A command line with the docs' placeholders made concrete: `ID` (or `ID…`) a message id;
/// a trailing `…` (a prefix, as in "`outbox-relay --config FILE …`") any command, `status`.
fn concrete(words: &[String]) -> Vec<String> {
    let mut out: Vec<String> = words
        .iter()
        .map(|word| match word.trim_end_matches('…') {
            "ID" => "0190a1b2-0000-7000-8000-000000000001".to_owned(),
            _ => word.clone(),
        })
        .collect();
    if out.last().is_some_and(|w| w == "…") {
        out.pop();
        out.push("status".to_owned());
    }
    out
}

#[test]
fn every_command_line_in_the_docs_parses() {
    let lines = command_lines();
    assert!(lines.len() > 30, "too few command lines found: {lines:#?}");
    let mut refused = Vec::new();
    for line in &lines {
        let args = std::iter::once("outbox-relay".to_owned()).chain(concrete(&line.words));
        if let Err(error) = super::Cli::command().try_get_matches_from(args) {
            use clap::error::ErrorKind;
            // "`outbox-relay purge`" in a sentence names a command; it is no command line.
            let a_name = matches!(error.kind(), ErrorKind::MissingRequiredArgument)
                && line.words.iter().all(|w| !w.starts_with('-'));
            let shown = matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            );
            if !a_name && !shown {
                let first = error.to_string();
                let first = first.lines().next().unwrap_or_default().to_owned();
                refused.push(format!(
                    "{}: outbox-relay {}\n    {first}",
                    line.at,
                    line.words.join(" ")
                ));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "command lines the binary refuses:\n{}",
        refused.join("\n")
    );
}

/// The subcommand a synopsis names (`dead-letters requeue (ID… | --lane L …)`) and the
/// long flags it uses.
fn synopsis(cell: &str) -> (Vec<String>, Vec<String>) {
    let words: Vec<&str> = cell.split_whitespace().collect();
    let path: Vec<String> = words
        .iter()
        .take_while(|w| {
            w.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !w.starts_with('-')
        })
        .map(|w| w.to_string())
        .collect();
    let flags = words
        .iter()
        .filter_map(|w| w.trim_start_matches(['[', '(']).strip_prefix("--"))
        .map(|w| {
            w.chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect()
        })
        .collect();
    (path, flags)
}

#[test]
fn every_flag_the_commands_table_names_exists() {
    let page = Page::read("docs/src/daemon.md");
    let section = page
        .section("Commands")
        .expect("the daemon page's Commands");
    let rows = table(section);
    assert_eq!(rows[0][0], "command");
    let cli = super::Cli::command();
    let mut problems = Vec::new();
    let mut named = BTreeSet::new();
    for row in &rows[1..] {
        let spans = spans_of(&row[0]);
        let cell = spans.first().map(String::as_str).unwrap_or(&row[0]);
        let (path, flags) = synopsis(cell);
        let mut command = &cli;
        for name in &path {
            match command.find_subcommand(name) {
                Some(sub) => command = sub,
                None => {
                    problems.push(format!("{cell}: no subcommand {name}"));
                    break;
                }
            }
        }
        named.insert(path.join(" "));
        for flag in flags {
            let known = command
                .get_arguments()
                .chain(cli.get_arguments())
                .any(|arg| arg.get_long() == Some(flag.as_str()));
            if !known {
                problems.push(format!("{cell}: {} has no --{flag}", path.join(" ")));
            }
        }
    }
    // Every command the binary has is in the table.
    for sub in cli.get_subcommands() {
        let name = sub.get_name().to_owned();
        let leaves: Vec<String> = if sub.has_subcommands() {
            sub.get_subcommands()
                .map(|s| format!("{name} {}", s.get_name()))
                .collect()
        } else {
            vec![name]
        };
        for leaf in leaves {
            if leaf != "help" && !leaf.ends_with(" help") && !named.contains(&leaf) {
                problems.push(format!(
                    "`outbox-relay {leaf}` is not in the commands table"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/src/daemon.md:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_command_line_reader_finds_what_a_reader_would_run() {
    let words = |line: &str| binary_words(&shell_words(line).unwrap());
    assert_eq!(
        words("outbox-relay pause --lane orders --target billing --reason \"an upgrade\""),
        Some(
            vec![
                "pause",
                "--lane",
                "orders",
                "--target",
                "billing",
                "--reason",
                "an upgrade"
            ]
            .into_iter()
            .map(String::from)
            .collect()
        )
    );
    assert_eq!(
        words("$ OTEL_X=1 outbox-relay --config relay.toml run   # the daemon"),
        Some(vec!["--config".into(), "relay.toml".into(), "run".into()])
    );
    assert_eq!(
        words("kubectl exec deploy/outbox-relay -- outbox-relay status"),
        Some(vec!["status".into()])
    );
    assert_eq!(
        words("cargo run --release --features cli -- run"),
        Some(vec!["run".into()])
    );
    assert_eq!(words("kubectl rollout restart deploy/outbox-relay"), None);
    // A runbook command as the issue found it: clap refuses it.
    let args = ["outbox-relay", "resume", "LANE"];
    assert!(super::Cli::command().try_get_matches_from(args).is_err());
}

// ---- The configuration reference --------------------------------------------------------

const CONFIG_PAGE: &str = "docs/src/configuration.md";

/// The reference's tables: the heading each sits under, and the dotted prefix of its keys.
const TABLES: &[(&str, &str)] = &[
    ("Top level", ""),
    ("`[listener]`", "listener."),
    ("`[postgres]`", "postgres."),
    ("`[supervisor]`", "supervisor."),
    ("`[[lanes]]`", "lanes."),
    ("A lane's `retention`", "lanes.retention."),
    ("A lane's `breaker`", "lanes.breaker."),
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
fn parser_keys() -> BTreeSet<String> {
    let config = parse(&format!(
        "{LANE}retention = {{ delivered = \"7d\" }}\nbreaker = {{ cool_down = \"30s\" }}\n"
    ));
    let mut keys = BTreeSet::new();
    let json = |v: serde_json::Result<serde_json::Value>| object_keys(v.expect("serializes"));
    let tables = ["listener", "postgres", "supervisor", "lanes"];
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
            json(serde_json::to_value(PostgresSection::default())),
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
                &config.listener.ui_hosts,
                config.listener.control_token().map_err(|e| e.to_string()),
            ),
            config.postgres.to_options(),
            config.supervisor(),
            config.lanes(),
            config.retention(),
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
        Some((table, field)) => format!("[{table}]\n{field} = {value}\n{LANE}"),
    }
}

/// The config a key's default is compared against: the lane alone, or for a breaker's key
/// a lane with a breaker (its keys' defaults apply only to one).
fn base_for(key: &str) -> String {
    if key.starts_with("lanes.breaker.") {
        format!("{LANE}breaker = {{ }}\n")
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
    let postgres = outbox_relay::store::postgres::CLAIMS_IN_FLIGHT.to_string();
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

// ---- The environment ---------------------------------------------------------------------

/// The variables the binary's flags read, with each flag's long name.
fn flag_variables() -> BTreeMap<String, String> {
    let mut variables = BTreeMap::new();
    let cli = super::Cli::command();
    let mut commands = vec![&cli];
    commands.extend(cli.get_subcommands());
    for command in commands {
        for arg in command.get_arguments() {
            if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) {
                variables.insert(env.to_string_lossy().into_owned(), format!("--{long}"));
            }
        }
    }
    variables
}

/// The rows of the environment table: (variable, setting, flag).
fn environment_rows() -> Vec<(String, String, String)> {
    let page = Page::read(CONFIG_PAGE);
    let section = page
        .section("Settings from the environment")
        .expect("the environment table's heading");
    table(section)
        .into_iter()
        .skip(1)
        .map(|row| {
            let variable = spans_of(&row[0]).first().cloned().unwrap_or_default();
            (
                variable,
                row[1].clone(),
                row.get(2).cloned().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn the_environment_table_and_the_code_name_the_same_variables() {
    let rows = environment_rows();
    let documented: BTreeSet<&str> = rows.iter().map(|(v, _, _)| v.as_str()).collect();
    assert_eq!(
        documented.len(),
        rows.len(),
        "a variable listed twice: {rows:?}"
    );
    let flags = flag_variables();
    assert!(flags.contains_key("OUTBOX_CONFIG") && flags.contains_key("OUTBOX_DATABASE_URL"));
    let mut in_code: BTreeSet<&str> = ENV_SETTINGS.iter().map(|s| s.variable).collect();
    in_code.extend(flags.keys().map(String::as_str));
    let undocumented: Vec<_> = in_code.difference(&documented).collect();
    let unread: Vec<_> = documented.difference(&in_code).collect();
    assert!(
        undocumented.is_empty(),
        "read by the code, not in the table: {undocumented:?}"
    );
    assert!(
        unread.is_empty(),
        "in the table, read by no code: {unread:?}"
    );
    for (variable, setting, flag) in &rows {
        if let Some(env) = ENV_SETTINGS.iter().find(|s| s.variable == variable) {
            assert!(
                setting.contains(&format!("`{}`", env.key)),
                "{variable}: the table says {setting}, the code sets {}",
                env.key
            );
        }
        let code_flag = flags.get(variable).map(String::as_str).unwrap_or_default();
        let table_flag = spans_of(flag).first().cloned().unwrap_or_default();
        assert_eq!(table_flag, code_flag, "{variable}: the flag that reads it");
    }
}

/// Variables the pages may name that are not settings of the relay: the test suite's, the
/// build's, the benchmark's, and examples of variables a config names (a token, a secret).
const OTHER_VARIABLES: &[&str] = &[
    "OUTBOX_TEST_DATABASE_URL",
    "OUTBOX_TEST_MYSQL_URL",
    "OUTBOX_TEST_MYSQL8_URL",
    "OUTBOX_BLESS",
    "OUTBOX_RELAY_GIT_SHA",
    "OUTBOX_BENCH_RELAY_BIN",
    "OUTBOX_CONTROL_TOKEN",
];

#[test]
fn every_outbox_variable_the_pages_name_is_read_by_the_code() {
    let mut known: BTreeSet<String> = ENV_SETTINGS.iter().map(|s| s.variable.to_owned()).collect();
    known.extend(flag_variables().into_keys());
    known.extend(OTHER_VARIABLES.iter().map(|v| v.to_string()));
    let mut problems = Vec::new();
    for page in pages() {
        let text = &page.text;
        for (offset, _) in text.match_indices("OUTBOX_") {
            if offset > 0 && text.as_bytes()[offset - 1].is_ascii_alphanumeric() {
                continue;
            }
            let name: String = text[offset..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            let family = text[offset + name.len()..].starts_with('*')
                || text[offset + name.len()..].starts_with('…');
            let ok = if family {
                known.iter().any(|k| k.starts_with(&name))
            } else {
                known.contains(&name)
            };
            if !ok {
                problems.push(format!("{}: {name}", page.at(offset)));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "variables no code reads:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_setting_of_the_complete_config_has_a_variable() {
    let settings: String = environment_rows()
        .into_iter()
        .map(|(_, setting, _)| setting)
        .collect::<Vec<_>>()
        .join(" ");
    let mut missing = Vec::new();
    for key in parser_keys() {
        // The lanes are the file's; the older names are read, not taught.
        let older = [
            "metrics_listen",
            "listener.control_token_env",
            "listener.control_token_file",
        ];
        if key.starts_with("lanes.") || older.contains(&key.as_str()) {
            continue;
        }
        if !settings.contains(&format!("`{key}`")) {
            missing.push(key);
        }
    }
    assert!(
        missing.is_empty(),
        "settings without a variable: {missing:?}"
    );
}

#[test]
fn table_rows_split_on_bars_outside_code() {
    assert_eq!(split_row("| `a|b` | c |"), ["`a|b`", "c"]);
}
