//! Which store a database URL names, and [`open_store`], which opens it: the one place the
//! binary (or a service reading a URL from its environment) chooses between SQLite,
//! PostgreSQL and MySQL/MariaDB.
//!
//! | URL                                  | store                                    |
//! |--------------------------------------|------------------------------------------|
//! | `sqlite:outbox.db`, `sqlite://outbox.db` | SQLite file `outbox.db` (relative to the working directory) |
//! | `sqlite:///var/lib/relay/outbox.db`  | SQLite file at an absolute path          |
//! | `postgres://user:pw@host:5432/db`, `postgresql://…` | PostgreSQL                |
//! | `mysql://user:pw@host:3306/db`       | MySQL 8 or MariaDB 10.6+ (feature `mysql`) |
//!
//! ```
//! use outbox_relay::database::DatabaseUrl;
//!
//! let url: DatabaseUrl = "postgres://relay:secret@db.internal/app".parse()?;
//! assert_eq!(url.address(), "db.internal:5432");
//! assert_eq!(url.to_string(), "postgres://***:***@db.internal/app"); // never the credentials
//! assert!("redis://db/0".parse::<DatabaseUrl>().is_err());
//! # Ok::<(), outbox_relay::database::DatabaseUrlError>(())
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::message::ValidationError;
use crate::store::slow_log::{SlowCallLog, DEFAULT_SLOW_CALL_THRESHOLD};
use crate::store::{Capabilities, Outbox, StoreError};

use crate::redact::redact;

mod migrations;
mod mysql;
pub mod postgres;

pub use migrations::{migration_sql, schema_state, SchemaState};
pub use postgres::{
    Pooler, PostgresOptions, DEFAULT_POOL_MAX_CONNECTIONS, DEFAULT_POOL_MIN_CONNECTIONS,
};

/// How long [`open_store`] tries to reach the database unless told otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The port PostgreSQL listens on when a URL does not say.
const POSTGRES_DEFAULT_PORT: u16 = 5432;
/// The port MySQL listens on when a URL does not say.
const MYSQL_DEFAULT_PORT: u16 = 3306;

/// A database URL that names a store this crate can open.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A SQLite file.
    Sqlite {
        /// The file, as written (relative paths are relative to the working directory).
        path: PathBuf,
    },
    /// A PostgreSQL database.
    Postgres {
        /// The URL, as written (it may hold a password: print the `DatabaseUrl`, not this).
        url: String,
    },
    /// A MySQL or MariaDB database.
    Mysql {
        /// The URL, as written (it may hold a password: print the `DatabaseUrl`, not this).
        url: String,
    },
}

/// A URL that names no store this crate can open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid database URL {url:?}: {reason}")]
pub struct DatabaseUrlError {
    url: String,
    reason: String,
}

impl DatabaseUrlError {
    fn new(url: &str, reason: impl Into<String>) -> Self {
        Self {
            url: redact(url),
            reason: reason.into(),
        }
    }
}

impl FromStr for DatabaseUrl {
    type Err = DatabaseUrlError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let url = url.trim();
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(DatabaseUrlError::new(url, "the SQLite file path is empty"));
            }
            if path.contains('?') {
                return Err(DatabaseUrlError::new(
                    url,
                    "query parameters are not supported in a SQLite URL",
                ));
            }
            if path == ":memory:" {
                return Err(DatabaseUrlError::new(
                    url,
                    "an in-memory SQLite database would be private to one process; name a file",
                ));
            }
            return Ok(DatabaseUrl::Sqlite {
                path: PathBuf::from(path),
            });
        }
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(DatabaseUrlError::new(
                url,
                "expected sqlite:PATH, sqlite://PATH, postgres://HOST/DATABASE or mysql://HOST/DATABASE",
            ));
        };
        if !matches!(scheme, "postgres" | "postgresql" | "mysql") {
            return Err(DatabaseUrlError::new(
                url,
                format!("unsupported scheme {scheme:?}: expected sqlite, postgres or mysql"),
            ));
        }
        match names_a_host(url) {
            Some(true) => {}
            Some(false) => return Err(DatabaseUrlError::new(url, "the host is missing")),
            None => {
                return Err(DatabaseUrlError::new(
                    url,
                    "not a valid URL (percent-encode `/`, `?`, `@` and `:` in the password, e.g. `/` as %2F)",
                ))
            }
        }
        if scheme == "mysql" {
            #[cfg(feature = "mysql")]
            {
                sqlx::mysql::MySqlConnectOptions::from_str(url)
                    .map_err(|error| DatabaseUrlError::new(url, error.to_string()))?;
            }
            return Ok(DatabaseUrl::Mysql {
                url: url.to_owned(),
            });
        }
        #[cfg(feature = "postgres")]
        {
            sqlx::postgres::PgConnectOptions::from_str(url)
                .map_err(|error| DatabaseUrlError::new(url, error.to_string()))?;
        }
        Ok(DatabaseUrl::Postgres {
            url: url.to_owned(),
        })
    }
}

