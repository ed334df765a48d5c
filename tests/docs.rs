//! The documentation against the code: the README and the user guide (`docs/src/`, an
//! mdBook) state nothing the code does not. Each check fails naming the page, the line and
//! what disagrees. With the default features; the command lines, the config keys, their
//! defaults and the environment variables are checked by the binary's own tests
//! (`src/bin/outbox-relay/docs.rs`, feature `cli`), which hold its command line, and the
//! runbook's commands are run against a SQLite file by `tests/cli/runbook.rs`.
//!
//! - `links.rs`: every relative link and anchor resolves; the table of contents lists
//!   every page of the guide.
//! - `metrics.rs`: the metrics table and the catalogue agree, row for metric; every
//!   metric name the pages use exists; every metric the sources record is catalogued.
//! - `migrations.rs`: the DBA page has one row per migration file of each store.
//! - `pages.rs`: the README's size, the Rust snippets compiled and never ignored, dated
//!   measurements on the benchmark page only, the conformance suite's count.

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
