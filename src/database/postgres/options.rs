//! The pool and session settings of a PostgreSQL store ([`PostgresOptions`], [`Pooler`]) and
//! the store's defaults, also without the `postgres` feature: what `database` opens a store
//! with and what the store's [`PostgresConfig`](crate::store::postgres::PostgresConfig)
//! holds, here below both so that each imports them downward.

use std::str::FromStr;
use std::time::Duration;

use crate::message::ValidationError;

/// Connections the pool keeps open when idle, unless configured otherwise: none, so an
/// idle relay holds no connection but its listener's.
pub const DEFAULT_POOL_MIN_CONNECTIONS: u32 = 0;
/// The most connections the pool opens, unless configured otherwise (sqlx's default).
pub const DEFAULT_POOL_MAX_CONNECTIONS: u32 = 10;

/// How many claims a lane on PostgreSQL keeps out at once unless its config says
/// ([`Capabilities::claims_in_flight`](crate::store::Capabilities::claims_in_flight)); the
/// other stores leave it to
/// [`DEFAULT_CLAIMS_IN_FLIGHT`](crate::config::DEFAULT_CLAIMS_IN_FLIGHT).
pub const CLAIMS_IN_FLIGHT: usize = 2;

/// Rows taken out of live between two vacuums unless configured otherwise
/// ([`PostgresConfig::vacuum_every`](crate::store::postgres::PostgresConfig::vacuum_every)).
pub const DEFAULT_VACUUM_EVERY: u64 = 50_000;

/// How long a migration step waits for a lock unless configured otherwise
/// ([`PostgresConfig::migration_lock_timeout`](crate::store::postgres::PostgresConfig::migration_lock_timeout)).
pub const DEFAULT_MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The migrations' statement timeout unless configured otherwise
/// ([`PostgresConfig::migration_statement_timeout`](crate::store::postgres::PostgresConfig::migration_statement_timeout)): room for index builds on a table of
/// millions of rows.
pub const DEFAULT_MIGRATION_STATEMENT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The statement timeout unless configured otherwise: far above any claim or ack (a few
/// milliseconds), far below the 40 s a dead relay's claim once ran before committing.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How the store's connections reach PostgreSQL (`PostgresConfig::pooler`, `[postgres] pooler`,
/// `OUTBOX_PG_POOLER`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Pooler {
    /// Each connection is one PostgreSQL session for its whole life: a direct connection,
    /// or PgBouncer in `pool_mode = session`. Session settings go in the startup `options`,
    /// statements are prepared once per connection and cached, and wake-ups `LISTEN` on a
    /// connection made like the pool's.
    #[default]
    #[serde(alias = "none")]
    Session,
    /// A pooler that lends a server connection for one transaction at a time (PgBouncer's
    /// `pool_mode = transaction`), so nothing may outlive a transaction:
    ///
    /// - no startup `options` (PgBouncer refuses them: "unsupported startup parameter");
    ///   `jit = off` and the `statement_timeout` are `SET LOCAL` at the start of each of
    ///   the store's calls, each call a transaction of its own (a call that was one
    ///   statement costs a `BEGIN` and a `COMMIT` round trip more);
    /// - no named prepared statements: each statement is parsed unnamed inside its
    ///   transaction (a named one would meet another client's server connection);
    /// - the purge lock is a transaction-level advisory lock taken by each batch;
    /// - wake-ups: `LISTEN` needs a session, so it goes to `listen_url`
    ///   (a direct connection) when set. Without one the store does not listen: a lane
    ///   picks up a message enqueued by another process at its next poll, within the
    ///   lane's `max_poll_interval` (default 5 s) plus one claim; set that interval to the
    ///   pickup latency you accept. A message enqueued through this process's `Outbox`
    ///   still goes to an idle lane at once (the local hand-off).
    Transaction,
}

impl Pooler {
    /// The name used in the configuration file and `OUTBOX_PG_POOLER`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Transaction => "transaction",
        }
    }
}

impl std::fmt::Display for Pooler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Pooler {
    type Err = ValidationError;

    /// `session` (or `none`: no pooler) or `transaction`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "session" | "none" => Ok(Self::Session),
            "transaction" => Ok(Self::Transaction),
            other => Err(ValidationError::new(
                "pooler",
                format!("is {other:?}; expected \"session\" (or \"none\") or \"transaction\""),
            )),
        }
    }
}

