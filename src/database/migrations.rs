//! The schema as a DBA sees it through a URL: which version the database is at against
//! this build ([`schema_state`], for `outbox-relay migrate --check`), and the SQL of the
//! migrations ([`migration_sql`], for `outbox-relay migrate --print-sql`).

use std::cmp::Ordering;
use std::fmt;

use super::{CreateMode, DatabaseUrl, OpenError, StoreOptions};

/// The schema version a database is at, against the newest this build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaState {
    /// The version recorded in the database; `None` when it holds no outbox.
    pub applied: Option<i64>,
    /// The newest version this build migrates to.
    pub latest: i64,
}

impl SchemaState {
    /// Whether the database is exactly at this build's version.
    pub fn is_current(&self) -> bool {
        self.applied == Some(self.latest)
    }

    /// Whether the database is at a version this build does not know (a newer build
    /// migrated it).
    pub fn is_ahead(&self) -> bool {
        self.applied.is_some_and(|applied| applied > self.latest)
    }

    /// Whether a relay may open the outbox at `location` in mode `create`: never one a
    /// newer build migrated (this build does not know its schema), and with
    /// [`CreateMode::MustExist`] only one at exactly this build's version. With
    /// [`CreateMode::CreateIfMissing`] an older or missing schema is fine: opening migrates it.
    // Only the server stores check a schema's version before they open it.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn may_open(&self, create: CreateMode, location: String) -> Result<(), OpenError> {
        let latest = self.latest;
        match self.applied {
            Some(found) if found > latest => Err(OpenError::SchemaNewer {
                location,
                found,
                known: latest,
            }),
            _ if create == CreateMode::CreateIfMissing || self.is_current() => Ok(()),
            Some(version) => Err(OpenError::NotMigrated {
                location,
                reason: format!(
                    "the outbox is at schema version {version}, this build needs {latest}"
                ),
            }),
            None => Err(OpenError::NotMigrated {
                location,
                reason: "no outbox here".to_owned(),
            }),
        }
    }
}

impl fmt::Display for SchemaState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let latest = self.latest;
        match self.applied {
            None => write!(f, "no outbox schema here; this build migrates to version {latest}"),
            Some(applied) => match applied.cmp(&latest) {
                Ordering::Equal => write!(f, "schema version {applied}, this build's: up to date"),
                Ordering::Less => write!(
                    f,
                    "schema version {applied}, behind this build's {latest}: run `outbox-relay migrate`"
                ),
                Ordering::Greater => write!(
                    f,
                    "schema version {applied}, newer than the version this build knows ({latest}): \
                     run that outbox-relay version or a later one"
                ),
            },
        }
    }
}

/// The schema version of the outbox `url` and `options` name, read without writing
/// anything (a SQLite file is opened read-only; a missing one holds no outbox).
pub async fn schema_state(
    url: &DatabaseUrl,
    options: &StoreOptions,
) -> Result<SchemaState, OpenError> {
    match url {
        DatabaseUrl::Sqlite { path } => sqlite_state(path, options).await,
        DatabaseUrl::Postgres { url: raw } => postgres_state(url, raw, options).await,
        DatabaseUrl::Mysql { url: raw } => mysql_state(url, raw, options).await,
    }
}

#[cfg(feature = "sqlite")]
async fn sqlite_state(
    path: &std::path::Path,
    options: &StoreOptions,
) -> Result<SchemaState, OpenError> {
    use crate::store::sqlite::SqliteOutboxStore;
    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

    let latest = SqliteOutboxStore::latest_schema_version();
    let prefix = options.table_prefix.as_deref().unwrap_or("");
    // Validates the prefix, which the query below names.
    SqliteOutboxStore::migration_sql(prefix, 0, 0)?;
    if !path.exists() {
        return Ok(SchemaState {
            applied: None,
            latest,
        });
    }
    let failed = |reason: String| OpenError::Connect {
        database: "SQLite",
        address: path.display().to_string(),
        reason,
    };
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let migrations = format!("{prefix}outbox_migrations");
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
    )
    .bind(&migrations)
    .fetch_one(&mut conn)
    .await
    .map_err(|e| failed(e.to_string()))?;
    let applied = if exists {
        let version: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT MAX(version) FROM {migrations}"
        )))
        .fetch_one(&mut conn)
        .await
        .map_err(|e| failed(e.to_string()))?;
        Some(version.unwrap_or(0))
    } else {
        None
    };
    let _ = conn.close().await;
    Ok(SchemaState { applied, latest })
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite_state(
    _path: &std::path::Path,
    _options: &StoreOptions,
) -> Result<SchemaState, OpenError> {
    Err(OpenError::Unsupported("sqlite"))
}

#[cfg(feature = "postgres")]
async fn postgres_state(
    url: &DatabaseUrl,
    raw: &str,
    options: &StoreOptions,
) -> Result<SchemaState, OpenError> {
    use crate::store::postgres::PostgresOutboxStore;

    let store = super::postgres::connect(url, raw, options).await?;
    Ok(SchemaState {
        applied: store.schema_version().await?.map(i64::from),
        latest: i64::from(PostgresOutboxStore::latest_schema_version()),
    })
}

#[cfg(not(feature = "postgres"))]
async fn postgres_state(
    _url: &DatabaseUrl,
    _raw: &str,
    _options: &StoreOptions,
) -> Result<SchemaState, OpenError> {
    Err(OpenError::Unsupported("postgres"))
}