impl DatabaseUrl {
    /// Where the database is, for messages: the file for SQLite, `host:port` for PostgreSQL.
    pub fn address(&self) -> String {
        match self {
            DatabaseUrl::Sqlite { path } => path.display().to_string(),
            DatabaseUrl::Postgres { url } => host_and_port(url, POSTGRES_DEFAULT_PORT)
                .unwrap_or_else(|| "(an address the URL does not make clear)".to_owned()),
            DatabaseUrl::Mysql { url } => host_and_port(url, MYSQL_DEFAULT_PORT)
                .unwrap_or_else(|| "(an address the URL does not make clear)".to_owned()),
        }
    }

    /// What the store this URL names can do ([`OutboxBackend::capabilities`](crate::store::OutboxBackend::capabilities),
    /// but for wake-ups across processes, which depend on how it connects): what a lane
    /// that leaves a setting to its store gets, known before the database is reached.
    /// [`Capabilities::none`] for a store this build has not.
    pub fn capabilities(&self) -> Capabilities {
        match self {
            #[cfg(feature = "sqlite")]
            DatabaseUrl::Sqlite { .. } => crate::store::sqlite::SqliteOutboxStore::CAPABILITIES,
            #[cfg(feature = "postgres")]
            DatabaseUrl::Postgres { .. } => {
                crate::store::postgres::PostgresOutboxStore::CAPABILITIES
            }
            #[cfg(feature = "mysql")]
            DatabaseUrl::Mysql { .. } => crate::store::mysql::MysqlOutboxStore::CAPABILITIES,
            #[allow(unreachable_patterns)]
            _ => Capabilities::none(),
        }
    }

    /// `sqlite`, `postgres` or `mysql`.
    pub fn kind(&self) -> &'static str {
        match self {
            DatabaseUrl::Sqlite { .. } => "sqlite",
            DatabaseUrl::Postgres { .. } => "postgres",
            DatabaseUrl::Mysql { .. } => "mysql",
        }
    }
}

/// The host and port of a URL, for messages; `None` if the `url` crate cannot parse it.
fn host_and_port(text: &str, default_port: u16) -> Option<String> {
    let url = url::Url::parse(text.trim()).ok()?;
    let host = url.host_str().filter(|h| !h.is_empty())?;
    Some(format!("{host}:{}", url.port().unwrap_or(default_port)))
}

/// Whether a URL names its host: in the authority, or as a `host` parameter (a Unix
/// socket directory). `None` if the `url` crate cannot parse it.
fn names_a_host(text: &str) -> Option<bool> {
    let url = url::Url::parse(text.trim()).ok()?;
    let in_authority = url.host_str().is_some_and(|h| !h.is_empty());
    Some(in_authority || url.query_pairs().any(|(name, _)| name == "host"))
}

