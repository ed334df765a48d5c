//! The command line: every command, flag and environment variable the binary reads, and
//! nothing that runs them. `tests/docs.rs` includes this file to parse the README's and
//! the guide's command lines with it, in plain `cargo test` (clap is a dev-dependency
//! there, so the library's default features stay free of it).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use outbox_relay::config::duration::parse_duration;
use outbox_relay::config::file::MetricsListen;
use outbox_relay::database::Pooler;
use outbox_relay::database::PostgresOptions;
use outbox_relay::simulate::Keys;
use outbox_relay::ValidationError;
use uuid::Uuid;

/// The environment variable that overrides the config file's `database_url`, so a
/// password can stay out of the file.
pub(crate) const DATABASE_URL_ENV: &str = "OUTBOX_DATABASE_URL";

/// Delivers transactional-outbox messages at least once, in order per key.
///
/// Without --config, uses the SQLite file ./outbox.db and one lane `default` with target
/// `log`, delivered by the log sink (one JSON line per message on stdout).
#[derive(Debug, Parser)]
#[command(name = "outbox-relay", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// The relay's config file (TOML; see examples/relay.toml). Also read from
    /// OUTBOX_CONFIG. Default: the embedded config (./outbox.db, lane `default` → `log`).
    #[arg(
        long,
        short = 'c',
        global = true,
        env = "OUTBOX_CONFIG",
        value_name = "FILE"
    )]
    pub(crate) config: Option<PathBuf>,
    /// The database, overriding the config file: sqlite:PATH, sqlite://PATH,
    /// postgres://USER@HOST:PORT/DB or mysql://USER@HOST:PORT/DB. Also read from
    /// OUTBOX_DATABASE_URL (empty counts as unset; its value is never printed, not even by
    /// --help).
    #[arg(
        long,
        global = true,
        env = DATABASE_URL_ENV,
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) database_url: Option<String>,
    #[command(flatten)]
    pub(crate) postgres: PostgresArgs,
}

/// The `[postgres]` settings, each overriding the config file's; from the environment
/// (`OUTBOX_PG_…`) or a flag.
#[derive(Debug, Args)]
pub(crate) struct PostgresArgs {
    /// PostgreSQL: connections kept open when idle [default: 0].
    #[arg(
        long,
        global = true,
        env = "OUTBOX_PG_POOL_MIN_CONNECTIONS",
        value_name = "N"
    )]
    pub(crate) pg_pool_min_connections: Option<u32>,
    /// PostgreSQL: the most connections the pool opens [default: 10].
    #[arg(
        long,
        global = true,
        env = "OUTBOX_PG_POOL_MAX_CONNECTIONS",
        value_name = "N"
    )]
    pub(crate) pg_pool_max_connections: Option<u32>,
    /// PostgreSQL: how long a store call waits for a connection [default: connect_timeout].
    #[arg(long, global = true, env = "OUTBOX_PG_ACQUIRE_TIMEOUT", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) pg_acquire_timeout: Option<Duration>,
    /// PostgreSQL: statement_timeout of the relay's connections [default: 30s].
    #[arg(long, global = true, env = "OUTBOX_PG_STATEMENT_TIMEOUT", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) pg_statement_timeout: Option<Duration>,
    /// PostgreSQL: how long a migration step waits for a lock [default: 5s].
    #[arg(long, global = true, env = "OUTBOX_PG_LOCK_TIMEOUT", value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) pg_lock_timeout: Option<Duration>,
    /// PostgreSQL: whether the relay's own commits wait for the disk [default: false].
    #[arg(
        long,
        global = true,
        env = "OUTBOX_PG_SYNCHRONOUS_COMMIT",
        value_name = "BOOL"
    )]
    pub(crate) pg_synchronous_commit: Option<bool>,
    /// PostgreSQL: rows taken out of live between two vacuums, or `false` [default: 50000].
    #[arg(long, global = true, env = "OUTBOX_PG_VACUUM_EVERY", value_parser = parse_vacuum_every, value_name = "ROWS|false")]
    pub(crate) pg_vacuum_every: Option<VacuumEvery>,
    /// PostgreSQL: where the wake-up listener connects for LISTEN (PostgreSQL directly,
    /// when the database URL names a pooler) [default: the database URL]. Its value is
    /// never printed.
    #[arg(
        long,
        global = true,
        env = "OUTBOX_PG_LISTEN_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) pg_listen_url: Option<String>,
    /// PostgreSQL: `transaction` when the database URL names a pooler in transaction mode
    /// (PgBouncer's pool_mode = transaction), else `session` [default: session].
    #[arg(long, global = true, env = "OUTBOX_PG_POOLER", value_parser = parse_pooler, value_name = "session|transaction")]
    pub(crate) pg_pooler: Option<Pooler>,
}