/// The pool and session settings of a PostgreSQL store: the daemon's `[postgres]` table,
/// read into this type as it stands (absent keys keep the defaults below), and its
/// `OUTBOX_PG_*` variables; in a library build, [`PostgresConfig::settings`], which
/// documents what each one does.
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
///
/// [`PostgresConfig::settings`]: crate::store::postgres::PostgresConfig::settings
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresOptions {
    /// Connections kept open when idle. Default [`DEFAULT_POOL_MIN_CONNECTIONS`].
    pub pool_min_connections: u32,
    /// The most connections the pool opens (the wake-up listener's is one more).
    /// Default [`DEFAULT_POOL_MAX_CONNECTIONS`].
    pub pool_max_connections: u32,
    /// How long a store call waits for a pool connection; `None` (the default) waits the
    /// `connect_timeout` of a store opened from a URL, [`DEFAULT_ACQUIRE_TIMEOUT`] in a pool
    /// `PostgresOutboxStore::connect_with` builds. (A pool passed to
    /// `PostgresOutboxStore::new` keeps its own settings, its sizes too.)
    #[serde(with = "crate::config::duration::human_option")]
    pub acquire_timeout: Option<Duration>,
    /// PostgreSQL's `statement_timeout` on the store's connections: a statement still
    /// running after this is cancelled, so a claim sent by a relay that died or stalled
    /// cannot commit claims long after (a SIGKILLed relay's claims once committed 40 s
    /// later). Set on the connections of the pool `connect_with` builds, with `jit = off`;
    /// for your own pool use `PostgresConfig::session_options`. It applies to every
    /// statement on that pool, a service's own statements in a transaction begun on the
    /// store's `pool()` included (`SET LOCAL statement_timeout` lifts it for one
    /// transaction). Default [`DEFAULT_STATEMENT_TIMEOUT`]; at least 1 ms, at most
    /// `i32::MAX` ms.
    #[serde(with = "crate::config::duration::human")]
    pub statement_timeout: Duration,
    /// How long a migration step waits for a lock (`lock_timeout`) before it gives up with
    /// an error naming the table and who holds it, nothing applied. A schema change waiting
    /// for a lock on the outbox table (behind a long transaction that enqueued) holds every
    /// later enqueue behind it; a few seconds of that is the price of a migration, minutes
    /// are an outage. Default [`DEFAULT_MIGRATION_LOCK_TIMEOUT`]; at most `i32::MAX` ms.
    #[serde(with = "crate::config::duration::human")]
    pub lock_timeout: Duration,
    /// Whether the relay's own transactions (claim, ack, nack, and their combinations) wait
    /// for their commit to reach the disk. `false` (the default) commits them with
    /// `SET LOCAL synchronous_commit = off`: a claim's commit then costs no disk flush (most
    /// of an idle pickup's latency, and a round trip's worth of every busy cycle).
    ///
    /// Why that is safe for an outbox: durability of a message is the enqueue's, and the
    /// enqueue (in the caller's transaction, or `Outbox::enqueue_many`) keeps the session's
    /// setting. A database crash can lose only the last few hundred milliseconds of the
    /// relay's state changes, in commit order (the write-ahead log is one sequence, and
    /// every synchronous commit flushes all that came before it): a lost claim or ack makes
    /// the message pending again and it is delivered again, which at-least-once delivery
    /// allows; per-key order holds, since what is lost is a suffix. Set it to `true` to
    /// keep every relay commit synchronous (fewer duplicates after a database crash, a disk
    /// flush per claim and ack).
    pub synchronous_commit: bool,
    /// After how many rows the relay took out of live (acked or dead-lettered) it runs a
    /// `VACUUM` of the messages table in the background; `None` (`false` in the file) leaves
    /// the table to autovacuum. Without it, claims on a long drain slow down as they step
    /// over the index entries of the rows already drained (see `store/postgres/vacuum.rs`:
    /// a 1 M backlog drained at a third of the 10 k rate). Each vacuum reads the table's
    /// indexes whole, so on a very large table raise it. Default [`DEFAULT_VACUUM_EVERY`].
    #[serde(with = "vacuum_every")]
    pub vacuum_every: Option<u64>,
    /// Where the wake-up listener connects for its `LISTEN`, when not where the pool
    /// connects: a direct connection to PostgreSQL when the pool goes through a pooler
    /// that does not keep a client on one server connection. `None` (the default) listens
    /// over a connection made with the pool's own options.
    pub listen_url: Option<String>,
    /// What sits between the store and PostgreSQL. [`Pooler::Session`] (the default): a
    /// direct connection, or a pooler that keeps a client on one server connection. Under
    /// [`Pooler::Transaction`] (PgBouncer's `pool_mode = transaction`) the store keeps to
    /// what such a pooler allows: no startup `options`, no named prepared statements, every
    /// call in a transaction of its own that sets `jit` and `statement_timeout` with
    /// `SET LOCAL`, and no `LISTEN` through the pooler (see [`Pooler::Transaction`]).
    pub pooler: Pooler,
}

