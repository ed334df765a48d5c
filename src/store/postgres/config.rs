//! [`PostgresConfig`]: where the outbox lives, and the session settings of the relay's
//! connections.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::Connection;

use crate::message::{DraftLimits, ValidationError};
use crate::store::StoreError;
use crate::store::StoreOp;
use crate::time::{duration_millis, Clock};

pub use crate::database::postgres::options::Pooler;
use crate::database::postgres::options::PostgresOptions;

use super::row::db_error;
use super::schema::Names;
use super::{DEFAULT_MIGRATION_STATEMENT_TIMEOUT, DEFAULT_SCHEMA, DEFAULT_TABLE_PREFIX};

/// Where and how a [`PostgresOutboxStore`](super::PostgresOutboxStore) keeps its outbox.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PostgresConfig {
    /// The schema holding the tables (created if missing). Lowercase letters, digits and
    /// `_`, at most [`MAX_SCHEMA_LEN`](super::MAX_SCHEMA_LEN) characters.
    pub schema: String,
    /// The tables' name prefix. Lowercase letters, digits and `_`, at most
    /// [`MAX_TABLE_PREFIX_LEN`](super::MAX_TABLE_PREFIX_LEN) characters.
    pub table_prefix: String,
    /// The limits drafts are validated against.
    pub limits: DraftLimits,
    /// The store's clock. `None` (the default) uses the database's clock, which every relay
    /// shares; tests inject a [`crate::time::ManualClock`].
    pub clock: Option<Arc<dyn Clock>>,
    /// The pool and session settings, the ones the daemon's `[postgres]` table sets:
    /// pool sizes, timeouts, asynchronous commit, vacuums, the listener's URL, the pooler.
    /// Each field documents itself; the builder methods below set them one by one.
    pub settings: PostgresOptions,
    /// Whether the relay's cycle (ack what finished, claim the next batch, and answer
    /// `next_due` when it is empty) runs as one call of a server-side function: one round
    /// trip instead of a transaction of up to five statements. [`migrate`] creates the
    /// function; its name carries a hash of its text, so each build of the crate has its
    /// own and two builds on one database never replace each other's. A store over a
    /// database without it (migrated by another build, by a role that may not create
    /// functions) runs the statements instead, as it does when this is `false`.
    /// Default true.
    ///
    /// [`migrate`]: super::PostgresOutboxStore::migrate
    pub cycle_function: bool,
    /// The `statement_timeout` of the migrations (index builds on a large table outlast
    /// the settings' `statement_timeout`, but must not run without bound). It also bounds
    /// the wait for another process's migration. Default
    /// [`DEFAULT_MIGRATION_STATEMENT_TIMEOUT`]; at most `i32::MAX` ms.
    pub migration_statement_timeout: Duration,
}

/// A pooled connection idle at least this long is pinged before use; a busier one is not.
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// The options of a pool for the relay: acquire within `acquire_timeout`, and ping a
/// connection before handing it out only when it sat idle for [`PING_IF_IDLE_FOR`].
/// sqlx's default pings on every acquire, which adds a round trip to each claim and ack
/// of a busy relay; a connection that broke while in use fails its statement instead, the
/// relay backs off and retries, and sqlx drops the broken connection.
pub fn pool_options(acquire_timeout: Duration) -> PgPoolOptions {
    PgPoolOptions::new()
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IF_IDLE_FOR {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.to_owned(),
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
            limits: DraftLimits::default(),
            clock: None,
            settings: PostgresOptions::default(),
            cycle_function: true,
            migration_statement_timeout: DEFAULT_MIGRATION_STATEMENT_TIMEOUT,
        }
    }
}

impl PostgresConfig {
    /// Sets the schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the table prefix.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Sets the draft limits.
    pub fn limits(mut self, limits: DraftLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Injects a clock in place of the database's.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Sets how long a call waits for a pool connection.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.settings.acquire_timeout = Some(timeout);
        self
    }