impl PostgresArgs {
    /// Puts each given setting over the file's `[postgres]` table.
    pub(crate) fn apply(&self, settings: &mut PostgresOptions) {
        if let Some(n) = self.pg_pool_min_connections {
            settings.pool_min_connections = n;
        }
        if let Some(n) = self.pg_pool_max_connections {
            settings.pool_max_connections = n;
        }
        if let Some(d) = self.pg_acquire_timeout {
            settings.acquire_timeout = Some(d);
        }
        if let Some(d) = self.pg_statement_timeout {
            settings.statement_timeout = d;
        }
        if let Some(d) = self.pg_lock_timeout {
            settings.lock_timeout = d;
        }
        if let Some(on) = self.pg_synchronous_commit {
            settings.synchronous_commit = on;
        }
        if let Some(VacuumEvery(rows)) = self.pg_vacuum_every {
            settings.vacuum_every = rows;
        }
        if let Some(pooler) = self.pg_pooler {
            settings.pooler = pooler;
        }
        if let Some(url) = self.pg_listen_url.as_deref().map(str::trim) {
            // An empty one (an unset variable in a compose file) keeps the file's.
            if !url.is_empty() {
                settings.listen_url = Some(url.to_owned());
            }
        }
    }
}

/// `--pg-vacuum-every`: a number of rows, or `None` for `false` (autovacuum only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VacuumEvery(pub(crate) Option<u64>);

fn parse_pooler(s: &str) -> Result<Pooler, String> {
    s.trim().parse().map_err(|e: ValidationError| e.reason)
}

