//! Opening the MySQL/MariaDB store from a `mysql://` URL: a plain connection first (so a
//! refused or unknown address fails at once with the driver's own words), then the store
//! over a pool, migrated or checked.

#[cfg(feature = "mysql")]
use super::{CreateMode, DatabaseUrl, OpenError, StoreOptions};

/// The store's config for `options`: the table prefix (MySQL keeps the outbox in the URL's
/// database, so `schema` is refused).
#[cfg(feature = "mysql")]
pub(super) fn config(
    options: &StoreOptions,
) -> Result<crate::store::mysql::MysqlConfig, crate::ValidationError> {
    if options.schema.is_some() {
        return Err(crate::ValidationError::new(
            "schema",
            "MySQL keeps the outbox in the URL's database; use table_prefix to keep several outboxes apart",
        ));
    }
    let mut config = crate::store::mysql::MysqlConfig::default()
        .acquire_timeout(
            options
                .postgres
                .acquire_timeout
                .unwrap_or(options.connect_timeout),
        )
        .migration_lock_timeout(options.postgres.lock_timeout);
    if let Some(prefix) = &options.table_prefix {
        config = config.table_prefix(prefix);
    }
    config.validate()?;
    Ok(config)
}

/// "MySQL at host:port, table prefix …", for messages.
#[cfg(feature = "mysql")]
fn location(url: &DatabaseUrl, config: &crate::store::mysql::MysqlConfig) -> String {
    format!(
        "MySQL at {}, table prefix {:?}",
        url.address(),
        config.table_prefix
    )
}

/// Connects and builds the store over a pool, without migrating.
#[cfg(feature = "mysql")]
pub(super) async fn connect(
    url: &DatabaseUrl,
    raw: &str,
    options: &StoreOptions,
) -> Result<crate::store::mysql::MysqlOutboxStore, OpenError> {
    use std::str::FromStr;

    use crate::store::mysql::MysqlOutboxStore;
    use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPoolOptions};
    use sqlx::{ConnectOptions, Connection};

    let config = config(options)?;
    let unreachable = |reason: String| OpenError::Connect {
        database: "MySQL",
        address: url.address(),
        reason,
    };
    let connect = MySqlConnectOptions::from_str(raw)
        .map_err(|error| unreachable(error.to_string()))?
        .disable_statement_logging();
    let probe = tokio::time::timeout(
        options.connect_timeout,
        MySqlConnection::connect_with(&connect),
    )
    .await
    .map_err(|_| unreachable(format!("no answer within {:?}", options.connect_timeout)))?
    .map_err(|error| unreachable(error.to_string()))?;
    let _ = probe.close().await;
    let pool = MySqlPoolOptions::new()
        .acquire_timeout(config.acquire_timeout)
        .min_connections(options.postgres.pool_min_connections)
        .max_connections(options.postgres.pool_max_connections)
        .connect_with(connect)
        .await
        .map_err(|error| unreachable(error.to_string()))?;
    MysqlOutboxStore::new(pool, config).map_err(|error| unreachable(error.to_string()))
}

/// Opens the store and migrates it, or with [`CreateMode::MustExist`] checks that it is at
/// this build's version (refusing a newer one too).
#[cfg(feature = "mysql")]
pub(super) async fn open(
    url: &DatabaseUrl,
    raw: &str,
    options: &StoreOptions,
) -> Result<crate::store::Outbox, OpenError> {
    use crate::store::mysql::MysqlOutboxStore;

    let location = location(url, &config(options)?);
    let store = connect(url, raw, options).await?;
    let state = super::SchemaState {
        applied: store.schema_version().await?,
        latest: MysqlOutboxStore::latest_schema_version(),
    };
    state.may_open(options.create, location)?;
    if options.create == CreateMode::CreateIfMissing {
        store.migrate().await?;
    }
    Ok(crate::store::Outbox::new(store))
}

#[cfg(not(feature = "mysql"))]
pub(super) async fn open(
    _url: &super::DatabaseUrl,
    _raw: &str,
    _options: &super::StoreOptions,
) -> Result<crate::store::Outbox, super::OpenError> {
    Err(super::OpenError::Unsupported("mysql"))
}
