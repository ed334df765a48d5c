//! Migration 5: the columns every index compares, in the "C" collation.
//!
//! Every index of the relay's statements starts with `lane` and `target`, and the key
//! indexes go on with `ordering_key`, so every descent compares text. In the database's
//! default collation PostgreSQL compares text with the C library's `strcoll` (after copying
//! both strings to terminate them) unless that collation is literally "C" or "POSIX":
//! `C.UTF-8` and `en_US.UTF-8` both take the slow way. The relay only ever asks whether two
//! keys are equal, never how they sort, and equality in any deterministic collation is
//! byte equality, so "C" changes no answer; it only makes the comparison a `memcmp`.
//!
//! Measured with callgrind on PostgreSQL 15 (a `C.UTF-8` database, 100 calls of the cycle
//! function claiming 64 rows over 1,000 keys; `examples/benchmark/HISTORY.md`, "A keyed
//! cycle counted in instructions"): text comparison (`bttextcmp`) was 5.7 % of a keyed cycle's
//! instructions and 2 % of a keyless one's; this migration took 1.8 % off the keyed cycle
//! and 1.2 % off the keyless one (`strcoll` is cheap in `C.UTF-8`: a database in a
//! language's collation, such as `en_US.UTF-8`, should gain more; not measured).
//!
//! A query's comparison of such a column with a parameter or a literal takes the column's
//! collation (the column's is implicit, theirs the default), so every statement, and
//! every index predicate and key probe, keeps matching its index without a `COLLATE` of
//! its own. The collation changes no row: PostgreSQL rebuilds the indexes, not the table.
//! The `check_head` trigger names `ordering_key` in its `WHEN`, which PostgreSQL will not
//! let a column change under, so it is dropped and made again, as migration 2 made it.

use super::Names;

/// The columns compared by the relay's indexes and probes.
const COLUMNS: [&str; 5] = ["lane", "target", "ordering_key", "dedupe_key", "status"];

/// Migration 5's SQL.
pub(super) fn migration(n: &Names) -> String {
    let (t, p) = (&n.messages, &n.prefix);
    let alter: Vec<String> = COLUMNS
        .iter()
        .map(|c| format!("ALTER COLUMN {c} TYPE text COLLATE \"C\""))
        .collect();
    format!(
        r#"
DROP TRIGGER IF EXISTS "{p}_check_head" ON {t};
ALTER TABLE {t} {alter};
{trigger}
"#,
        alter = alter.join(",\n    "),
        trigger = super::heads::check_head_trigger(n),
    )
}
