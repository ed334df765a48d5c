//! The migrations as SQL a DBA runs: each in its own transaction, with the text the relay
//! itself runs (`run.rs` executes [`prelude`] and [`body`]), so a file checked in under
//! `migrations/postgres/`, a `psql -f`, a Flyway or goose run and the relay's own `migrate`
//! apply the same statements and record the same version.

use super::run::MigrationTimeouts;
use super::{Migration, Names, MIGRATIONS};
use crate::store::duration_millis;

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

/// What one migration does, after the prelude: it records its version first, so a second
/// run of the same file fails at once on the migrations table's primary key with nothing
/// changed; the first migration also creates the schema and the migrations table.
pub(crate) fn body(names: &Names, migration: &Migration) -> String {
    let mut text = String::new();
    if migration.version == 1 {
        text.push_str(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
CREATE TABLE IF NOT EXISTS {migrations} (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
",
            schema = names.schema,
            migrations = names.migrations,
        ));
    }
    text.push_str(&format!(
        "INSERT INTO {} (version, name) VALUES ({}, '{}');\n",
        names.migrations,
        migration.version,
        migration.name.replace('\'', "''"),
    ));
    text.push_str((migration.sql)(names).trim_matches('\n'));
    text.push('\n');
    text
}

/// The SQL of the migrations after `from` up to `to` (both versions; `to` at most the
/// latest), each in a transaction of its own, with a header saying what it locks and how
/// to run it on a table with rows.
pub(crate) fn script(names: &Names, timeouts: MigrationTimeouts, from: i32, to: i32) -> String {
    MIGRATIONS
        .iter()
        .filter(|m| m.version > from && m.version <= to)
        .map(|m| file(names, timeouts, m))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One migration's file.
fn file(names: &Names, timeouts: MigrationTimeouts, migration: &Migration) -> String {
    let mut text = format!(
        "-- outbox-relay PostgreSQL schema migration {version}: {name}.
-- For schema \"{schema}\", table prefix \"{prefix}\" (`outbox-relay migrate --print-sql` prints
-- it for yours). Generated from the code, which runs the same statements; do not edit.
-- Run in order, each once: a second run fails on the version it records, changing nothing.
--
{locks}
",
        version = migration.version,
        name = migration.name,
        schema = names.schema,
        prefix = names.prefix,
        locks = comment(migration.locks),
    );
    let online = online_preparation(names, migration);
    if !online.is_empty() {
        text.push_str(
            "--\n-- On a table with rows, build its new indexes first without blocking writes, one\n\
             -- statement at a time outside a transaction (a build that fails leaves an INVALID\n\
             -- index: DROP INDEX CONCURRENTLY it and build it again); this migration's\n\
             -- CREATE INDEX IF NOT EXISTS then finds them built:\n",
        );
        for statement in &online {
            text.push_str(&comment(&format!("{statement};")));
            text.push('\n');
        }
    }
    text.push_str("BEGIN;\n");
    for statement in prelude(names, timeouts) {
        text.push_str(&statement);
        text.push_str(";\n");
    }
    text.push_str(&body(names, migration));
    text.push_str("COMMIT;\n");
    text
}

/// `text` as SQL comment lines.
fn comment(text: &str) -> String {
    text.lines()
        .map(|line| {
            if line.is_empty() {
                "--".to_owned()
            } else {
                format!("-- {line}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The statements that prepare `migration` online: its column additions (`ADD COLUMN IF
/// NOT EXISTS`, a catalog change when the default is a constant) and, as `CREATE INDEX
/// CONCURRENTLY`, each index it creates under a name it does not drop first (an index it
/// drops and makes again under the same name cannot be built ahead of it).
pub(crate) fn online_preparation(names: &Names, migration: &Migration) -> Vec<String> {
    let sql = (migration.sql)(names);
    let mut prepared = Vec::new();
    let mut rest = sql.as_str();
    while let Some(end) = rest.find(';') {
        let statement = strip_comments(&rest[..end]);
        rest = &rest[end + 1..];
        if statement.starts_with("ALTER TABLE") && statement.contains("ADD COLUMN IF NOT EXISTS") {
            prepared.push(statement);
        } else if let Some(after) = statement.strip_prefix("CREATE INDEX IF NOT EXISTS ") {
            let index = after.split_whitespace().next().unwrap_or_default();
            let dropped = format!("DROP INDEX IF EXISTS \"{}\".{index}", names.schema);
            if !sql.contains(&dropped) {
                prepared.push(format!("CREATE INDEX CONCURRENTLY IF NOT EXISTS {after}"));
            }
        }
    }
    prepared
}

/// A statement without its `--` comment lines, trimmed.
fn strip_comments(statement: &str) -> String {
    statement
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts() -> MigrationTimeouts {
        MigrationTimeouts {
            lock: std::time::Duration::from_secs(5),
            statement: std::time::Duration::from_secs(900),
        }
    }

    #[test]
    fn each_migration_is_a_transaction_that_records_its_version_first() {
        let names = Names::new("app", "box").unwrap();
        let text = script(&names, timeouts(), 0, super::super::latest_version());
        assert_eq!(
            text.matches("\nBEGIN;\n").count(),
            MIGRATIONS.len(),
            "{text}"
        );
        assert_eq!(text.matches("COMMIT;\n").count(), MIGRATIONS.len());
        assert_eq!(
            text.matches("SET LOCAL lock_timeout = 5000").count(),
            MIGRATIONS.len()
        );
        let first = script(&names, timeouts(), 0, 1);
        let insert = first
            .find("INSERT INTO \"app\".\"box_migrations\"")
            .unwrap();
        assert!(
            first
                .find("CREATE TABLE IF NOT EXISTS \"app\".\"box_messages\"")
                .unwrap()
                > insert
        );
        assert!(first.contains("CREATE SCHEMA IF NOT EXISTS \"app\""));
        assert!(!script(&names, timeouts(), 2, 4).contains("migration 5:"));
        assert!(script(&names, timeouts(), 2, 4).contains("migration 4:"));
        let latest = super::super::latest_version();
        assert!(script(&names, timeouts(), latest, latest).is_empty());
    }

    #[test]
    fn online_preparation_builds_only_new_index_names_concurrently() {
        let names = Names::new("public", "outbox").unwrap();
        let v2 = online_preparation(&names, &MIGRATIONS[1]);
        assert!(
            v2[0].contains("ADD COLUMN IF NOT EXISTS key_head"),
            "{v2:?}"
        );
        assert!(v2[1..]
            .iter()
            .all(|s| s.starts_with("CREATE INDEX CONCURRENTLY IF NOT EXISTS")));
        assert!(v2.iter().any(|s| s.contains("\"outbox_head_idx\"")));
        let v4 = online_preparation(&names, &MIGRATIONS[3]);
        assert_eq!(v4.len(), 1, "{v4:?}");
        assert!(v4[0].contains("\"outbox_key_pending_idx\""));
        assert!(online_preparation(&names, &MIGRATIONS[4]).is_empty());
    }
}
