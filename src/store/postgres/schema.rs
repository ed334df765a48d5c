//! Where the outbox lives (schema, table prefix, the names derived from them) and the
//! migrations that create it: the files of `migrations/postgres/`, embedded in [`FILES`]
//! and made for the configured names by [`for_names`]; how they run in `schema/run.rs`
//! (one transaction each, under a lock timeout), and how `--print-sql` prints them in
//! `schema/script.rs`.
//!
//! # Adding a migration
//!
//! 1. Write `migrations/postgres/V{n}__{what}.sql` for the default names (schema
//!    `public`, prefix `outbox`), as the others are: a header saying what it locks on a
//!    table with rows, for how long, and how to run it online (its new indexes as
//!    commented `CREATE INDEX CONCURRENTLY` statements), then `BEGIN;`, the prelude, the
//!    `INSERT` of its version and name, its statements, `COMMIT;`. Name tables and indexes
//!    only as quoted identifiers (`"public"."outbox_…"`, `"outbox_…_idx"`): those are what
//!    [`for_names`] renames. Prefer statements that are cheap on a table with rows: `ADD
//!    COLUMN` with a constant default, and new indexes as `CREATE INDEX IF NOT EXISTS`
//!    under a name no earlier migration used (an index dropped and made again under the
//!    same name cannot be built ahead of it).
//! 2. Append it to [`FILES`]; a new table gets a field in [`Names`].
//! 3. Pin it in the test `shipped_migrations_keep_their_text` (the test prints the hash it
//!    computes when it differs): once released, not a byte of it changes.

use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;

use crate::message::ValidationError;
use crate::store::{StoreError, StoreOp};

use super::row::db_error;

pub(super) mod heads;
mod run;
mod script;

pub(crate) use run::{migrate, MigrationTimeouts};
pub(crate) use script::script;

/// The longest schema name: PostgreSQL truncates identifiers past 63 bytes.
pub const MAX_SCHEMA_LEN: usize = 63;
/// The longest table prefix: leaves room for the longest derived name
/// (`{prefix}_last_attempt_idx`) within PostgreSQL's 63 bytes.
pub const MAX_TABLE_PREFIX_LEN: usize = 40;

/// Checks a schema name or table prefix. Only lowercase letters, digits and `_`, starting
/// with a letter or `_`: such a name means the same quoted and unquoted, so an operator's
/// `psql` query finds the table PostgreSQL created, and it can be put into SQL text safely.
/// PostgreSQL keeps `pg_*` and `information_schema` for itself: it refuses to create a
/// `pg_` schema, and an outbox inside the catalog would be a disaster to clean up.
fn validate_not_a_system_schema(schema: &str) -> Result<(), ValidationError> {
    if schema == "information_schema" || schema.starts_with("pg_") {
        return Err(ValidationError::new(
            "schema",
            format!("{schema:?} is a PostgreSQL system schema (pg_* and information_schema are reserved)"),
        ));
    }
    Ok(())
}

pub(crate) fn validate_identifier(
    field: &str,
    value: &str,
    max_len: usize,
) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new(field, "is required"));
    }
    if value.len() > max_len {
        return Err(ValidationError::new(
            field,
            format!("is {} characters, over the limit of {max_len}", value.len()),
        ));
    }
    if value.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(ValidationError::new(
            field,
            "must start with a lowercase letter or '_'",
        ));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
    {
        return Err(ValidationError::new(
            field,
            format!("contains {bad:?}; use only lowercase letters, digits and '_'"),
        ));
    }
    Ok(())
}

/// The names one (schema, prefix) pair gives: built only from validated identifiers, so
/// they can be interpolated into SQL text.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) prefix: String,
    /// `"schema"."prefix_messages"`.
    pub(crate) messages: String,
    /// `"schema"."prefix_migrations"`.
    pub(crate) migrations: String,
    /// The LISTEN/NOTIFY channel: distinct per (schema, prefix), so two outboxes in one
    /// database (test schemas, two services) never wake each other.
    pub(crate) channel: String,
}