    /// Sets the statement timeout of the store's connections.
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.settings.statement_timeout = timeout;
        self
    }

    /// Sets whether the relay's own commits wait for the disk (see
    /// [`PostgresOptions::synchronous_commit`]).
    pub fn synchronous_commit(mut self, synchronous: bool) -> Self {
        self.settings.synchronous_commit = synchronous;
        self
    }

    /// Sets after how many retired rows the relay vacuums the table (`None`: never).
    pub fn vacuum_every(mut self, rows: Option<u64>) -> Self {
        self.settings.vacuum_every = rows;
        self
    }

    /// Sets how long a migration step waits for a lock ([`PostgresOptions::lock_timeout`]).
    pub fn migration_lock_timeout(mut self, timeout: Duration) -> Self {
        self.settings.lock_timeout = timeout;
        self
    }

    /// Sets the migrations' statement timeout ([`Self::migration_statement_timeout`]).
    pub fn migration_statement_timeout(mut self, timeout: Duration) -> Self {
        self.migration_statement_timeout = timeout;
        self
    }

    /// Sets where the wake-up listener connects ([`PostgresOptions::listen_url`]).
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.settings.listen_url = Some(url.into());
        self
    }

    /// Sets what sits between the store and PostgreSQL ([`PostgresOptions::pooler`]).
    pub fn pooler(mut self, pooler: Pooler) -> Self {
        self.settings.pooler = pooler;
        self
    }

    /// Whether statements may be prepared under a name and cached on the connection
    /// (not through a transaction pooler: see [`Pooler::Transaction`]).
    pub(super) fn named_statements(&self) -> bool {
        self.settings.pooler == Pooler::Session
    }

    /// The statements after `BEGIN` that give a transaction the session settings, when
    /// the connections could not get them at startup ([`Pooler::Transaction`]); empty
    /// otherwise.
    fn local_settings(&self) -> String {
        match self.settings.pooler {
            Pooler::Session => String::new(),
            Pooler::Transaction => format!(
                "; SET LOCAL jit = off; SET LOCAL statement_timeout = {}",
                duration_millis(self.settings.statement_timeout)
            ),
        }
    }

    /// The statement that opens a transaction of the store's (not the relay's own ones:
    /// [`Self::relay_begin`]): `BEGIN`, with the session settings under a transaction
    /// pooler, in one round trip.
    pub(super) fn begin(&self) -> String {
        format!("BEGIN{}", self.local_settings())
    }

    /// The connect options of the wake-up listener, when [`PostgresOptions::listen_url`] names them.
    pub(super) fn listen_options(&self) -> Result<Option<PgConnectOptions>, ValidationError> {
        use sqlx::ConnectOptions as _;
        self.settings
            .listen_url
            .as_deref()
            .map(|url| {
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                    return Err(ValidationError::new(
                        "listen_url",
                        format!(
                            "{} is not a postgres:// or postgresql:// URL",
                            crate::redact::redact(url)
                        ),
                    ));
                }
                PgConnectOptions::from_str(url)
                    .map(|options| options.disable_statement_logging())
                    .map_err(|error| {
                        ValidationError::new(
                            "listen_url",
                            format!(
                                "{} is not a PostgreSQL URL: {error}",
                                crate::redact::redact(url)
                            ),
                        )
                    })
            })
            .transpose()
    }

    /// Sets [`Self::cycle_function`].
    pub fn cycle_function(mut self, on: bool) -> Self {
        self.cycle_function = on;
        self
    }

    /// The statement that opens one of the relay's transactions: [`Self::begin`], with
    /// asynchronous commit in the same round trip (a simple query of several statements)
    /// unless [`PostgresOptions::synchronous_commit`].
    pub(super) fn relay_begin(&self) -> String {
        if self.settings.synchronous_commit {
            self.begin()
        } else {
            format!(
                "BEGIN; SET LOCAL synchronous_commit = off{}",
                self.local_settings()
            )
        }
    }

    /// `options` with the session settings every connection of the relay should have:
    /// `jit = off` (JIT compilation cost 417 of 560 ms of a claim at 20,000 rows, for
    /// statements that read a few rows by index) and `statement_timeout`. Use it to build
    /// the pool passed to [`super::PostgresOutboxStore::new`].
    ///
    /// sqlx's statement log is turned off too: its slow-statement warning prints the whole
    /// statement (the claim is kilobytes of SQL); `store::slow_log` logs slow calls by name.
    ///
    /// Under [`Pooler::Transaction`] no `options` are sent (the store sets them per
    /// transaction instead), nor sqlx's `extra_float_digits` (PgBouncer refuses both at
    /// startup: "unsupported startup parameter"; PostgreSQL 12 and later print floats
    /// exactly without it), and the statement cache is off (a cached statement would be
    /// looked for on another server connection).
    pub fn session_options(&self, options: PgConnectOptions) -> PgConnectOptions {
        use sqlx::ConnectOptions as _;
        let options = options.disable_statement_logging();
        if self.settings.pooler == Pooler::Transaction {
            return options.statement_cache_capacity(0).extra_float_digits(None);
        }
        options.options([
            ("jit", "off".to_owned()),
            (
                "statement_timeout",
                duration_millis(self.settings.statement_timeout).to_string(),
            ),
        ])
    }

    /// The connect options for `url`, with [`Self::session_options`].
    pub fn connect_options(&self, url: &str) -> Result<PgConnectOptions, StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(|e| db_error(StoreOp::Connect, e))?;
        Ok(self.session_options(options))
    }

    /// Checks the settings, the schema, the prefix and the migrations' timeout; the error
    /// names the field at fault.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.settings.validate().map_err(|mut error| {
            // The builder's name for the settings' `lock_timeout`.
            if error.field == "lock_timeout" {
                error.field = "migration_lock_timeout".into();
            }
            error
        })?;
        let timeout = self.migration_statement_timeout;
        // Zero would mean "no timeout" to PostgreSQL; under a millisecond rounds to it.
        if timeout < Duration::from_millis(1) {
            return Err(ValidationError::new(
                "migration_statement_timeout",
                "must be at least 1 ms",
            ));
        }
        if duration_millis(timeout) > i64::from(i32::MAX) {
            return Err(ValidationError::new(
                "migration_statement_timeout",
                format!("must be at most {} ms", i32::MAX),
            ));
        }
        self.listen_options()?;
        Names::new(&self.schema, &self.table_prefix).map(|_| ())
    }
}

