//! The documentation against the binary (tests only): every `outbox-relay …` command line
//! of the README and the guide parses with this command line, and every flag the commands
//! table names exists (`commands.rs`); the configuration reference
//! (`docs/src/configuration.md`) names the keys the config parser knows, with the defaults
//! the code has (`config.rs`), and the environment variables the code reads
//! (`environment.rs`). The rest of the checks (links, metrics, the migrations page) are
//! `tests/docs.rs`, whose Markdown reader these share.

#[path = "../../../tests/docs/markdown.rs"]
mod markdown;

mod commands;
mod config;
mod environment;

/// The guide's configuration reference.
const CONFIG_PAGE: &str = "docs/src/configuration.md";