/// The SQL of the migrations after version `from` up to version `to` (the latest when
/// `None`) for the kind of database `url` names and `options`' schema, table prefix and
/// lock timeout; nothing is connected to.
pub fn migration_sql(
    url: &DatabaseUrl,
    options: &StoreOptions,
    from: i64,
    to: Option<i64>,
) -> Result<String, OpenError> {
    match url {
        DatabaseUrl::Sqlite { .. } => sqlite_sql(options, from, to),
        DatabaseUrl::Postgres { .. } => postgres_sql(options, from, to),
        DatabaseUrl::Mysql { .. } => mysql_sql(options, from, to),
    }
}

#[cfg(feature = "mysql")]
async fn mysql_state(
    url: &DatabaseUrl,
    raw: &str,
    options: &StoreOptions,
) -> Result<SchemaState, OpenError> {
    use crate::store::mysql::MysqlOutboxStore;

    let store = super::mysql::connect(url, raw, options).await?;
    Ok(SchemaState {
        applied: store.schema_version().await?,
        latest: MysqlOutboxStore::latest_schema_version(),
    })
}

#[cfg(not(feature = "mysql"))]
async fn mysql_state(
    _url: &DatabaseUrl,
    _raw: &str,
    _options: &StoreOptions,
) -> Result<SchemaState, OpenError> {
    Err(OpenError::Unsupported("mysql"))
}

#[cfg(feature = "mysql")]
fn mysql_sql(options: &StoreOptions, from: i64, to: Option<i64>) -> Result<String, OpenError> {
    use crate::store::mysql::MysqlOutboxStore;
    let config = super::mysql::config(options)?;
    let to = to.unwrap_or_else(MysqlOutboxStore::latest_schema_version);
    Ok(MysqlOutboxStore::migration_sql(
        &config.table_prefix,
        from,
        to,
    )?)
}

#[cfg(not(feature = "mysql"))]
fn mysql_sql(_options: &StoreOptions, _from: i64, _to: Option<i64>) -> Result<String, OpenError> {
    Err(OpenError::Unsupported("mysql"))
}

#[cfg(feature = "sqlite")]
fn sqlite_sql(options: &StoreOptions, from: i64, to: Option<i64>) -> Result<String, OpenError> {
    use crate::store::sqlite::SqliteOutboxStore;
    if options.schema.is_some() {
        return Err(OpenError::Invalid(crate::ValidationError::new(
            "schema",
            "SQLite has no schemas; use table_prefix to keep several outboxes apart",
        )));
    }
    let prefix = options.table_prefix.as_deref().unwrap_or("");
    let to = to.unwrap_or_else(SqliteOutboxStore::latest_schema_version);
    Ok(SqliteOutboxStore::migration_sql(prefix, from, to)?)
}

#[cfg(not(feature = "sqlite"))]
fn sqlite_sql(_options: &StoreOptions, _from: i64, _to: Option<i64>) -> Result<String, OpenError> {
    Err(OpenError::Unsupported("sqlite"))
}

#[cfg(feature = "postgres")]
fn postgres_sql(options: &StoreOptions, from: i64, to: Option<i64>) -> Result<String, OpenError> {
    use crate::store::postgres::PostgresOutboxStore;
    let version = |field: &str, v: i64| {
        i32::try_from(v).map_err(|_| {
            OpenError::Invalid(crate::ValidationError::new(
                field,
                format!("{v} is not a schema version"),
            ))
        })
    };
    let config = super::postgres::config(options)?;
    let to = match to {
        Some(to) => version("to", to)?,
        None => PostgresOutboxStore::latest_schema_version(),
    };
    Ok(PostgresOutboxStore::migration_sql(
        &config,
        version("from", from)?,
        to,
    )?)
}

#[cfg(not(feature = "postgres"))]
fn postgres_sql(
    _options: &StoreOptions,
    _from: i64,
    _to: Option<i64>,
) -> Result<String, OpenError> {
    Err(OpenError::Unsupported("postgres"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(applied: Option<i64>) -> SchemaState {
        SchemaState { applied, latest: 8 }
    }

    #[test]
    fn a_newer_schema_is_refused_in_either_mode() {
        for create in [CreateMode::CreateIfMissing, CreateMode::MustExist] {
            match state(Some(9)).may_open(create, "here".into()) {
                Err(OpenError::SchemaNewer {
                    found: 9,
                    known: 8,
                    location,
                }) => {
                    assert_eq!(location, "here")
                }
                other => panic!("{create:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn migrating_opens_an_older_or_missing_schema_and_must_exist_does_not() {
        for applied in [None, Some(3), Some(8)] {
            assert!(state(applied)
                .may_open(CreateMode::CreateIfMissing, "here".into())
                .is_ok());
        }
        assert!(state(Some(8))
            .may_open(CreateMode::MustExist, "here".into())
            .is_ok());
        for (applied, reason) in [
            (None, "no outbox here"),
            (
                Some(3),
                "the outbox is at schema version 3, this build needs 8",
            ),
        ] {
            match state(applied).may_open(CreateMode::MustExist, "here".into()) {
                Err(OpenError::NotMigrated { reason: said, .. }) => assert_eq!(said, reason),
                other => panic!("{applied:?}: {other:?}"),
            }
        }
    }
}
