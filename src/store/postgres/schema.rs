//! Where the outbox lives (schema, table prefix, the names derived from them) and the
//! embedded migrations that create it: [`MIGRATIONS`] here, how they run in `schema/run.rs`
//! (one transaction each, under a lock timeout), and the SQL a DBA runs instead in
//! `schema/script.rs` (the same statements; checked in under `migrations/postgres/`).
//!
//! # Adding a migration
//!
//! 1. Write its SQL as a `fn(&Names) -> String` (in a file of its own under `schema/` when
//!    it needs explaining), naming tables only through [`Names`]; a new table gets a field
//!    there. Prefer statements that are cheap on a table with rows: `ADD COLUMN` with a
//!    constant default, and new indexes as `CREATE INDEX IF NOT EXISTS` under a name no
//!    earlier migration used (the file's online preparation builds them `CONCURRENTLY`
//!    first; an index dropped and made again under the same name cannot be).
//! 2. Append a [`Migration`] to [`MIGRATIONS`] with the next version, a name, and `locks`:
//!    what it locks on a table with rows, for how long, and how to run it online.
//! 3. Pin its text in the test `shipped_migrations_keep_their_text` (the test prints the
//!    hash it computes when it differs).
//! 4. Regenerate the checked-in files and commit them: `OUTBOX_BLESS=1 cargo test
//!    --all-features --test migration_files` writes `migrations/postgres/V{n}__{slug}.sql`
//!    (and SQLite's); without `OUTBOX_BLESS` the test fails when a file differs from the code.

use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;

use crate::message::ValidationError;
use crate::store::{StoreError, StoreOp};

use super::decode::db_error;

mod collation;
pub(super) mod heads;
pub(crate) mod key_queue;
pub(crate) mod producer;
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
    /// `"schema"."prefix_promote_heads"`: see `schema/heads.rs`.
    pub(crate) promote_heads: String,
    /// `"schema"."prefix_lane_control"`: the fleet-wide lane pauses (migration 6).
    pub(crate) lane_control: String,
    /// `"schema"."prefix_served_lanes"`: until when a relay serves each lane (migration 9).
    pub(crate) served_lanes: String,
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
            promote_heads: format!("\"{schema}\".\"{prefix}_promote_heads\""),
            lane_control: format!("\"{schema}\".\"{prefix}_lane_control\""),
            served_lanes: format!("\"{schema}\".\"{prefix}_served_lanes\""),
            channel,
        })
    }
}

pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One schema change. Applied in version order, each once, in a transaction of its own,
/// recorded in the migrations table.
pub(crate) struct Migration {
    pub(crate) version: i32,
    /// What it does, recorded with the version.
    pub(crate) name: &'static str,
    pub(crate) sql: fn(&Names) -> String,
    /// What it locks on a table with rows, and how to run it online (the file's header).
    pub(crate) locks: &'static str,
}

/// Every migration, oldest first. Append new ones; never edit one that has shipped.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "messages table and its indexes",
        sql: messages_table,
        locks: "Creates the tables and their indexes: nothing that exists is locked.",
    },
    Migration {
        version: 2,
        name: "key heads: a claim reads only heads, in index order",
        sql: heads::migration,
        locks: "Adds key_head, a catalog change; marks the keyed pending rows queued behind
their key's head (row locks, one UPDATE over them); builds eight partial indexes under
a SHARE lock (enqueues, claims and acks wait for the builds, reads do not); drops three
indexes and makes the key-head functions and trigger (brief ACCESS EXCLUSIVE locks).",
    },
    Migration {
        version: 3,
        name: "payload as json text: delivered byte for byte",
        sql: payload_as_json,
        locks: "Rewrites the table (payload from jsonb to json) under an ACCESS EXCLUSIVE lock:
nothing reads or writes the outbox until it commits, about as long as a full copy of the
table and its indexes. There is no online form: run it in a window without enqueues,
with relays stopped, or on a table purged of delivered rows first.",
    },
    Migration {
        version: 4,
        name: "key indexes by status: a claimed keyed row gets one key index entry",
        sql: key_queue::migration,
        locks: "Builds key_pending_idx, and rebuilds key_claimed_idx, pending_idx and lease_idx
under their names, each under a SHARE lock (enqueues, claims and acks wait for the
builds, reads do not; each build reads the table once). Only key_pending_idx can be
built ahead of it; for the others, run it when enqueues can wait that long.",
    },
    Migration {
        version: 5,
        name: "key columns in the C collation: index comparisons are memcmp",
        sql: collation::migration,
        locks: "Changes five columns' collation to \"C\" under an ACCESS EXCLUSIVE lock: the
rows stay as they are, every index over those columns is rebuilt, and nothing reads or
writes the outbox until it commits. There is no online form: run it in a window without
enqueues, with relays stopped.",
    },
    Migration {
        version: 6,
        name: "the producer contract: an enqueue function for any language",
        sql: producer::migration,
        locks: "Creates one function: nothing is locked.",
    },
    Migration {
        version: 7,
        name: "lane control: fleet-wide pauses with who, when and why",
        sql: lane_control_table,
        locks: "Creates one table: nothing is locked.",
    },
    Migration {
        version: 8,
        name: "listing indexes: every page of a lane reads an index in enqueue order",
        sql: list_indexes,
        locks: "Builds list_idx and list_key_idx, each under a SHARE lock (enqueues, claims
and acks wait for the builds, reads do not; each build reads the table once). Both can
be built ahead of it without blocking writes, as shown below.",
    },
    Migration {
        version: 9,
        name: "served lanes: which lanes a running relay serves, for the lanes nobody serves",
        sql: served_lanes_table,
        locks: "Creates one table: nothing is locked.",
    },
];

