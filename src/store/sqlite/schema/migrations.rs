//! The migrations: the files `migrations/sqlite/V{n}__*.sql`, oldest first, written for the
//! default table `outbox` and made into a configured table's by [`super::for_table`]. Each
//! file is one transaction (`BEGIN IMMEDIATE;` … `COMMIT;`) whose first two statements
//! create the migrations table and record the file's version. Append, never edit: a
//! database records the versions it has run, and a changed file never runs again on it.

use super::for_table;

/// `(name, text)` of the file `migrations/sqlite/{name}`.
macro_rules! migration {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../../../migrations/sqlite/", $name)),
        )
    };
}

/// Every file, oldest first: (name, text). The n-th is version n.
const FILES: &[(&str, &str)] = &[
    migration!("V1__the_outbox_table_and_its_indexes.sql"),
    migration!("V2__key_heads_and_counts.sql"),
    migration!("V3__a_key_index_of_live_rows.sql"),
    migration!("V4__the_producer_contract.sql"),
    migration!("V5__lane_control.sql"),
    migration!("V6__listing_indexes.sql"),
    migration!("V7__served_lanes.sql"),
    migration!("V8__listing_indexes_a_status_change_leaves_alone.sql"),
];

/// The statement that creates the migrations table (every file and every run starts with
/// it; it is idempotent).
pub(in crate::store::sqlite) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS \
     outbox_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)";

/// The newest schema version this build knows.
pub(in crate::store::sqlite) fn latest_version() -> i64 {
    FILES.len() as i64
}

/// The texts of every file, oldest first, as written.
pub(in crate::store::sqlite) fn texts() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|(_, text)| *text)
}

/// The statements of a file between its `BEGIN IMMEDIATE;` and its `COMMIT;`, for a caller
/// that runs them in a transaction of its own. Every file has both (a test checks it).
fn transaction_body(text: &str) -> &str {
    let body = text
        .split_once("\nBEGIN IMMEDIATE;\n")
        .map_or(text, |(_, body)| body);
    body.rsplit_once("\nCOMMIT;").map_or(body, |(body, _)| body)
}

/// The version after `applied` (the highest recorded, 0 for none) and its statements for
/// the table `table`, the migration recorded first; `None` when `applied` is the latest.
pub(in crate::store::sqlite) fn next_migration(table: &str, applied: i64) -> Option<(i64, String)> {
    let index = usize::try_from(applied).ok()?;
    let (_, text) = FILES.get(index)?;
    Some((applied + 1, for_table(transaction_body(text), table)))
}

/// The files after version `from` up to version `to`, for the table `table`: each a
/// transaction of its own, as the store runs them at open.
pub(in crate::store::sqlite) fn script(table: &str, from: i64, to: i64) -> String {
    FILES
        .iter()
        .zip(1..)
        .filter(|(_, version)| (from + 1..=to).contains(version))
        .map(|((_, text), _)| for_table(text, table))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests;
