//! Every `outbox-relay …` command line of the pages parses with the binary's command line;
//! the daemon page's commands table names every command, with flags that exist.

use std::collections::BTreeSet;

use clap::CommandFactory;

use super::markdown::{pages, shell_words, spans_of, table, Page};

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
        if let Err(error) = crate::cli::Cli::command().try_get_matches_from(args) {
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
    let cli = crate::cli::Cli::command();
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
    assert!(crate::cli::Cli::command()
        .try_get_matches_from(args)
        .is_err());
}

#[test]
fn the_defaults_the_simulate_page_states_are_the_commands() {
    let page = Page::read("docs/src/simulate.md");
    let text = &page.text;
    let start = text
        .find("Flags (defaults):")
        .expect("docs/src/simulate.md states the flags' defaults");
    let end = start + text[start..].find(". ").unwrap_or(text.len() - start);
    let simulate = crate::cli::Cli::command();
    let simulate = simulate
        .find_subcommand("simulate")
        .expect("a simulate command");
    let mut checked = 0;
    let mut problems = Vec::new();
    for span in spans_of(&text[start..end]) {
        let words: Vec<&str> = span.split_whitespace().collect();
        for pair in words.chunks(2) {
            let [flag, value] = pair else { continue };
            let Some(name) = flag.strip_prefix("--") else {
                continue;
            };
            let Some(arg) = simulate
                .get_arguments()
                .find(|a| a.get_long() == Some(name))
            else {
                problems.push(format!("{flag}: simulate has no such flag"));
                continue;
            };
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            // `--keys none|N|hot` names the choices; `--outage 10m@20m` has no default.
            if value.contains('|') || defaults.is_empty() {
                continue;
            }
            checked += 1;
            if defaults != [value.to_string()] {
                problems.push(format!(
                    "{flag}: the page says {value}, the command's default is {defaults:?}"
                ));
            }
        }
    }
    assert!(
        checked >= 6,
        "too few defaults found on the simulate page: {checked}"
    );
    assert!(
        problems.is_empty(),
        "docs/src/simulate.md:\n{}",
        problems.join("\n")
    );
}
