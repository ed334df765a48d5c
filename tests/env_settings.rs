//! The README's table "Settings from the environment" and the code name the same
//! variables: every `OUTBOX_…` variable the library applies (`config::file::ENV_SETTINGS`)
//! or a flag of the binary reads (`env = "OUTBOX_…"` in `src/bin/outbox-relay/`) has a row,
//! every row names one of them, and every setting of the complete example config
//! (`examples/relay.toml`) but the lanes has a variable.

use std::collections::BTreeSet;

use outbox_relay::config::file::ENV_SETTINGS;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The rows of the README's table: (variable, setting column).
fn readme_rows() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).expect("README.md");
    let start = readme
        .find("<!-- env-settings:start -->")
        .expect("the table's start marker");
    let end = readme
        .find("<!-- env-settings:end -->")
        .expect("the table's end marker");
    readme[start..end]
        .lines()
        .filter(|line| line.starts_with("| `OUTBOX_"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
        })
        .collect()
}

/// The variables the binary's flags read: every `env = "OUTBOX_…"` and the
/// `…_ENV: &str = "OUTBOX_…"` constants they name.
fn binary_variables() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let dir = format!("{ROOT}/src/bin/outbox-relay");
    for entry in std::fs::read_dir(&dir).expect("the binary's sources") {
        let text = std::fs::read_to_string(entry.expect("an entry").path()).expect("a source");
        for line in text.lines() {
            let line = line.trim();
            let quoted = if line.contains("env = \"OUTBOX_") || line.starts_with("env = \"OUTBOX_")
            {
                line.split("env = \"").nth(1)
            } else if line.starts_with("const ") && line.contains("_ENV: &str = \"OUTBOX_") {
                line.split("= \"").nth(1)
            } else {
                None
            };
            if let Some(rest) = quoted {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit())
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn the_readme_table_and_the_code_name_the_same_variables() {
    let rows = readme_rows();
    let documented: BTreeSet<String> = rows.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(
        documented.len(),
        rows.len(),
        "a variable listed twice: {rows:?}"
    );
    let library: BTreeSet<String> = ENV_SETTINGS.iter().map(|s| s.variable.to_owned()).collect();
    let binary = binary_variables();
    assert!(
        binary.contains("OUTBOX_CONFIG") && binary.contains("OUTBOX_DATABASE_URL"),
        "the flags' variables were not found: {binary:?}"
    );
    let in_code: BTreeSet<String> = library.union(&binary).cloned().collect();
    let undocumented: Vec<_> = in_code.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "read by the code, not in the README: {undocumented:?}"
    );
    let unread: Vec<_> = documented.difference(&in_code).collect();
    assert!(
        unread.is_empty(),
        "in the README, read by no code: {unread:?}"
    );
    // Each library row names its key.
    for setting in ENV_SETTINGS {
        let (_, column) = rows
            .iter()
            .find(|(name, _)| name == setting.variable)
            .expect("documented");
        assert!(
            column.contains(&format!("`{}`", setting.key)),
            "{}: the README says {column}, the code sets {}",
            setting.variable,
            setting.key
        );
    }
}

#[test]
fn every_setting_of_the_complete_config_has_a_variable() {
    let text = std::fs::read_to_string(format!("{ROOT}/examples/relay.toml")).expect("relay.toml");
    let config: toml::Table = toml::from_str(&text).expect("the example parses");
    let columns: String = readme_rows()
        .into_iter()
        .map(|(_, column)| column)
        .collect::<Vec<_>>()
        .join(" ");
    let mut keys = Vec::new();
    for (key, value) in &config {
        match (key.as_str(), value) {
            ("lanes", _) => {}
            (section, toml::Value::Table(table)) => {
                keys.extend(table.keys().map(|field| format!("{section}.{field}")))
            }
            (key, _) => keys.push(key.to_owned()),
        }
    }
    // Commented-out fields of the example count too: `# key = …` at the start of a line
    // within a section names a setting as much as a set one does.
    let mut section = String::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim_matches(|c| c == '[' || c == ']').to_owned();
            continue;
        }
        let Some(rest) = line.strip_prefix("# ") else {
            continue;
        };
        let Some((key, _)) = rest.split_once(" = ") else {
            continue;
        };
        if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') && section != "lanes" {
            keys.push(if section.is_empty() {
                key.to_owned()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    assert!(
        keys.len() > 15,
        "too few settings found in the example: {keys:?}"
    );
    let missing: Vec<_> = keys
        .iter()
        .filter(|key| !columns.contains(&format!("`{key}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "settings without a variable: {missing:?}"
    );
}
