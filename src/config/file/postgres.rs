//! `[postgres]`: the PostgreSQL pool and session settings of the daemon (ignored for a
//! SQLite database). Each `OUTBOX_PG_*` environment variable overrides its field.

use serde::{Deserialize, Serialize};

use crate::config::duration::HumanDuration;
use crate::config::ConfigError;
use crate::database::{Pooler, PostgresOptions};

/// `[postgres]`: absent fields keep the defaults of [`PostgresOptions`].
///
/// ```toml
/// [postgres]
/// pool_min_connections = 0      # kept open when idle
/// pool_max_connections = 10     # the wake-up listener's connection is one more
/// acquire_timeout = "10s"       # default: connect_timeout
/// statement_timeout = "30s"
/// lock_timeout = "5s"           # a migration step's wait for a lock
/// synchronous_commit = false    # the relay's own commits (enqueues always wait)
/// vacuum_every = 50000          # rows taken out of live between vacuums, or false
/// # listen_url = "postgres://relay@db:5432/app"  # LISTEN here, not through a pooler
/// pooler = "session"            # or "transaction": PgBouncer's pool_mode = transaction
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSection {
    /// Connections kept open when idle. Default 0.
    pub pool_min_connections: Option<u32>,
    /// The most connections the pool opens. Default 10.
    pub pool_max_connections: Option<u32>,
    /// How long a store call waits for a connection. Default: `connect_timeout`.
    pub acquire_timeout: Option<HumanDuration>,
    /// `statement_timeout` of the relay's connections. Default 30s.
    pub statement_timeout: Option<HumanDuration>,
    /// How long a migration step waits for a lock. Default 5s.
    pub lock_timeout: Option<HumanDuration>,
    /// Whether the relay's own commits wait for the disk. Default false.
    pub synchronous_commit: Option<bool>,
    /// Rows taken out of live between two vacuums, or `false` for autovacuum only.
    /// Default 50000.
    pub vacuum_every: Option<VacuumEvery>,
    /// Where the wake-up listener connects for its `LISTEN`. Default: where the pool does.
    /// `OUTBOX_PG_LISTEN_URL` keeps a password out of the file.
    pub listen_url: Option<String>,
    /// `"transaction"` when the database URL names a pooler in transaction mode (PgBouncer's
    /// `pool_mode = transaction`); `"session"` (or `"none"`) otherwise. Default `"session"`.
    pub pooler: Option<Pooler>,
}

/// `vacuum_every`: a number of rows, or `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum VacuumEvery {
    /// After this many rows.
    Rows(u64),
    /// `false`: never (`true` is refused: it names no number).
    Enabled(bool),
}

impl PostgresSection {
    /// The options, defaults filled in, validated; the error names the field
    /// (`postgres.…`).
    pub fn to_options(&self) -> Result<PostgresOptions, ConfigError> {
        let defaults = PostgresOptions::default();
        let vacuum_every = match self.vacuum_every {
            None => defaults.vacuum_every,
            Some(VacuumEvery::Rows(rows)) => Some(rows),
            Some(VacuumEvery::Enabled(false)) => None,
            Some(VacuumEvery::Enabled(true)) => {
                return Err(ConfigError::new(
                    "postgres.vacuum_every",
                    "write a number of rows, or false to leave the table to autovacuum",
                ))
            }
        };
        let options = PostgresOptions {
            pool_min_connections: self
                .pool_min_connections
                .unwrap_or(defaults.pool_min_connections),
            pool_max_connections: self
                .pool_max_connections
                .unwrap_or(defaults.pool_max_connections),
            acquire_timeout: self.acquire_timeout.map(|d| d.0),
            statement_timeout: self
                .statement_timeout
                .map_or(defaults.statement_timeout, |d| d.0),
            lock_timeout: self.lock_timeout.map_or(defaults.lock_timeout, |d| d.0),
            synchronous_commit: self
                .synchronous_commit
                .unwrap_or(defaults.synchronous_commit),
            vacuum_every,
            listen_url: self.listen_url.clone(),
            pooler: self.pooler.unwrap_or(defaults.pooler),
        };
        options
            .validate()
            .map_err(|error| ConfigError::new(format!("postgres.{}", error.field), error.reason))?;
        Ok(options)
    }
}
