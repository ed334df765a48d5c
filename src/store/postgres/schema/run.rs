//! Running the migrations: one transaction per migration, each under the advisory lock
//! that serialises migrating processes, a `statement_timeout` and a `lock_timeout`.
//!
//! The runner executes the text `script.rs` prints for a DBA (the prelude's `SET LOCAL`s
//! and advisory lock, then the body of the migration's file), one statement of the prelude
//! at a time so that a lock wait that expires is reported with the step it stopped.

use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;

use crate::store::{StoreError, StoreOp};

use super::super::row::db_error;
use super::script::{body, name, prelude};
use super::{Names, FILES};

/// How long a migration may wait and run ([`super::super::PostgresConfig`]'s
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

/// The schema was migrated by a newer build: this one does not know what its statements
/// would meet there.
#[derive(Debug, thiserror::Error)]
#[error(
    "the outbox {table} is at schema version {found}, newer than the version this build of \
     outbox-relay knows ({known}): a newer outbox-relay migrated it; run that version or a \
     later one"
)]
pub(crate) struct SchemaNewer {
    table: String,
    found: i32,
    known: i32,
}

/// The error for a schema at `found`, newer than this build's latest.
fn schema_newer(op: StoreOp, names: &Names, found: i32) -> StoreError {
    StoreError::database(
        op,
        SchemaNewer {
            table: names.messages.clone(),
            found,
            known: super::latest_version(),
        },
    )
}

/// Brings the schema up to date. Idempotent, and safe when several processes run it at
/// once: they queue on a transaction-scoped advisory lock, and each applies only what the
/// migrations table says is missing. The lock is keyed on the schema, not the prefix,
/// because `CREATE SCHEMA` of two prefixes in one new schema would race as well.
///
/// Each migration commits on its own, with the row that records it: a failed migration
/// leaves the ones before it applied and itself not at all. A schema newer than this build
/// (a version it does not know is recorded) is refused, naming both versions.
///
/// DDL runs only when something is missing, so a process whose role may not create
/// anything can still call this against an already migrated database.
///
/// `functions`: (name, `CREATE FUNCTION`) pairs of functions derived from this build's
/// statements (the cycle function, `sql/cycle.sql`), each created when the database lacks
/// it. Their names carry a hash of their text, so a function is never replaced under a
/// relay of another build: each build adds its own.
///
/// Every statement runs under `timeouts.statement` (index builds on a large table take
/// longer than the relay's own statement timeout, but never without bound), and after the
/// advisory lock (which may wait for another process's migration) under `timeouts.lock`:
/// a schema change waiting for a lock on the outbox table (behind a service's long
/// transaction that enqueued) would hold every later enqueue behind it in the lock queue.
/// It gives up after `timeouts.lock` instead, with an error naming the table and the
/// sessions holding locks on it, and nothing of that migration applied.
pub(crate) async fn migrate(
    pool: &PgPool,
    names: &Names,
    functions: &[(&str, &str)],
    timeouts: MigrationTimeouts,
) -> Result<(), StoreError> {
    loop {
        if in_transaction(pool, names, timeouts, Work::NextMigration).await? == Applied::Nothing {
            break;
        }
    }
    if !functions.is_empty() {
        in_transaction(pool, names, timeouts, Work::Functions(functions)).await?;
    }
    Ok(())
}

/// What one transaction of [`migrate`] does.
#[derive(Debug, Clone, Copy)]
enum Work<'f> {
    /// The lowest migration the database lacks.
    NextMigration,
    /// The functions the database lacks.
    Functions(&'f [(&'f str, &'f str)]),
}

/// What one transaction of [`migrate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    /// A migration (or a function).
    Something,
    /// Everything was there already.
    Nothing,
}

/// Runs `work` in a transaction of its own after the prelude every migration runs (the
/// statement timeout, the advisory lock, the lock timeout); a lock wait that expires
/// becomes a [`LockWaitExpired`] naming the step and the lock holders.
async fn in_transaction(
    pool: &PgPool,
    names: &Names,
    timeouts: MigrationTimeouts,
    work: Work<'_>,
) -> Result<Applied, StoreError> {
    let op = StoreOp::Migrate;
    let mut tx = pool.begin().await.map_err(|e| db_error(op, e))?;
    for statement in prelude(names, timeouts) {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error(op, e))?;
    }
    let mut step = "the migrations table".to_owned();
    let done = match work {
        Work::NextMigration => apply_next(&mut tx, names, &mut step).await,
        Work::Functions(functions) => create_functions(&mut tx, functions, &mut step).await,
    };
    match done {
        Ok(applied) => {
            tx.commit().await.map_err(|e| db_error(op, e))?;
            Ok(applied)
        }
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

/// Applies the lowest migration the database lacks, in `tx`: creates the schema and the
/// migrations table first if they are missing. `step` says what runs.
async fn apply_next(
    tx: &mut sqlx::PgConnection,
    names: &Names,
    step: &mut String,
) -> Result<Applied, StoreError> {
    let op = StoreOp::Migrate;
    // No migrations table: the first migration's body creates it and the schema
    // (`script.rs`), idempotently.
    let applied: Vec<i32> = super::read_applied(&mut *tx, names)
        .await?
        .unwrap_or_default();
    if let Some(&newest) = applied.iter().max() {
        if newest > super::latest_version() {
            return Err(schema_newer(op, names, newest));
        }
    }
    let Some(file) = FILES.iter().find(|f| !applied.contains(&f.version)) else {
        return Ok(Applied::Nothing);
    };
    *step = format!("migration {} ({})", file.version, name(file));
    sqlx::raw_sql(AssertSqlSafe(body(names, file)))
        .execute(&mut *tx)
        .await
        .map_err(|e| db_error(op, e))?;
    Ok(Applied::Something)
}

/// Creates each of `functions` the database lacks.
async fn create_functions(
    tx: &mut sqlx::PgConnection,
    functions: &[(&str, &str)],
    step: &mut String,
) -> Result<Applied, StoreError> {
    let mut applied = Applied::Nothing;
    for (name, create) in functions {
        *step = format!("creating the function {name}");
        if !super::function_exists(&mut *tx, name).await? {
            sqlx::raw_sql(AssertSqlSafe(create.to_string()))
                .execute(&mut *tx)
                .await
                .map_err(|e| db_error(StoreOp::Migrate, e))?;
            applied = Applied::Something;
        }
    }
    Ok(applied)
}

/// ", held by pid N (its modes, transaction open for Ns, state)" for every other session
/// holding a lock on the outbox's tables, or "" when none does (or the query fails: the
/// error it would decorate matters more).
async fn lock_holders(pool: &PgPool, names: &Names) -> String {
    /// pid, its lock modes, seconds its transaction is open, its state.
    type Holder = (i32, String, Option<f64>, Option<String>);
    let query = sqlx::query_as::<_, Holder>(
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
    .persistent(false);
    // In a transaction, unnamed: what a transaction pooler allows (`call.rs`).
    let holders: Result<Vec<Holder>, sqlx::Error> = match pool.begin().await {
        Ok(mut tx) => query.fetch_all(&mut *tx).await,
        Err(error) => Err(error),
    };
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
