//! Where the outbox lives (schema, table prefix, the names derived from them) and the
//! embedded migrations that create it.

use sqlx::postgres::PgPool;
use sqlx::{AssertSqlSafe, Row};

use crate::message::ValidationError;
use crate::store::StoreError;

use super::decode::db_error;

mod collation;
pub(super) mod heads;
pub(crate) mod key_queue;

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
            channel,
        })
    }
}

pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One schema change. Applied in version order, each once, recorded in the migrations table.
struct Migration {
    version: i32,
    name: &'static str,
    sql: fn(&Names) -> String,
}

/// Every migration, oldest first. Append new ones; never edit one that has shipped.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "messages table and its indexes",
        sql: messages_table,
    },
    Migration {
        version: 2,
        name: "key heads: a claim reads only heads, in index order",
        sql: heads::migration,
    },
    Migration {
        version: 3,
        name: "payload as json text: delivered byte for byte",
        sql: payload_as_json,
    },
    Migration {
        version: 4,
        name: "key indexes by status: a claimed keyed row gets one key index entry",
        sql: key_queue::migration,
    },
    Migration {
        version: 5,
        name: "key columns in the C collation: index comparisons are memcmp",
        sql: collation::migration,
    },
    Migration {
        version: 6,
        name: "lane control: fleet-wide pauses with who, when and why",
        sql: lane_control_table,
    },
];

/// Migration 6's SQL, `{lane_control}` standing for the table: one row per paused
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
    let op = "schema_version";
    let has_migrations: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(&names.migrations)
        .fetch_one(pool)
        .await
        .map_err(|e| db_error(op, e))?;
    if !has_migrations {
        return Ok(None);
    }
    let version: Option<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT max(version) FROM {}",
        names.migrations
    )))
    .fetch_one(pool)
    .await
    .map_err(|e| db_error(op, e))?;
    Ok(Some(version.unwrap_or(0)))
}

/// How long a migration may wait and run ([`super::PostgresConfig`]'s
/// `migration_lock_timeout` and `migration_statement_timeout`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MigrationTimeouts {
    /// `lock_timeout` of every statement after the advisory lock.
    pub(crate) lock: std::time::Duration,
    /// `statement_timeout` of every statement, the advisory lock's wait included.
    pub(crate) statement: std::time::Duration,
}

/// PostgreSQL's SQLSTATE for a lock wait that outlived `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A migration step gave up waiting for a lock: what it was, and who held what.
#[derive(Debug, thiserror::Error)]
#[error(
    "{step} waited longer than its lock_timeout ({timeout:?}) for a lock on {table}{holders}; \
     nothing was applied (enqueues queue behind a waiting schema change, so it gives up \
     rather than stall them): run the migration again once that transaction has ended, \
     or raise migration_lock_timeout"
)]
pub(crate) struct LockWaitExpired {
    step: String,
    timeout: std::time::Duration,
    table: String,
    /// ", held by …" from `pg_locks`, or empty when the holder has gone.
    holders: String,
    #[source]
    source: StoreError,
}

/// Brings the schema up to date. Idempotent, and safe when several processes run it at
/// once: they queue on a transaction-scoped advisory lock, and each applies only what the
/// migrations table says is missing. The lock is keyed on the schema, not the prefix,
/// because `CREATE SCHEMA` of two prefixes in one new schema would race as well.
///
/// DDL runs only when something is missing, so a process whose role may not create
/// anything can still call this against an already migrated database.
///
/// `functions`: (name, `CREATE FUNCTION`) pairs of functions derived from this build's
/// statements (the cycle function, `sql/cycle.rs`), each created when the database lacks
/// it. Their names carry a hash of their text, so a function is never replaced under a
/// relay of another build: each build adds its own.
///
/// Every statement runs under `timeouts.statement` (index builds on a large table take
/// longer than the relay's own statement timeout, but never without bound), and after the
/// advisory lock (which may wait for another process's migration) under `timeouts.lock`:
/// a schema change waiting for a lock on the outbox table (behind a service's long
/// transaction that enqueued) would hold every later enqueue behind it in the lock queue.
/// It gives up after `timeouts.lock` instead, with an error naming the table and the
/// sessions holding locks on it, and nothing applied.
pub(crate) async fn migrate(
    pool: &PgPool,
    names: &Names,
    functions: &[(&str, &str)],
    timeouts: MigrationTimeouts,
) -> Result<(), StoreError> {
    let op = "migrate";
    let mut tx = pool.begin().await.map_err(|e| db_error(op, e))?;
    sqlx::query(AssertSqlSafe(format!(
        "SET LOCAL statement_timeout = {}",
        crate::store::duration_millis(timeouts.statement)
    )))
    .execute(&mut *tx)
    .await
    .map_err(|e| db_error(op, e))?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("outbox-relay migrate {}", names.schema))
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error(op, e))?;
    sqlx::query(AssertSqlSafe(format!(
        "SET LOCAL lock_timeout = {}",
        crate::store::duration_millis(timeouts.lock)
    )))
    .execute(&mut *tx)
    .await
    .map_err(|e| db_error(op, e))?;
    let mut step = "the migrations table".to_owned();
    match apply(&mut tx, names, functions, &mut step).await {
        Ok(()) => tx.commit().await.map_err(|e| db_error(op, e)),
        Err(error) if error.sqlstate().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
            // Rolled back first: the lock query below takes a connection of its own.
            let _ = tx.rollback().await;
            let holders = lock_holders(pool, names).await;
            Err(StoreError::database(
                op,
                LockWaitExpired {
                    step,
                    timeout: timeouts.lock,
                    table: names.messages.clone(),
                    holders,
                    source: error,
                },
            ))
        }
        Err(error) => Err(error),
    }
}