impl Names {
    pub(crate) fn new(schema: &str, prefix: &str) -> Result<Self, ValidationError> {
        validate_identifier("schema", schema, MAX_SCHEMA_LEN)?;
        validate_not_a_system_schema(schema)?;
        validate_identifier("table_prefix", prefix, MAX_TABLE_PREFIX_LEN)?;
        let readable = format!("{schema}.{prefix}");
        // Channel names are identifiers too (at most 63 bytes). A long pair falls back to a
        // hash that every process computes alike (FNV-1a, not std's unstable hasher).
        let channel = if readable.len() <= MAX_SCHEMA_LEN {
            readable
        } else {
            format!("outbox_relay_{:016x}", fnv1a64(readable.as_bytes()))
        };
        Ok(Self {
            schema: schema.to_owned(),
            prefix: prefix.to_owned(),
            messages: format!("\"{schema}\".\"{prefix}_messages\""),
            migrations: format!("\"{schema}\".\"{prefix}_migrations\""),
            channel,
        })
    }
}

pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One migration's file under `migrations/postgres/`, written for the default names.
pub(crate) struct File {
    pub(crate) version: i32,
    /// The file's text: its header, `BEGIN;`, the prelude, its body, `COMMIT;`.
    pub(crate) text: &'static str,
}

macro_rules! migration_file {
    ($version:literal, $name:literal) => {
        File {
            version: $version,
            text: include_str!(concat!("../../../migrations/postgres/", $name)),
        }
    };
}

/// Every migration's file, oldest first. Append new ones; never change a shipped one, not
/// even its comments: Flyway and `sqlx migrate` record a checksum of the whole file.
pub(crate) const FILES: &[File] = &[
    migration_file!(1, "V1__messages_table_and_its_indexes.sql"),
    migration_file!(2, "V2__key_heads.sql"),
    migration_file!(3, "V3__payload_as_json_text.sql"),
    migration_file!(4, "V4__key_indexes_by_status.sql"),
    // Migration 5: the columns every index compares, in the "C" collation.
    //
    // Every index of the relay's statements starts with `lane` and `target`, and the key
    // indexes go on with `ordering_key`, so every descent compares text. In the database's
    // default collation PostgreSQL compares text with the C library's `strcoll` (after copying
    // both strings to terminate them) unless that collation is literally "C" or "POSIX":
    // `C.UTF-8` and `en_US.UTF-8` both take the slow way. The relay only ever asks whether two
    // keys are equal, never how they sort, and equality in any deterministic collation is
    // byte equality, so "C" changes no answer; it only makes the comparison a `memcmp`.
    //
    // Measured with callgrind on PostgreSQL 15 (a `C.UTF-8` database, 100 calls of the cycle
    // function claiming 64 rows over 1,000 keys; `examples/benchmark/HISTORY.md`, "A keyed
    // cycle counted in instructions"): text comparison (`bttextcmp`) was 5.7 % of a keyed cycle's
    // instructions and 2 % of a keyless one's; this migration took 1.8 % off the keyed cycle
    // and 1.2 % off the keyless one (`strcoll` is cheap in `C.UTF-8`: a database in a
    // language's collation, such as `en_US.UTF-8`, should gain more; not measured).
    //
    // A query's comparison of such a column with a parameter or a literal takes the column's
    // collation (the column's is implicit, theirs the default), so every statement, and
    // every index predicate and key probe, keeps matching its index without a `COLLATE` of
    // its own. The collation changes no row: PostgreSQL rebuilds the indexes, not the table.
    // The `check_head` trigger names `ordering_key` in its `WHEN`, which PostgreSQL will not
    // let a column change under, so it is dropped and made again, as migration 2 made it.
    //
    migration_file!(5, "V5__key_columns_in_the_c_collation.sql"),
    // Migration 6: the producer contract, `"{schema}"."{prefix}_enqueue"(…)`, a function
    // any service calls inside its own transaction, in any language, to enqueue one
    // message with the checks (the default limits: the test
    // `the_producer_function_checks_the_default_limits`), dedupe, key-head marking and
    // wake-up of the Rust API (`docs/src/producers.md`).
    migration_file!(6, "V6__the_producer_contract.sql"),
    migration_file!(7, "V7__lane_control.sql"),
    migration_file!(8, "V8__listing_indexes.sql"),
    migration_file!(9, "V9__served_lanes.sql"),
    // Migration 10: fewer writes per message. `key_in_batch` marks a keyed row written
    // behind an earlier row of its key by the same INSERT, and `check_head` skips it: that
    // earlier row is live at commit, so the check had nothing to find, yet cost a PL/pgSQL
    // call and an UPDATE per row (43 % of a keyed bulk enqueue's backend time, `perf`).
    // And `delivered_idx` goes: every ack wrote an entry into it beside the one it writes
    // into `list_idx`, whose delivered range counts the same rows
    // (`examples/benchmark/HISTORY.md`, 2026-12-07).
    migration_file!(10, "V10__fewer_writes_per_message.sql"),
];