fn parse_vacuum_every(s: &str) -> Result<VacuumEvery, String> {
    match s.trim() {
        "false" | "off" => Ok(VacuumEvery(None)),
        rows => rows
            .parse()
            .map(|rows| VacuumEvery(Some(rows)))
            .map_err(|_| format!("{rows:?} is not a number of rows (or false)")),
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the relay until SIGINT or SIGTERM, then shut down gracefully. SIGHUP reloads
    /// the config file's lanes.
    Run(RunArgs),
    /// Pause a lane for every relay on the database, now and after their restarts: they
    /// stop claiming within a second; deliveries in flight finish. Needs only the
    /// database, no running relay.
    Pause(ControlArgs),
    /// Lift a lane's fleet-wide pause: every relay on the database claims it again.
    Resume(ControlArgs),
    /// Play a stated load against a stated target behaviour through each lane's real
    /// settings, for hours of virtual time in seconds; print per lane what it did.
    Simulate(SimulateArgs),
    /// Ask the running relay's listener for /healthz or /readyz: exit 0 on 200, 1
    /// otherwise. For a container's HEALTHCHECK, where there is no shell or curl.
    Probe(ProbeArgs),
    #[command(flatten)]
    Admin(AdminCommand),
}

/// The commands that act on the database once and exit.
#[derive(Debug, Subcommand)]
pub(crate) enum AdminCommand {
    /// Show per (lane, target): pending, claimed, delivered, dead letters, oldest pending
    /// age, blocked keys.
    Status(StatusArgs),
    /// Enqueue one message.
    Enqueue(EnqueueArgs),
    /// List, show, requeue or discard dead letters.
    #[command(subcommand)]
    DeadLetters(DeadLettersCommand),
    /// Delete delivered and dead-lettered messages older than an age.
    Purge(PurgeArgs),
    /// Create or upgrade the outbox schema, then exit. The other admin commands never
    /// write DDL; `run` migrates unless given --no-migrate. With --print-sql, print the
    /// SQL instead; with --check, only compare the schema's version with this build's.
    Migrate(MigrateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Print the SQL of the migrations for the configured database kind, schema and table
    /// prefix (each in its own transaction), connect to nothing, change nothing.
    #[arg(long, conflicts_with = "check")]
    pub(crate) print_sql: bool,
    /// With --print-sql: the migrations after this version (0: from an empty database).
    #[arg(long, requires = "print_sql", value_name = "N", default_value_t = 0)]
    pub(crate) from: i64,
    /// With --print-sql: up to this version (default: the latest this build knows).
    #[arg(long, requires = "print_sql", value_name = "M")]
    pub(crate) to: Option<i64>,
    /// Change nothing; exit 0 when the schema is at this build's version, 3 when it is
    /// behind (or missing), 4 when it is newer than this build knows.
    #[arg(long)]
    pub(crate) check: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Where the Prometheus endpoint listens (ADDR, or `off`), overriding the config file.
    #[arg(long, env = "OUTBOX_METRICS_LISTEN", value_name = "ADDR|off")]
    pub(crate) metrics_listen: Option<MetricsListen>,
    /// Log line format on stderr. The filter is RUST_LOG (default `info`).
    #[arg(long, env = "OUTBOX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Compact)]
    pub(crate) log_format: LogFormat,
    /// Write no DDL: require the outbox schema to exist at the latest version (run
    /// `outbox-relay migrate` first). For database roles without DDL rights.
    #[arg(long)]
    pub(crate) no_migrate: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ControlArgs {
    /// The lane.
    #[arg(long)]
    pub(crate) lane: String,
    /// The lane's target.
    #[arg(long)]
    pub(crate) target: String,
    /// Why (recorded with the pause, shown by the API).
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Who pauses (default: cli:$USER@HOSTNAME).
    #[arg(long, value_name = "WHO")]
    pub(crate) by: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One human-readable line per event.
    Compact,
    /// One JSON object per event.
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Only this lane.
    #[arg(long)]
    pub(crate) lane: Option<String>,
    /// Only this target.
    #[arg(long)]
    pub(crate) target: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EnqueueArgs {
    /// The lane.
    #[arg(long)]
    pub(crate) lane: String,
    /// The target.
    #[arg(long)]
    pub(crate) target: String,
    /// The payload, as JSON text, delivered byte for byte. Without it, it is read from stdin.
    #[arg(long, value_name = "JSON")]
    pub(crate) payload: Option<String>,
    /// Messages with the same key are delivered one at a time, in enqueue order.
    #[arg(long, value_name = "KEY")]
    pub(crate) ordering_key: Option<String>,
    /// Enqueuing the same key again returns the first message.
    #[arg(long, value_name = "KEY")]
    pub(crate) dedupe_key: Option<String>,
    /// A header handed to the target (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
    pub(crate) headers: Vec<(String, String)>,
    /// Deliver no sooner than this (e.g. 5s, 10m).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) delay: Option<Duration>,
    /// Dead-letter after this many failed attempts.
    #[arg(long, default_value_t = outbox_relay::message::DEFAULT_MAX_ATTEMPTS)]
    pub(crate) max_attempts: u32,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeadLettersCommand {
    /// List dead letters, oldest first.
    List(ListArgs),
    /// Show one dead letter, every field, as JSON (a message in any other status is
    /// refused).
    Show {
        /// The message id.
        id: Uuid,
    },
    /// Move dead letters back to pending, due now, with their attempts reset.
    Requeue(Selector),
    /// Delete dead letters.
    Discard(Selector),
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only this lane.
    #[arg(long)]
    pub(crate) lane: Option<String>,
    /// Only this target.
    #[arg(long)]
    pub(crate) target: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Which dead letters a requeue or discard touches: there is no default, so a bare command
/// never touches them all by accident.
#[derive(Debug, Args)]
pub(crate) struct Selector {
    /// These messages.
    #[arg(value_name = "ID", conflicts_with_all = ["lane", "all"])]
    pub(crate) ids: Vec<Uuid>,
    /// Every dead letter of this lane (narrow with --target).
    #[arg(long, conflicts_with = "all")]
    pub(crate) lane: Option<String>,
    /// With --lane: only this target.
    #[arg(long, requires = "lane")]
    pub(crate) target: Option<String>,
    /// Every dead letter of every lane.
    #[arg(long)]
    pub(crate) all: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Delete messages last changed longer ago than this (e.g. 7d, 12h).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) older_than: Duration,
    /// Rows per delete statement, so no statement holds locks for long.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch_size: usize,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(name, value)| (name.trim().to_owned(), value.to_owned()))
        .filter(|(name, _)| !name.is_empty())
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))
}

/// The load and the target behaviour `simulate` plays.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// How long messages are enqueued, in virtual time; a drain follows, with the target
    /// answering every delivery.
    #[arg(long, value_parser = parse_duration, default_value = "1h", value_name = "DURATION")]
    pub(crate) duration: Duration,
    /// Messages per second per lane (N, N/s, N/m or N/h).
    #[arg(long, value_parser = parse_rate, default_value = "50/s", value_name = "RATE")]
    pub(crate) rate: f64,
    /// Ordering keys: `none`, N (uniform over N keys), or `hot` (one key takes half).
    #[arg(long, value_parser = parse_keys, default_value = "none", value_name = "none|N|hot")]
    pub(crate) keys: Keys,
    /// Each message's max_attempts.
    #[arg(long, default_value_t = outbox_relay::message::DEFAULT_MAX_ATTEMPTS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_attempts: u32,
    /// Share of deliveries that fail (retryable), 0 to 1.
    #[arg(long, value_parser = parse_share, default_value = "0.1", value_name = "SHARE")]
    pub(crate) failure_rate: f64,
    /// How long each delivery takes.
    #[arg(long, value_parser = parse_duration, default_value = "20ms", value_name = "DURATION")]
    pub(crate) latency: Duration,
    /// The Retry-After the target asks for (with --retry-after-rate).
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "DURATION")]
    pub(crate) retry_after: Duration,
    /// Share of deliveries answered with a Retry-After, 0 to 1.
    #[arg(long, value_parser = parse_share, default_value = "0.0", value_name = "SHARE")]
    pub(crate) retry_after_rate: f64,
    /// The target is down for LENGTH starting at START (e.g. 10m@20m); repeatable.
    #[arg(long = "outage", value_parser = parse_outage, value_name = "LENGTH@START")]
    pub(crate) outages: Vec<(Duration, Duration)>,
    /// The seed of every draw: one seed, one report.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let (count, per) = s.split_once('/').unwrap_or((s, "s"));
    let seconds = match per.trim() {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("unknown unit {other:?} (use /s, /m or /h)")),
    };
    match count.trim().parse::<f64>() {
        Ok(count) if count.is_finite() && count > 0.0 && count / seconds <= 10_000.0 => {
            Ok(count / seconds)
        }
        _ => Err(format!(
            "{s:?} is not a rate above 0 and at most 10000/s (e.g. 50/s)"
        )),
    }
}