/// The migrations and functions the database lacks, in `tx`; `step` says what runs.
async fn apply(
    tx: &mut sqlx::PgConnection,
    names: &Names,
    functions: &[(&str, &str)],
    step: &mut String,
) -> Result<(), StoreError> {
    let op = "migrate";
    let row = sqlx::query(
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS has_schema,
                to_regclass($2) IS NOT NULL AS has_migrations",
    )
    .bind(&names.schema)
    .bind(&names.migrations)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| db_error(op, e))?;
    let has_schema: bool = row.try_get("has_schema").map_err(|e| db_error(op, e))?;
    let has_migrations: bool = row.try_get("has_migrations").map_err(|e| db_error(op, e))?;
    if !has_schema {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS \"{}\"",
            names.schema
        )))
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error(op, e))?;
    }
    if !has_migrations {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {} (
                version    integer     PRIMARY KEY,
                name       text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
            names.migrations
        )))
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error(op, e))?;
    }
    let applied: Vec<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM {}",
        names.migrations
    )))
    .fetch_all(&mut *tx)
    .await
    .map_err(|e| db_error(op, e))?;
    for migration in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        *step = format!("migration {} ({})", migration.version, migration.name);
        sqlx::raw_sql(AssertSqlSafe((migration.sql)(names)))
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error(op, e))?;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (version, name) VALUES ($1, $2)",
            names.migrations
        )))
        .bind(migration.version)
        .bind(migration.name)
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error(op, e))?;
    }
    for (name, create) in functions {
        *step = format!("creating the function {name}");
        if !function_exists(&mut *tx, name).await? {
            sqlx::raw_sql(AssertSqlSafe(create.to_string()))
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error(op, e))?;
        }
    }
    Ok(())
}

/// ", held by pid N (its modes, transaction open for Ns, state)" for every other session
/// holding a lock on the outbox's tables, or "" when none does (or the query fails: the
/// error it would decorate matters more).
async fn lock_holders(pool: &PgPool, names: &Names) -> String {
    /// pid, its lock modes, seconds its transaction is open, its state.
    type Holder = (i32, String, Option<f64>, Option<String>);
    let holders: Result<Vec<Holder>, sqlx::Error> = sqlx::query_as(
        "SELECT l.pid, string_agg(DISTINCT l.mode, ', '),
                    max(extract(epoch FROM now() - a.xact_start))::float8,
                    max(a.state)
               FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.granted AND l.pid <> pg_backend_pid()
                AND l.relation IN (to_regclass($1), to_regclass($2))
              GROUP BY l.pid
              ORDER BY l.pid",
    )
    .bind(&names.messages)
    .bind(&names.migrations)
    .fetch_all(pool)
    .await;
    let holders = holders.unwrap_or_default();
    if holders.is_empty() {
        return String::new();
    }
    let described: Vec<String> = holders
        .iter()
        .map(|(pid, mode, open_for, state)| {
            let open_for = open_for.map_or(String::new(), |s| {
                format!(", transaction open for {:.0}s", s.max(0.0))
            });
            let state = state.as_deref().map_or(String::new(), |s| format!(", {s}"));
            format!("pid {pid} ({mode}{open_for}{state})")
        })
        .collect();
    format!(", held by {}", described.join(", "))
}

/// Whether the function `name` (schema-qualified, quoted) exists.
pub(crate) async fn function_exists<'c>(
    executor: impl sqlx::PgExecutor<'c>,
    name: &str,
) -> Result<bool, StoreError> {
    sqlx::query_scalar("SELECT to_regproc($1) IS NOT NULL")
        .bind(name)
        .fetch_one(executor)
        .await
        .map_err(|e| db_error("migrate", e))
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
        let shipped: [(i32, u64); 5] = [
            (1, 0x67b8_1daa_4699_16a1),
            (2, 0xed73_9205_d9c5_b178),
            (3, 0x6f99_c341_65e3_d124),
            (4, 0xd27c_721d_832b_3a2b),
            (5, 0x1599_b8c3_754f_7f16),
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
