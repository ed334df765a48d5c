//! The migrations as SQL: the files under `migrations/postgres/`, written for the default
//! names, are the source. A DBA runs them as they are (or `outbox-relay migrate
//! --print-sql` for other names), and the relay's `migrate` runs each file's body after
//! its own [`prelude`], so both apply the same statements and record the same version.

use super::run::MigrationTimeouts;
use super::{for_names, File, Names, FILES};
use crate::time::duration_millis;

/// The statements every migration transaction starts with: the statement timeout (which
/// also bounds the wait for another process's migration), the advisory lock that queues
/// migrating processes (keyed on the schema: two prefixes of one new schema race on
/// `CREATE SCHEMA`), then the lock timeout, which applies to the migration's own
/// statements and not to that queue.
pub(crate) fn prelude(names: &Names, timeouts: MigrationTimeouts) -> [String; 3] {
    [
        format!(
            "SET LOCAL statement_timeout = {}",
            duration_millis(timeouts.statement)
        ),
        format!(
            "SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate {}', 0))",
            names.schema
        ),
        format!(
            "SET LOCAL lock_timeout = {}",
            duration_millis(timeouts.lock)
        ),
    ]
}

/// What every file holds between its header and its body: `BEGIN;` and [`prelude`] for
/// the default names and timeouts.
const FILE_PRELUDE: &str = "BEGIN;
SET LOCAL statement_timeout = 900000;
SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay migrate public', 0));
SET LOCAL lock_timeout = 5000;
";

/// A file's header (comments) and body (its statements after the prelude, before
/// `COMMIT;`), for the default names.
fn split(file: &File) -> (&'static str, &'static str) {
    let (header, rest) = file
        .text
        .split_once(FILE_PRELUDE)
        .unwrap_or(("", file.text));
    (header, rest.strip_suffix("COMMIT;\n").unwrap_or(rest))
}

/// What `file` does after the prelude, for `names`: it records its version first, so a
/// second run fails at once on the migrations table's primary key with nothing changed;
/// the first migration also creates the schema and the migrations table.
pub(crate) fn body(names: &Names, file: &File) -> String {
    for_names(names, split(file).1)
}

/// What `file` does, from its header's first line
/// (`-- outbox-relay PostgreSQL schema migration 2: key heads: ….`).
pub(crate) fn name(file: &File) -> &'static str {
    let first = file.text.lines().next().unwrap_or_default();
    let name = first.split_once(": ").map_or(first, |(_, name)| name);
    name.strip_suffix('.').unwrap_or(name)
}

/// The SQL of the migrations after `from` up to `to` (both versions; `to` at most the
/// latest): their files for `names`, with `timeouts` in each prelude.
pub(crate) fn script(names: &Names, timeouts: MigrationTimeouts, from: i32, to: i32) -> String {
    FILES
        .iter()
        .filter(|f| f.version > from && f.version <= to)
        .map(|f| {
            let mut text = for_names(names, split(f).0);
            text.push_str("BEGIN;\n");
            for statement in prelude(names, timeouts) {
                text.push_str(&statement);
                text.push_str(";\n");
            }
            text.push_str(&body(names, f));
            text.push_str("COMMIT;\n");
            text
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests;