/// How long a store call made through the pool of `PostgresOutboxStore::connect_with` waits
/// for a connection, unless configured otherwise, before it fails with
/// [`StoreError::Unavailable`](crate::store::StoreError::Unavailable). Short, so a relay
/// notices an outage (and backs off) in seconds rather than sqlx's default 30 s.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// `vacuum_every` in the file: a number of rows, or `false`.
mod vacuum_every {
    use std::fmt;

    pub(super) fn serialize<S: serde::Serializer>(
        rows: &Option<u64>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match rows {
            Some(rows) => serializer.serialize_u64(*rows),
            None => serializer.serialize_bool(false),
        }
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Option<u64>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of rows, or false to leave the table to autovacuum")
            }

            fn visit_u64<E: serde::de::Error>(self, rows: u64) -> Result<Option<u64>, E> {
                Ok(Some(rows))
            }

            fn visit_i64<E: serde::de::Error>(self, rows: i64) -> Result<Option<u64>, E> {
                u64::try_from(rows)
                    .map(Some)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(rows), &self))
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<Option<u64>, E> {
                if on {
                    // `true` names no number.
                    return Err(E::invalid_value(serde::de::Unexpected::Bool(on), &self));
                }
                Ok(None)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Every field, the listen URL without its credentials.
impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("pool_min_connections", &self.pool_min_connections)
            .field("pool_max_connections", &self.pool_max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("lock_timeout", &self.lock_timeout)
            .field("synchronous_commit", &self.synchronous_commit)
            .field("vacuum_every", &self.vacuum_every)
            .field("pooler", &self.pooler)
            .field(
                "listen_url",
                &self.listen_url.as_deref().map(crate::redact::redact),
            )
            .finish()
    }
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            pool_min_connections: DEFAULT_POOL_MIN_CONNECTIONS,
            pool_max_connections: DEFAULT_POOL_MAX_CONNECTIONS,
            acquire_timeout: None,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            lock_timeout: DEFAULT_MIGRATION_LOCK_TIMEOUT,
            synchronous_commit: false,
            vacuum_every: Some(DEFAULT_VACUUM_EVERY),
            listen_url: None,
            pooler: Pooler::Session,
        }
    }
}

impl PostgresOptions {
    /// Checks every setting; the error names the field at fault.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.pool_max_connections == 0 {
            return Err(ValidationError::new(
                "pool_max_connections",
                "must be at least 1",
            ));
        }
        if self.pool_min_connections > self.pool_max_connections {
            return Err(ValidationError::new(
                "pool_min_connections",
                format!(
                    "is {}, above pool_max_connections ({})",
                    self.pool_min_connections, self.pool_max_connections
                ),
            ));
        }
        if self.acquire_timeout == Some(Duration::ZERO) {
            return Err(ValidationError::new(
                "acquire_timeout",
                "must be greater than zero",
            ));
        }
        for (field, timeout) in [
            ("statement_timeout", self.statement_timeout),
            ("lock_timeout", self.lock_timeout),
        ] {
            // Zero would mean "no timeout" to PostgreSQL; under a millisecond rounds to it.
            if timeout < Duration::from_millis(1) {
                return Err(ValidationError::new(field, "must be at least 1 ms"));
            }
            if timeout.as_millis() > i32::MAX as u128 {
                return Err(ValidationError::new(
                    field,
                    format!("must be at most {} ms", i32::MAX),
                ));
            }
        }
        if let Some(url) = &self.listen_url {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(ValidationError::new(
                    "listen_url",
                    format!(
                        "{} is not a postgres:// or postgresql:// URL",
                        crate::redact::redact(url)
                    ),
                ));
            }
        }
        if self.vacuum_every == Some(0) {
            return Err(ValidationError::new(
                "vacuum_every",
                "must be at least 1 (or None, `false` in the file, to leave the table to autovacuum)",
            ));
        }
        Ok(())
    }
}