/// Migration 9's SQL: until when a running relay serves each (lane, target), renewed by
/// every relay (`store/served.rs`; `store/postgres/served.rs`).
fn served_lanes_table(n: &Names) -> String {
    format!(
        r#"
CREATE TABLE IF NOT EXISTS {} (
    lane          text COLLATE "C" NOT NULL,
    target        text COLLATE "C" NOT NULL,
    served_until  timestamptz NOT NULL,
    PRIMARY KEY (lane, target)
);
"#,
        n.served_lanes
    )
}

/// Migration 8's SQL: the indexes the listing (`store/postgres/list.rs`) reads, so a page
/// of a lane costs the page and not the lane, whatever its status mix.
fn list_indexes(n: &Names) -> String {
    let (t, p) = (&n.messages, &n.prefix);
    format!(
        r#"
-- A lane's messages of each status in enqueue order: a page of one status is one range,
-- a page of every status the ranges merged in seq order. Its predicate holds for every
-- row (seq counts from 1) and is stated only by the listing, so no statement of the relay
-- (a claim, a key probe) can pick this index instead of the narrow ones it was planned on.
CREATE INDEX IF NOT EXISTS "{p}_list_idx" ON {t} (lane, target, status, seq)
    WHERE seq > 0;
-- A key's messages of each status in enqueue order: the listing by ordering key, a range
-- per status like list_idx's, with the same predicate for the same reason. A row without
-- a key has no entry.
CREATE INDEX IF NOT EXISTS "{p}_list_key_idx" ON {t} (lane, target, ordering_key, status, seq)
    WHERE seq > 0 AND ordering_key IS NOT NULL;
"#
    )
}

/// Migration 7's SQL, `{lane_control}` standing for the table: one row per paused
/// (lane, target), read by every relay on the database (`store/lane_control.rs`).
pub(crate) const LANE_CONTROL_TABLE: &str = "CREATE TABLE IF NOT EXISTS {lane_control} (
    lane       text COLLATE \"C\" NOT NULL,
    target     text COLLATE \"C\" NOT NULL,
    paused_by  text NOT NULL,
    reason     text,
    paused_at  timestamptz NOT NULL,
    PRIMARY KEY (lane, target)
);";

fn lane_control_table(n: &Names) -> String {
    LANE_CONTROL_TABLE.replace("{lane_control}", &n.lane_control)
}

/// `jsonb` rewrites what it stores (keys are re-sorted, duplicate keys collapse, whitespace
/// and number spelling are normalised), and a relay delivers the bytes it was given. `json` keeps the
/// text exactly and still refuses what is not JSON, for rows written by hand. Rows already
/// stored keep the normalised text `jsonb` gave them. This rewrites the table under an
/// exclusive lock, once.
fn payload_as_json(n: &Names) -> String {
    let t = &n.messages;
    format!("ALTER TABLE {t} ALTER COLUMN payload TYPE json USING payload::text::json;")
}

