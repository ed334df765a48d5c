//! The runbook's commands (`docs/src/operations/runbook.md`) do what it says: each one,
//! with its placeholders filled in (`LANE`, `TARGET`, a dead letter's `ID`) and its
//! `--config` pointed at a sandbox's SQLite file holding dead letters, exits 0. That they
//! parse is checked with every other command line of the docs (`tests/docs/commands.rs`);
//! here they run.

use crate::{dead_letter_through_the_store, free_port, test_config, Sandbox};

#[path = "../docs/markdown.rs"]
mod markdown;

const RUNBOOK: &str = "docs/src/operations/runbook.md";

/// Every `outbox-relay …` command of the runbook, as its words after the binary's name.
fn runbook_commands() -> Vec<(String, Vec<String>)> {
    let page = markdown::Page::read(RUNBOOK);
    let mut commands = Vec::new();
    let mut texts: Vec<(usize, String)> = page.code_spans();
    texts.extend(page.code_blocks().into_iter().flat_map(|block| {
        let start = block.start;
        block
            .body
            .lines()
            .map(move |line| (start, line.to_owned()))
            .collect::<Vec<_>>()
    }));
    for (offset, text) in texts {
        let Ok(words) = markdown::shell_words(&text) else {
            continue;
        };
        let Some(at) = words.iter().position(|w| w == "outbox-relay") else {
            continue;
        };
        if at == 0 || words[at - 1] == "--" {
            commands.push((page.at(offset), words[at + 1..].to_vec()));
        }
    }
    commands
}

/// A sandbox whose `relay.toml` names `relay.db`, with three dead letters on orders/audit
/// and one pending message; the dead letters' ids.
fn seeded() -> (Sandbox, String, Vec<String>) {
    let sandbox = Sandbox::new();
    let config = sandbox.write(
        "relay.toml",
        &test_config("sqlite:relay.db", "", free_port()),
    );
    let config = config.to_string_lossy().into_owned();
    let with_config = ["--config", config.as_str()];
    let mut ids: Vec<String> = (0..3)
        .map(|i| {
            let payload = format!("{{\"n\":{i}}}");
            sandbox.enqueue(&with_config, "orders", "audit", &["--payload", &payload])
        })
        .collect();
    dead_letter_through_the_store(&sandbox.path("relay.db"), "orders", 3);
    sandbox.enqueue(&with_config, "orders", "audit", &["--payload", "{}"]);
    ids.sort();
    (sandbox, config, ids)
}

#[test]
fn every_runbook_command_runs_against_a_sqlite_file() {
    let commands = runbook_commands();
    assert!(
        commands.len() >= 6,
        "too few commands found in {RUNBOOK}: {commands:?}"
    );
    let mut failed = Vec::new();
    for (at, words) in commands {
        if words.iter().any(|w| w == "…") {
            failed.push(format!(
                "{at}: outbox-relay {}: an elided part cannot be run",
                words.join(" ")
            ));
            continue;
        }
        let (sandbox, config, ids) = seeded();
        let mut args: Vec<String> = Vec::new();
        let mut words = words.into_iter();
        while let Some(word) = words.next() {
            match word.as_str() {
                "--config" => {
                    words.next(); // the docs' path: the sandbox's file instead
                    args.extend(["--config".to_owned(), config.clone()]);
                }
                "LANE" => args.push("orders".to_owned()),
                "TARGET" => args.push("audit".to_owned()),
                "ID" => args.push(ids[0].clone()),
                _ => args.push(word),
            }
        }
        if !args.iter().any(|a| a == "--config") {
            args.splice(0..0, ["--config".to_owned(), config.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sandbox.run(&args);
        if out.code != Some(0) {
            failed.push(format!(
                "{at}: outbox-relay {} exited {:?}: {}",
                args.join(" "),
                out.code,
                out.stderr.trim()
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "runbook commands that fail on a SQLite file with dead letters:\n{}",
        failed.join("\n")
    );
}
