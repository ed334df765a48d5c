//! Opening the PostgreSQL store from a URL, with the pool and session settings of
//! [`PostgresOptions`] (the config file's `[postgres]` table as it is read, and the part of
//! [`PostgresConfig`](crate::store::postgres::PostgresConfig) they make up; they and the
//! store's defaults are in `options`, below this module and the store), and the connection
//! that checks the address first.

#[cfg(feature = "postgres")]
use crate::message::ValidationError;

pub(crate) mod options;

pub use options::{
    Pooler, PostgresOptions, CLAIMS_IN_FLIGHT, DEFAULT_ACQUIRE_TIMEOUT,
    DEFAULT_MIGRATION_LOCK_TIMEOUT, DEFAULT_MIGRATION_STATEMENT_TIMEOUT,
    DEFAULT_POOL_MAX_CONNECTIONS, DEFAULT_POOL_MIN_CONNECTIONS, DEFAULT_STATEMENT_TIMEOUT,
    DEFAULT_VACUUM_EVERY,
};

#[cfg(feature = "postgres")]
use super::DatabaseUrl;
#[cfg(feature = "postgres")]
use super::{CreateMode, OpenError, StoreOptions};

/// The store's config for `options`: schema, prefix, and the [`PostgresOptions`].
#[cfg(feature = "postgres")]
pub(super) fn config(
    options: &StoreOptions,
) -> Result<crate::store::postgres::PostgresConfig, ValidationError> {
    // Validated first, so an error names the settings' field (`lock_timeout`).
    options.postgres.validate()?;
    let mut settings = options.postgres.clone();
    // A store opened from a URL waits for a connection as long as for the database.
    settings
        .acquire_timeout
        .get_or_insert(options.connect_timeout);
    let mut config = crate::store::postgres::PostgresConfig {
        settings,
        ..Default::default()
    };
    if let Some(schema) = &options.schema {
        config = config.schema(schema);
    }
    if let Some(prefix) = &options.table_prefix {
        config = config.table_prefix(prefix);
    }
    config.validate()?;
    Ok(config)
}

/// "PostgreSQL at host:port, schema …, table prefix …", for messages.
#[cfg(feature = "postgres")]
pub(super) fn location(
    url: &DatabaseUrl,
    config: &crate::store::postgres::PostgresConfig,
) -> String {
    format!(
        "PostgreSQL at {}, schema {:?}, table prefix {:?}",
        url.address(),
        config.schema,
        config.table_prefix,
    )
}

/// Connects (a plain connection first, so a refused or unknown address fails at once with
/// the driver's own words), and builds the store over a pool with `options`' settings,
/// without migrating.
#[cfg(feature = "postgres")]
pub(super) async fn connect(
    url: &DatabaseUrl,
    raw: &str,
    options: &StoreOptions,
) -> Result<crate::store::postgres::PostgresOutboxStore, OpenError> {
    use std::str::FromStr;

    use crate::store::postgres::PostgresOutboxStore;
    use sqlx::postgres::{PgConnectOptions, PgConnection};
    use sqlx::Connection;

    let config = config(options)?;
    let unreachable = |reason: String| OpenError::Connect {
        database: "PostgreSQL",
        address: url.address(),
        reason,
    };
    // sqlx's slow-statement warning prints the whole statement (5 KB for a claim):
    // off, and the store is wrapped in `SlowCallLog` (name and duration) by `open_store`.
    // The session settings (and, through a transaction pooler, none of the startup
    // parameters it refuses) for the probe as for the pool.
    let connect = config.session_options(
        PgConnectOptions::from_str(raw).map_err(|error| unreachable(error.to_string()))?,
    );
    // A pool retries a refused connection until its acquire timeout and then says only
    // "pool timed out".
    let probe = tokio::time::timeout(
        options.connect_timeout,
        PgConnection::connect_with(&connect),
    )
    .await
    .map_err(|_| unreachable(format!("no answer within {:?}", options.connect_timeout)))?
    .map_err(|error| unreachable(error.to_string()))?;
    // Closing politely is a courtesy to the server; the probe did its job either way.
    let _ = probe.close().await;
    // jit = off and the statement timeout on every pooled connection of the relay.
    let settings = &config.settings;
    let pool = crate::store::postgres::pool_options(
        settings
            .acquire_timeout
            .unwrap_or(crate::store::postgres::DEFAULT_ACQUIRE_TIMEOUT),
    )
    .min_connections(settings.pool_min_connections)
    .max_connections(settings.pool_max_connections)
    .connect_with(connect)
    .await
    .map_err(|error| unreachable(error.to_string()))?;
    PostgresOutboxStore::new(pool, config)
        .await
        .map_err(|error| unreachable(error.to_string()))
}

