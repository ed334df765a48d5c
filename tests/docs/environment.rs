//! The environment table and the code name the same variables; every `OUTBOX_…` variable a
//! page names is read by the code; every setting but the lanes has a variable.

use std::collections::{BTreeMap, BTreeSet};

use clap::CommandFactory;
use outbox_relay::config::file::ENV_SETTINGS;

use super::config::parser_keys;
use super::markdown::{pages, spans_of, table, Page};
use super::CONFIG_PAGE;

/// The variables the binary's flags read, with each flag's long name.
fn flag_variables() -> BTreeMap<String, String> {
    let mut variables = BTreeMap::new();
    let cli = crate::cli::Cli::command();
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
        if key.starts_with("lanes.")
            || key.starts_with("lane_patterns.")
            || older.contains(&key.as_str())
        {
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