/// The default names the files are written for.
const DEFAULT_SCHEMA: &str = "public";
const DEFAULT_PREFIX: &str = "outbox";

/// `text`, written for the default names (schema `public`, prefix `outbox`), for `names`:
/// a migration's file, or a statement of `store/postgres/sql/`.
///
/// It renames, in one pass, only what a file spells for the default names: quoted
/// identifiers (`"public"`, `"outbox"`, `"outbox_…`), the key of the migrations' advisory
/// lock (`'outbox-relay migrate public'`), the notification channel (`'public.outbox'`) and
/// the key-head lock class (`(458410234, `, [`heads::head_lock_class`]). An unquoted word,
/// such as the column `outbox_id` or the setting `outbox_relay.head_lock_held`, is never
/// renamed; and in one pass, a new name that spells a default one is not renamed again.
pub(crate) fn for_names(names: &Names, text: &str) -> String {
    let class = |messages: &str| format!("({}, ", heads::head_lock_class(messages));
    let default_messages = format!("\"{DEFAULT_SCHEMA}\".\"{DEFAULT_PREFIX}_messages\"");
    let (schema, prefix) = (&names.schema, &names.prefix);
    let renames = [
        (format!("\"{DEFAULT_SCHEMA}\""), format!("\"{schema}\"")),
        (format!("\"{DEFAULT_PREFIX}\""), format!("\"{prefix}\"")),
        (format!("\"{DEFAULT_PREFIX}_"), format!("\"{prefix}_")),
        (
            format!("'outbox-relay migrate {DEFAULT_SCHEMA}'"),
            format!("'outbox-relay migrate {schema}'"),
        ),
        (
            format!("'{DEFAULT_SCHEMA}.{DEFAULT_PREFIX}'"),
            format!("'{}'", names.channel),
        ),
        (class(&default_messages), class(&names.messages)),
    ];
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut rest = text;
    'text: while !rest.is_empty() {
        for (from, to) in &renames {
            if let Some(after) = rest.strip_prefix(from.as_str()) {
                out.push_str(to);
                rest = after;
                continue 'text;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// The newest schema version this build knows.
pub(crate) fn latest_version() -> i32 {
    FILES.last().map_or(0, |f| f.version)
}

/// The schema version applied in the database, read without writing anything: `None`
/// when the schema or its migrations table does not exist.
pub(crate) async fn applied_version(
    pool: &PgPool,
    names: &Names,
) -> Result<Option<i32>, StoreError> {
    // A transaction, so that it works through a transaction pooler too (`call.rs`).
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| db_error(StoreOp::Migrate, e))?;
    let applied = read_applied(&mut tx, names).await?;
    Ok(applied.map(|versions| versions.into_iter().max().unwrap_or(0)))
}

/// The versions recorded in the migrations table, or `None` when it does not exist.
///
/// The schema's statements are unnamed (`persistent(false)`): they run once per migration
/// or store, and so work through a transaction pooler unchanged.
pub(crate) async fn read_applied(
    conn: &mut sqlx::PgConnection,
    names: &Names,
) -> Result<Option<Vec<i32>>, StoreError> {
    let op = StoreOp::Migrate;
    let has_migrations: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .persistent(false)
        .bind(&names.migrations)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| db_error(op, e))?;
    if !has_migrations {
        return Ok(None);
    }
    let versions: Vec<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM {}",
        names.migrations
    )))
    .persistent(false)
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| db_error(op, e))?;
    Ok(Some(versions))
}

/// Whether the function `name` (schema-qualified, quoted) exists.
pub(crate) async fn function_exists<'c>(
    executor: impl sqlx::PgExecutor<'c>,
    name: &str,
) -> Result<bool, StoreError> {
    sqlx::query_scalar("SELECT to_regproc($1) IS NOT NULL")
        .persistent(false)
        .bind(name)
        .fetch_one(executor)
        .await
        .map_err(|e| db_error(StoreOp::Migrate, e))
}

/// [`function_exists`] in a transaction of its own (what a transaction pooler needs).
pub(crate) async fn function_exists_in_pool(pool: &PgPool, name: &str) -> Result<bool, StoreError> {
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| db_error(StoreOp::Migrate, e))?;
    function_exists(&mut *tx, name).await
}

#[cfg(test)]
mod tests;