fn messages_table(n: &Names) -> String {
    let (t, p) = (&n.messages, &n.prefix);
    format!(
        r#"
CREATE TABLE IF NOT EXISTS {t} (
    outbox_id        uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The strict total order of messages: claims and lists order by it, never by id.
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    lane             text        NOT NULL,
    target           text        NOT NULL,
    payload          jsonb       NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{{}}',
    ordering_key     text,
    dedupe_key       text,
    status           text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'claimed', 'delivered', 'dead_letter')),
    -- bigint: max_attempts is a u32, past int's range.
    attempt_count    bigint      NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    max_attempts     bigint      NOT NULL CHECK (max_attempts > 0),
    available_at     timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    claim_token      uuid,
    lease_expires_at timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    CHECK ((status = 'claimed') = (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS "{p}_seq_idx" ON {t} (seq);
-- Claims scan only live rows: a long delivered or dead tail costs them nothing.
CREATE INDEX IF NOT EXISTS "{p}_claimable_idx" ON {t} (lane, target, available_at, seq)
    WHERE status IN ('pending', 'claimed');
-- Per-key head lookup: is an earlier row of this key still live?
CREATE INDEX IF NOT EXISTS "{p}_key_live_idx" ON {t} (lane, target, ordering_key, seq)
    WHERE status IN ('pending', 'claimed') AND ordering_key IS NOT NULL;
-- Under OrderingPolicy::Block a dead-lettered earlier row holds its key.
CREATE INDEX IF NOT EXISTS "{p}_key_dead_idx" ON {t} (lane, target, ordering_key, seq)
    WHERE status = 'dead_letter' AND ordering_key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS "{p}_dedupe_idx" ON {t} (lane, target, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
-- Purge finds finished rows by age without reading live ones.
CREATE INDEX IF NOT EXISTS "{p}_finished_idx" ON {t} (updated_at)
    WHERE status IN ('delivered', 'dead_letter');
"#
    )
}

/// The newest schema version this build knows.
pub(crate) fn latest_version() -> i32 {
    MIGRATIONS.iter().map(|m| m.version).max().unwrap_or(0)
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
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_checked_and_named() {
        assert!(Names::new("public", "outbox").is_ok());
        assert!(Names::new("_t1", "o_2").is_ok());
        for (schema, prefix, field) in [
            ("", "outbox", "schema"),
            ("Public", "outbox", "schema"),
            ("public", "out-box", "table_prefix"),
            ("public", "1outbox", "table_prefix"),
            ("pub\"lic", "outbox", "schema"),
        ] {
            assert_eq!(Names::new(schema, prefix).unwrap_err().field, field);
        }
        let long = "x".repeat(MAX_TABLE_PREFIX_LEN + 1);
        assert_eq!(
            Names::new("public", &long).unwrap_err().field,
            "table_prefix"
        );
    }

    #[test]
    fn long_names_get_a_stable_short_channel() {
        let names = Names::new(&"s".repeat(60), "outbox").unwrap();
        assert!(names.channel.len() <= MAX_SCHEMA_LEN);
        assert_eq!(
            names.channel,
            Names::new(&"s".repeat(60), "outbox").unwrap().channel
        );
        assert_eq!(
            Names::new("public", "outbox").unwrap().channel,
            "public.outbox"
        );
    }

    /// A shipped migration runs once per database, so its text must never change: a
    /// database migrated by an older build would differ from a new one. Append a migration
    /// instead. (FNV-1a of each migration's SQL for `public.outbox`.)
    #[test]
    fn shipped_migrations_keep_their_text() {
        let names = Names::new("public", "outbox").unwrap();
        let shipped: [(i32, u64); 8] = [
            (1, 0x67b8_1daa_4699_16a1),
            (2, 0xed73_9205_d9c5_b178),
            (3, 0x6f99_c341_65e3_d124),
            (4, 0xd27c_721d_832b_3a2b),
            (5, 0x1599_b8c3_754f_7f16),
            (6, 0xc5ee_6675_6e39_f4c4),
            (7, 0x1889_3a5d_379e_38f0),
            (8, 0xa8a1_6316_647c_469e),
        ];
        for (version, hash) in shipped {
            let migration = MIGRATIONS.iter().find(|m| m.version == version).unwrap();
            let now = fnv1a64((migration.sql)(&names).as_bytes());
            assert_eq!(
                now, hash,
                "migration {version}'s text changed (now {now:#x})"
            );
        }
    }

    #[test]
    fn system_schemas_are_refused() {
        for schema in ["information_schema", "pg_catalog", "pg_toast", "pg_outbox"] {
            let err = Names::new(schema, "outbox").unwrap_err();
            assert_eq!(err.field, "schema", "{schema}");
            assert!(err.reason.contains("system schema"), "{schema}: {err}");
        }
        assert!(Names::new("pgx", "outbox").is_ok());
    }
}