/// Opens the store and migrates it, or with [`CreateMode::MustExist`] checks that it is at
/// this build's version (refusing a newer one too).
#[cfg(feature = "postgres")]
pub(super) async fn open(
    url: &DatabaseUrl,
    raw: &str,
    options: &StoreOptions,
) -> Result<crate::store::Outbox, OpenError> {
    use crate::store::postgres::PostgresOutboxStore;

    let location = location(url, &config(options)?);
    let store = connect(url, raw, options).await?;
    let state = super::SchemaState {
        applied: store.schema_version().await?.map(i64::from),
        latest: i64::from(PostgresOutboxStore::latest_schema_version()),
    };
    state.may_open(options.create, location)?;
    if options.create == CreateMode::CreateIfMissing {
        store.migrate().await?;
    }
    Ok(crate::store::Outbox::new(store))
}

/// Without the `postgres` feature there is no store to open.
#[cfg(not(feature = "postgres"))]
pub(super) async fn open(
    _url: &super::DatabaseUrl,
    _raw: &str,
    _options: &super::StoreOptions,
) -> Result<crate::store::Outbox, super::OpenError> {
    Err(super::OpenError::Unsupported("postgres"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn defaults_are_valid_and_each_bad_setting_is_named() {
        let ok = PostgresOptions::default();
        assert!(ok.validate().is_ok());
        for (options, field) in [
            (
                PostgresOptions {
                    pool_max_connections: 0,
                    ..ok.clone()
                },
                "pool_max_connections",
            ),
            (
                PostgresOptions {
                    pool_min_connections: 11,
                    ..ok.clone()
                },
                "pool_min_connections",
            ),
            (
                PostgresOptions {
                    acquire_timeout: Some(Duration::ZERO),
                    ..ok.clone()
                },
                "acquire_timeout",
            ),
            (
                PostgresOptions {
                    statement_timeout: Duration::from_micros(1),
                    ..ok.clone()
                },
                "statement_timeout",
            ),
            (
                PostgresOptions {
                    lock_timeout: Duration::from_secs(u64::from(u32::MAX)),
                    ..ok.clone()
                },
                "lock_timeout",
            ),
            (
                PostgresOptions {
                    vacuum_every: Some(0),
                    ..ok.clone()
                },
                "vacuum_every",
            ),
        ] {
            assert_eq!(options.validate().unwrap_err().field, field);
        }
    }

    /// Every setting reaches the store's config; the listen URL's password never shows.
    #[cfg(feature = "postgres")]
    #[test]
    fn the_settings_reach_the_stores_config() {
        let options = StoreOptions {
            schema: Some("relay".into()),
            postgres: PostgresOptions {
                acquire_timeout: Some(Duration::from_secs(2)),
                statement_timeout: Duration::from_secs(7),
                lock_timeout: Duration::from_secs(3),
                synchronous_commit: true,
                vacuum_every: None,
                listen_url: Some("postgres://relay:hunter2@db/app".into()),
                pooler: Pooler::Transaction,
                ..PostgresOptions::default()
            },
            ..StoreOptions::default()
        };
        let config = config(&options).unwrap();
        assert_eq!(config.schema, "relay");
        let settings = &config.settings;
        assert_eq!(settings.acquire_timeout, Some(Duration::from_secs(2)));
        assert_eq!(settings.statement_timeout, Duration::from_secs(7));
        assert_eq!(settings.lock_timeout, Duration::from_secs(3));
        assert!(settings.synchronous_commit);
        assert_eq!(settings.vacuum_every, None);
        assert_eq!(settings.pooler, Pooler::Transaction);
        assert_eq!(
            settings.listen_url.as_deref(),
            Some("postgres://relay:hunter2@db/app")
        );
        for shown in [format!("{:?}", options.postgres), format!("{config:?}")] {
            assert!(
                !shown.contains("hunter2") && shown.contains("db/app"),
                "{shown}"
            );
        }
    }

    /// The daemon's defaults are the library's: one set of numbers in the docs.
    #[cfg(feature = "postgres")]
    #[test]
    fn defaults_are_the_stores() {
        use crate::store::postgres as pg;
        let ok = PostgresOptions::default();
        assert_eq!(ok.statement_timeout, pg::DEFAULT_STATEMENT_TIMEOUT);
        assert_eq!(ok.lock_timeout, pg::DEFAULT_MIGRATION_LOCK_TIMEOUT);
        assert_eq!(ok.vacuum_every, Some(pg::DEFAULT_VACUUM_EVERY));
        let config = pg::PostgresConfig::default();
        assert_eq!(ok, config.settings);
    }
}