fn parse_keys(s: &str) -> Result<Keys, String> {
    match s.trim() {
        "none" => Ok(Keys::None),
        "hot" => Ok(Keys::Hot),
        n => match n.parse::<u32>() {
            Ok(n) if n > 0 => Ok(Keys::Spread(n)),
            _ => Err(format!(
                "{s:?} is not `none`, `hot` or a number of keys above 0"
            )),
        },
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("{s:?} is not a share from 0 to 1 (e.g. 0.1)")),
    }
}

fn parse_outage(s: &str) -> Result<(Duration, Duration), String> {
    let (length, start) = s
        .split_once('@')
        .ok_or_else(|| format!("{s:?} is not LENGTH@START (e.g. 10m@20m)"))?;
    let length = parse_duration(length).map_err(|error| error.to_string())?;
    let start = parse_duration(start).map_err(|error| error.to_string())?;
    Ok((start, length))
}

#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    /// Which probe: `healthz` (the process works; a lane failed for too long fails it) or
    /// `readyz` (the relay runs and reaches its database).
    #[arg(value_enum, default_value_t = Probe::Healthz)]
    pub(crate) probe: Probe,
    /// The listener's address (ADDR), overriding the config file, as for `run`.
    #[arg(long, env = "OUTBOX_METRICS_LISTEN", value_name = "ADDR")]
    pub(crate) metrics_listen: Option<MetricsListen>,
    /// How long the connection and the answer may take together.
    #[arg(long, value_parser = parse_duration, default_value = "2s", value_name = "DURATION")]
    pub(crate) timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Probe {
    Healthz,
    Readyz,
}