/// What a pool given to [`PostgresOutboxStore::new`](super::PostgresOutboxStore::new) lacks
/// of the relay's session settings, read on one of its connections: `jit` on,
/// `statement_timeout` other than [`PostgresConfig::statement_timeout`], a ping on every
/// acquire. Nothing under [`Pooler::Transaction`], where every call sets them itself.
pub(super) async fn session_shortfalls(
    pool: &sqlx::PgPool,
    config: &PostgresConfig,
) -> Result<Vec<String>, StoreError> {
    let mut shortfalls = Vec::new();
    if config.settings.pooler == Pooler::Transaction {
        return Ok(shortfalls);
    }
    let (jit, timeout_ms): (String, i64) = sqlx::query_as(
        "SELECT current_setting('jit'),
                (SELECT setting::int8 FROM pg_settings WHERE name = 'statement_timeout')",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| db_error(StoreOp::Connect, e))?;
    if jit != "off" {
        shortfalls.push(format!(
            "jit is {jit}, not off (JIT compilation cost a claim 417 of 560 ms at 20,000 rows)"
        ));
    }
    let wanted = duration_millis(config.settings.statement_timeout);
    if timeout_ms != wanted {
        shortfalls.push(format!(
            "statement_timeout is {timeout_ms} ms, not {wanted} ms (a stalled relay's claim \
             must be cancelled before it commits claims long after)"
        ));
    }
    if pool.options().get_test_before_acquire() {
        shortfalls.push(
            "it pings every connection it hands out (a round trip more per claim and ack; \
             the relay's pool pings one idle for a second or more)"
                .to_owned(),
        );
    }
    Ok(shortfalls)
}

#[cfg(test)]
mod tests;