/// The URL with its user info and query values replaced by `***`.
impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseUrl::Sqlite { path } => write!(f, "sqlite:{}", path.display()),
            DatabaseUrl::Postgres { url } | DatabaseUrl::Mysql { url } => f.write_str(&redact(url)),
        }
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// Whether [`open_store`] may create a SQLite file that does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreateMode {
    /// Create the file, or the PostgreSQL schema and tables, and bring them up to date
    /// (the relay, `migrate`, and `enqueue`).
    #[default]
    CreateIfMissing,
    /// Write no DDL: refuse a missing SQLite file, and a PostgreSQL schema that is missing
    /// or not at the latest version. An admin command with a mistyped path or schema should
    /// say so, not report on a new empty outbox; a relay whose role has no DDL rights runs
    /// with this after an explicit `outbox-relay migrate`.
    MustExist,
}

/// Where the outbox lives inside the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// The table-name prefix; `None` for the store's default.
    pub table_prefix: Option<String>,
    /// The PostgreSQL schema; `None` for the store's default. SQLite has no schemas.
    pub schema: Option<String>,
    /// How long to keep trying to reach the database.
    pub connect_timeout: Duration,
    /// Whether a missing SQLite file is created.
    pub create: CreateMode,
    /// The PostgreSQL pool and session settings (ignored for SQLite).
    pub postgres: PostgresOptions,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            table_prefix: None,
            schema: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            create: CreateMode::CreateIfMissing,
            postgres: PostgresOptions::default(),
        }
    }
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// An option is invalid for this database; nothing was created or changed.
    /// Its `field` is the option at fault (`table_prefix`, `schema`).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The SQLite file does not exist and [`CreateMode::MustExist`] was asked.
    #[error("no SQLite database at {path} (start `outbox-relay run` once, or check the URL)")]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The database could not be reached (refused, timed out, authentication failed, no
    /// such database, no such directory).
    #[error("cannot open the {database} database at {address}: {reason}")]
    Connect {
        /// `SQLite` or `PostgreSQL`.
        database: &'static str,
        /// `host:port` or the file.
        address: String,
        /// What the driver said.
        reason: String,
    },
    /// The PostgreSQL schema holds no outbox, or an older version of it, and
    /// [`CreateMode::MustExist`] forbids migrating.
    #[error(
        "{location}: {reason}; run `outbox-relay migrate` (as a role allowed to create tables)"
    )]
    NotMigrated {
        /// The database address, schema and table prefix.
        location: String,
        /// What was found.
        reason: String,
    },
    /// The outbox was migrated by a newer build: this one does not know its schema and
    /// refuses to run on it.
    #[error(
        "{location}: the outbox is at schema version {found}, newer than the version this \
         build of outbox-relay knows ({known}); run that outbox-relay version or a later one"
    )]
    SchemaNewer {
        /// The database address (and for PostgreSQL the schema and table prefix).
        location: String,
        /// The version recorded in the database.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// This build has no store for the URL's database.
    #[error("this build of outbox-relay has no {0} support (enable the crate feature {0:?})")]
    Unsupported(&'static str),
    /// The database was reached, but preparing the outbox (migrations) failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Opens the store `url` names, with its schema brought up to date (or, with
/// [`CreateMode::MustExist`], checked to be). The store logs a call slower than
/// [`DEFAULT_SLOW_CALL_THRESHOLD`] by its name and duration ([`SlowCallLog`]) and records
/// the store metrics (as every [`Outbox`] does).
pub async fn open_store(url: &DatabaseUrl, options: &StoreOptions) -> Result<Outbox, OpenError> {
    let store = match url {
        DatabaseUrl::Sqlite { path } => open_sqlite(path, options).await?,
        DatabaseUrl::Postgres { url: raw } => postgres::open(url, raw, options).await?,
        DatabaseUrl::Mysql { url: raw } => mysql::open(url, raw, options).await?,
    };
    Ok(store.with_hook(SlowCallLog::new(DEFAULT_SLOW_CALL_THRESHOLD)))
}

async fn open_sqlite(path: &Path, options: &StoreOptions) -> Result<Outbox, OpenError> {
    if options.schema.is_some() {
        return Err(OpenError::Invalid(ValidationError::new(
            "schema",
            "SQLite has no schemas; use table_prefix to keep several outboxes apart",
        )));
    }
    #[cfg(feature = "sqlite")]
    {
        use crate::store::sqlite::SqliteOutboxStore;

        let mut builder = SqliteOutboxStore::builder(path);
        if let Some(prefix) = &options.table_prefix {
            builder = builder.table_prefix(prefix);
        }
        // Everything is checked before the file is touched: a bad option creates nothing.
        builder.validate()?;
        if options.create == CreateMode::MustExist && !path.exists() {
            return Err(OpenError::Missing {
                path: path.to_owned(),
            });
        }
        let open = tokio::time::timeout(options.connect_timeout, builder.open());
        let store = match open.await {
            Ok(Ok(store)) => store,
            Ok(Err(error)) => {
                return Err(OpenError::Connect {
                    database: "SQLite",
                    address: path.display().to_string(),
                    reason: error.to_string(),
                })
            }
            Err(_) => {
                return Err(OpenError::Connect {
                    database: "SQLite",
                    address: path.display().to_string(),
                    reason: format!(
                        "still locked by another process after {:?}",
                        options.connect_timeout
                    ),
                })
            }
        };
        Ok(Outbox::new(store))
    }
    #[cfg(not(feature = "sqlite"))]
    {
        let _ = path;
        Err(OpenError::Unsupported("sqlite"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_a_file() {
        for (url, path) in [
            ("sqlite:outbox.db", "outbox.db"),
            ("sqlite://outbox.db", "outbox.db"),
            (
                "sqlite:///var/lib/relay/outbox.db",
                "/var/lib/relay/outbox.db",
            ),
            ("sqlite:data/relay.db", "data/relay.db"),
        ] {
            assert_eq!(
                url.parse::<DatabaseUrl>().unwrap(),
                DatabaseUrl::Sqlite { path: path.into() },
                "{url}"
            );
        }
    }

    #[test]
    fn postgres_addresses_and_redaction() {
        for (url, address, shown) in [
            (
                "postgres://postgres@127.0.0.1:5432/test",
                "127.0.0.1:5432",
                "postgres://***@127.0.0.1:5432/test",
            ),
            (
                "postgresql://u:p%40ss@db:6543/app?sslmode=disable",
                "db:6543",
                "postgresql://***:***@db:6543/app?sslmode=***",
            ),
            (
                "postgres://127.0.0.1:1/x",
                "127.0.0.1:1",
                "postgres://127.0.0.1:1/x",
            ),
            (
                "postgres://db.internal/app",
                "db.internal:5432",
                "postgres://db.internal/app",
            ),
            ("postgres://[::1]/app", "[::1]:5432", "postgres://[::1]/app"),
        ] {
            let parsed: DatabaseUrl = url.parse().unwrap();
            assert_eq!(parsed.address(), address, "{url}");
            assert_eq!(parsed.to_string(), shown, "{url}");
        }
    }

    #[test]
    fn mysql_addresses_and_redaction() {
        for (url, address, shown) in [
            (
                "mysql://root@127.0.0.1:3306/test",
                "127.0.0.1:3306",
                "mysql://***@127.0.0.1:3306/test",
            ),
            ("mysql://u:pw@db/app", "db:3306", "mysql://***:***@db/app"),
        ] {
            let parsed: DatabaseUrl = url.parse().unwrap();
            assert_eq!(parsed.kind(), "mysql", "{url}");
            assert_eq!(parsed.address(), address, "{url}");
            assert_eq!(parsed.to_string(), shown, "{url}");
        }
    }

    #[test]
    fn other_urls_are_refused_with_the_reason() {
        for (url, reason) in [
            ("mongodb://db/app", "unsupported scheme \"mongodb\""),
            ("mysql:///app", "host is missing"),
            ("outbox.db", "expected sqlite:PATH"),
            ("sqlite:", "path is empty"),
            ("sqlite://", "path is empty"),
            ("sqlite::memory:", "in-memory"),
            ("sqlite:x.db?mode=rwc", "query parameters"),
            ("postgres:///app", "host is missing"),
        ] {
            let error = url.parse::<DatabaseUrl>().unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
        }
        let error = "mongodb://u:secret@db/app"
            .parse::<DatabaseUrl>()
            .unwrap_err()
            .to_string();
        assert!(!error.contains("secret"), "{error}");
    }
}
