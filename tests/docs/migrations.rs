//! The DBA page (`docs/src/migrations.md`) has one row per migration file of each store,
//! and each PostgreSQL row names every lock its file's header names.

use std::collections::BTreeMap;

use crate::markdown::{root, table, Page};

const PAGE: &str = "docs/src/migrations.md";

/// Each store's migrations directory and the heading of its table on the page.
const STORES: &[(&str, &str)] = &[
    ("postgres", "PostgreSQL migrations"),
    ("sqlite", "SQLite migrations"),
    ("mysql", "MySQL and MariaDB migrations"),
];

/// The migration files of a store: version → the file's text.
fn files(store: &str) -> BTreeMap<u32, String> {
    let dir = root().join("migrations").join(store);
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let version = name
            .strip_prefix('V')
            .and_then(|rest| rest.split("__").next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}: not V<n>__<what>.sql", path.display()));
        files.insert(
            version,
            std::fs::read_to_string(&path).expect("a migration file"),
        );
    }
    files
}

/// The locks a PostgreSQL migration's header names (its comment lines before `BEGIN;`).
fn header_locks(sql: &str) -> Vec<&'static str> {
    let header: String = sql
        .lines()
        .take_while(|line| line.starts_with("--"))
        .filter(|line| !line.contains("CREATE INDEX CONCURRENTLY") && !line.contains("ALTER TABLE"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut locks = Vec::new();
    if header.contains("ACCESS EXCLUSIVE") {
        locks.push("ACCESS EXCLUSIVE");
    }
    if header.replace("ACCESS EXCLUSIVE", "").contains("SHARE") {
        locks.push("SHARE");
    }
    if header.contains("nothing is locked") || header.contains("nothing that exists is locked") {
        locks.push("nothing");
    }
    locks
}

#[test]
fn the_dba_page_has_one_row_per_migration_of_each_store() {
    let page = Page::read(PAGE);
    let mut problems = Vec::new();
    for (store, heading) in STORES {
        let Some(section) = page.section(heading) else {
            problems.push(format!(
                "no heading {heading:?}, so no row for migrations/{store}/"
            ));
            continue;
        };
        let files = files(store);
        let mut rows: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for row in table(section).into_iter().skip(1) {
            let version: u32 = row[0]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| {
                    panic!("{PAGE}, {heading}: a row that names no version: {row:?}")
                });
            if rows.insert(version, row).is_some() {
                problems.push(format!("{heading}: migration {version} has two rows"));
            }
        }
        for version in files.keys() {
            if !rows.contains_key(version) {
                problems.push(format!(
                    "{heading}: migration {version} (migrations/{store}/) has no row"
                ));
            }
        }
        for version in rows.keys() {
            if !files.contains_key(version) {
                problems.push(format!(
                    "{heading}: a row for migration {version}, which has no file"
                ));
            }
        }
        if *store == "postgres" {
            for (version, sql) in &files {
                let Some(row) = rows.get(version) else {
                    continue;
                };
                let text = row.join(" | ");
                for lock in header_locks(sql) {
                    if !text.contains(lock) {
                        problems.push(format!(
                            "{heading}: migration {version}'s file names {lock} in its header; its row does not: {text}"
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{PAGE}:\n{}", problems.join("\n"));
}

#[test]
fn every_postgres_migration_header_names_its_locks() {
    for (version, sql) in files("postgres") {
        assert!(
            !header_locks(&sql).is_empty(),
            "migration {version}'s header names no lock and not \"nothing is locked\""
        );
    }
}
