//! The documentation against the code: the README and the user guide (`docs/src/`, an
//! mdBook) state nothing the code does not. Each check fails naming the page, the line and
//! what disagrees. In plain `cargo test`: the binary's command line is its own file
//! (`src/bin/outbox-relay/cli.rs`), included here with clap as a dev-dependency, so the
//! library's default features stay free of clap; the runbook's commands are also run
//! against a SQLite file by `tests/cli/runbook.rs`.
//!
//! - `commands.rs`: every `outbox-relay …` command line of the pages parses with the
//!   binary's command line; the daemon page's commands table names every command, with
//!   flags that exist.
//! - `config.rs`: the configuration reference names the keys the config parser knows, with
//!   the code's defaults; `environment.rs`: and the environment variables the code reads.
//! - `links.rs`: every relative link and anchor resolves; the table of contents lists
//!   every page of the guide.
//! - `metrics.rs`: the metrics table and the catalogue agree, row for metric; every
//!   metric name the pages use exists; every metric the sources record is catalogued.
//! - `migrations.rs`: the DBA page has one row per migration file of each store.
//! - `pages.rs`: the README's size, the Rust snippets compiled and never ignored, dated
//!   measurements on the benchmark page only, the conformance suite's count.

// The binary's command line, as the binary builds it. Only its parser is used here; what
// runs the commands is the binary's.
#[allow(dead_code)]
#[path = "../src/bin/outbox-relay/cli.rs"]
mod cli;
#[path = "docs/commands.rs"]
mod commands;
#[path = "docs/config.rs"]
mod config;
#[path = "docs/environment.rs"]
mod environment;
#[path = "docs/links.rs"]
mod links;
#[path = "docs/markdown.rs"]
mod markdown;
#[path = "docs/metrics.rs"]
mod metrics;
#[path = "docs/migrations.rs"]
mod migrations;
#[path = "docs/pages.rs"]
mod pages;

/// The guide's configuration reference.
const CONFIG_PAGE: &str = "docs/src/configuration.md";
