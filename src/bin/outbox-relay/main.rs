//! `outbox-relay`: the relay daemon and its admin commands.
//!
//! ```text
//! outbox-relay run                       # ./outbox.db, lane `default` → log sink (stdout)
//! outbox-relay --config relay.toml run   # lanes, sinks, database from a file
//! outbox-relay enqueue --lane default --target log --payload '{"id": 1}'
//! outbox-relay status
//! outbox-relay dead-letters list
//! outbox-relay dead-letters requeue 0190a1b2-…
//! outbox-relay purge --older-than 7d
//! outbox-relay migrate                   # create or upgrade the schema, nothing else
//! outbox-relay migrate --print-sql --from 3   # the SQL of migrations 4 and on, for a DBA
//! outbox-relay migrate --check            # exit 3 behind, 4 ahead of this build
//! outbox-relay pause --lane orders --target audit --reason "broker upgrade"
//! outbox-relay resume --lane orders --target audit   # every relay on the database
//! outbox-relay probe readyz               # a container's HEALTHCHECK: exit 0 on 200
//! kill -HUP <pid>                        # the daemon reloads its lanes from --config
//! ```
//!
//! Exit codes: 0 done; 1 the command failed (for `run`: also a shutdown that could not
//! record every ack, so some messages will be delivered again); 2 bad input, a bad config
//! file, or a database that cannot be reached; `migrate --check` only: 3 the schema is
//! behind this build (or missing), 4 it is newer than this build knows. Output for people goes to stdout (the log
//! sink's lines too), logs go to stderr.
//!
//! Layout: this file holds the command line and the error type; [`daemon`] is `run`;
//! [`admin`] holds the admin commands; [`control`] is `pause` and `resume` (in the store); [`reload`] is
//! what SIGHUP does.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use outbox_relay::config::duration::parse_duration;
use outbox_relay::config::duration::HumanDuration;
use outbox_relay::config::file::{FileConfig, MetricsListen, PostgresSection, VacuumEvery};
use outbox_relay::database::{open_store, CreateMode, DatabaseUrl, OpenError, Pooler};
use outbox_relay::{Outbox, StoreError, ValidationError};
use uuid::Uuid;

mod admin;
mod control;
mod daemon;
#[cfg(test)]
mod docs;
mod gates;
mod otlp;
mod probe;
mod reload;
mod simulate;

/// The environment variable that overrides the config file's `database_url`, so a
/// password can stay out of the file.
const DATABASE_URL_ENV: &str = "OUTBOX_DATABASE_URL";

/// Delivers transactional-outbox messages at least once, in order per key.
///
/// Without --config, uses the SQLite file ./outbox.db and one lane `default` with target
/// `log`, delivered by the log sink (one JSON line per message on stdout).
#[derive(Debug, Parser)]
#[command(name = "outbox-relay", version, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct GlobalArgs {
    /// The relay's config file (TOML; see examples/relay.toml). Also read from
    /// OUTBOX_CONFIG. Default: the embedded config (./outbox.db, lane `default` → `log`).
    #[arg(
        long,
        short = 'c',
        global = true,
        env = "OUTBOX_CONFIG",
        value_name = "FILE"
    )]
    config: Option<PathBuf>,
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
    database_url: Option<String>,
    #[command(flatten)]
    postgres: PostgresArgs,
}

/// The `[postgres]` settings, each overriding the config file's; from the environment
/// (`OUTBOX_PG_…`) or a flag.
#[derive(Debug, Args)]
struct PostgresArgs {
    /// PostgreSQL: connections kept open when idle [default: 0].
    #[arg(
        long,
        global = true,
        env = "OUTBOX_PG_POOL_MIN_CONNECTIONS",
        value_name = "N"
    )]
    pg_pool_min_connections: Option<u32>,
    /// PostgreSQL: the most connections the pool opens [default: 10].
    #[arg(
        long,
        global = true,
        env = "OUTBOX_PG_POOL_MAX_CONNECTIONS",
        value_name = "N"
    )]
    pg_pool_max_connections: Option<u32>,
    /// PostgreSQL: how long a store call waits for a connection [default: connect_timeout].
    #[arg(long, global = true, env = "OUTBOX_PG_ACQUIRE_TIMEOUT", value_parser = parse_duration, value_name = "DURATION")]
    pg_acquire_timeout: Option<Duration>,
    /// PostgreSQL: statement_timeout of the relay's connections [default: 30s].
    #[arg(long, global = true, env = "OUTBOX_PG_STATEMENT_TIMEOUT", value_parser = parse_duration, value_name = "DURATION")]
    pg_statement_timeout: Option<Duration>,
    /// PostgreSQL: how long a migration step waits for a lock [default: 5s].
    #[arg(long, global = true, env = "OUTBOX_PG_LOCK_TIMEOUT", value_parser = parse_duration, value_name = "DURATION")]
    pg_lock_timeout: Option<Duration>,
    /// PostgreSQL: whether the relay's own commits wait for the disk [default: false].
    #[arg(
        long,
        global = true,
        env = "OUTBOX_PG_SYNCHRONOUS_COMMIT",
        value_name = "BOOL"
    )]
    pg_synchronous_commit: Option<bool>,
    /// PostgreSQL: rows taken out of live between two vacuums, or `false` [default: 50000].
    #[arg(long, global = true, env = "OUTBOX_PG_VACUUM_EVERY", value_parser = parse_vacuum_every, value_name = "ROWS|false")]
    pg_vacuum_every: Option<VacuumEvery>,
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
    pg_listen_url: Option<String>,
    /// PostgreSQL: `transaction` when the database URL names a pooler in transaction mode
    /// (PgBouncer's pool_mode = transaction), else `session` [default: session].
    #[arg(long, global = true, env = "OUTBOX_PG_POOLER", value_parser = parse_pooler, value_name = "session|transaction")]
    pg_pooler: Option<Pooler>,
}

impl PostgresArgs {
    /// Puts each given setting over the file's `[postgres]` table.
    fn apply(&self, section: &mut PostgresSection) {
        let duration = |d: Option<Duration>| d.map(HumanDuration);
        if let Some(n) = self.pg_pool_min_connections {
            section.pool_min_connections = Some(n);
        }
        if let Some(n) = self.pg_pool_max_connections {
            section.pool_max_connections = Some(n);
        }
        if let Some(d) = duration(self.pg_acquire_timeout) {
            section.acquire_timeout = Some(d);
        }
        if let Some(d) = duration(self.pg_statement_timeout) {
            section.statement_timeout = Some(d);
        }
        if let Some(d) = duration(self.pg_lock_timeout) {
            section.lock_timeout = Some(d);
        }
        if let Some(on) = self.pg_synchronous_commit {
            section.synchronous_commit = Some(on);
        }
        if let Some(every) = self.pg_vacuum_every {
            section.vacuum_every = Some(every);
        }
        if let Some(pooler) = self.pg_pooler {
            section.pooler = Some(pooler);
        }
        if let Some(url) = self.pg_listen_url.as_deref().map(str::trim) {
            // An empty one (an unset variable in a compose file) keeps the file's.
            if !url.is_empty() {
                section.listen_url = Some(url.to_owned());
            }
        }
    }
}

fn parse_pooler(s: &str) -> Result<Pooler, String> {
    s.trim().parse().map_err(|e: ValidationError| e.reason)
}

fn parse_vacuum_every(s: &str) -> Result<VacuumEvery, String> {
    match s.trim() {
        "false" | "off" => Ok(VacuumEvery::Enabled(false)),
        rows => rows
            .parse()
            .map(VacuumEvery::Rows)
            .map_err(|_| format!("{rows:?} is not a number of rows (or false)")),
    }
}

#[derive(Debug, Subcommand)]
enum Command {
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
    Simulate(simulate::SimulateArgs),
    /// Ask the running relay's listener for /healthz or /readyz: exit 0 on 200, 1
    /// otherwise. For a container's HEALTHCHECK, where there is no shell or curl.
    Probe(probe::ProbeArgs),
    #[command(flatten)]
    Admin(AdminCommand),
}

/// The commands that act on the database once and exit.
#[derive(Debug, Subcommand)]
enum AdminCommand {
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
struct MigrateArgs {
    /// Print the SQL of the migrations for the configured database kind, schema and table
    /// prefix (each in its own transaction), connect to nothing, change nothing.
    #[arg(long, conflicts_with = "check")]
    print_sql: bool,
    /// With --print-sql: the migrations after this version (0: from an empty database).
    #[arg(long, requires = "print_sql", value_name = "N", default_value_t = 0)]
    from: i64,
    /// With --print-sql: up to this version (default: the latest this build knows).
    #[arg(long, requires = "print_sql", value_name = "M")]
    to: Option<i64>,
    /// Change nothing; exit 0 when the schema is at this build's version, 3 when it is
    /// behind (or missing), 4 when it is newer than this build knows.
    #[arg(long)]
    check: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Where the Prometheus endpoint listens (ADDR, or `off`), overriding the config file.
    #[arg(long, env = "OUTBOX_METRICS_LISTEN", value_name = "ADDR|off")]
    metrics_listen: Option<MetricsListen>,
    /// Log line format on stderr. The filter is RUST_LOG (default `info`).
    #[arg(long, env = "OUTBOX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Compact)]
    log_format: LogFormat,
    /// Write no DDL: require the outbox schema to exist at the latest version (run
    /// `outbox-relay migrate` first). For database roles without DDL rights.
    #[arg(long)]
    no_migrate: bool,
}

#[derive(Debug, Args)]
struct ControlArgs {
    /// The lane.
    #[arg(long)]
    lane: String,
    /// The lane's target.
    #[arg(long)]
    target: String,
    /// Why (recorded with the pause, shown by the API).
    #[arg(long)]
    reason: Option<String>,
    /// Who pauses (default: cli:$USER@HOSTNAME).
    #[arg(long, value_name = "WHO")]
    by: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// One human-readable line per event.
    Compact,
    /// One JSON object per event.
    Json,
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// Only this lane.
    #[arg(long)]
    lane: Option<String>,
    /// Only this target.
    #[arg(long)]
    target: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct EnqueueArgs {
    /// The lane.
    #[arg(long)]
    lane: String,
    /// The target.
    #[arg(long)]
    target: String,
    /// The payload, as JSON text, delivered byte for byte. Without it, it is read from stdin.
    #[arg(long, value_name = "JSON")]
    payload: Option<String>,
    /// Messages with the same key are delivered one at a time, in enqueue order.
    #[arg(long, value_name = "KEY")]
    ordering_key: Option<String>,
    /// Enqueuing the same key again returns the first message.
    #[arg(long, value_name = "KEY")]
    dedupe_key: Option<String>,
    /// A header handed to the target (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// Deliver no sooner than this (e.g. 5s, 10m).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    delay: Option<Duration>,
    /// Dead-letter after this many failed attempts.
    #[arg(long, default_value_t = outbox_relay::message::DEFAULT_MAX_ATTEMPTS)]
    max_attempts: u32,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum DeadLettersCommand {
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
struct ListArgs {
    /// Only this lane.
    #[arg(long)]
    lane: Option<String>,
    /// Only this target.
    #[arg(long)]
    target: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Which dead letters a requeue or discard touches: there is no default, so a bare command
/// never touches them all by accident.
#[derive(Debug, Args)]
struct Selector {
    /// These messages.
    #[arg(value_name = "ID", conflicts_with_all = ["lane", "all"])]
    ids: Vec<Uuid>,
    /// Every dead letter of this lane (narrow with --target).
    #[arg(long, conflicts_with = "all")]
    lane: Option<String>,
    /// With --lane: only this target.
    #[arg(long, requires = "lane")]
    target: Option<String>,
    /// Every dead letter of every lane.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Args)]
struct PurgeArgs {
    /// Delete messages last changed longer ago than this (e.g. 7d, 12h).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    older_than: Duration,
    /// Rows per delete statement, so no statement holds locks for long.
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    dry_run: bool,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(name, value)| (name.trim().to_owned(), value.to_owned()))
        .filter(|(name, _)| !name.is_empty())
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))
}

/// A command that did not succeed: what to print, and the exit code.
#[derive(Debug)]
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// Bad input, a bad config, or a database that cannot be reached: exit code 2.
    fn input(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }

    /// The command failed: exit code 1.
    fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Validation(_) | StoreError::Conflict { .. } => {
                Failure::input(error.to_string())
            }
            _ => Failure::failed(error.to_string()),
        }
    }
}

impl From<OpenError> for Failure {
    fn from(error: OpenError) -> Self {
        match error {
            OpenError::Store(error) => Failure::failed(error.to_string()),
            other => Failure::input(other.to_string()),
        }
    }
}

/// The config and database a command works on, with flags and environment applied.
#[derive(Debug)]
struct Setup {
    config: FileConfig,
    url: DatabaseUrl,
}

impl Setup {
    /// Reads the config file (or the embedded default) with the environment's overrides,
    /// then lets `--database-url` or `OUTBOX_DATABASE_URL` override its database.
    fn resolve(global: &GlobalArgs) -> Result<Self, Failure> {
        // Each file key but the lanes may come from its `OUTBOX_…` variable
        // (`config::file::ENV_SETTINGS`; the flags below read the rest).
        let lookup = |name: &str| std::env::var(name).ok();
        let mut config = match &global.config {
            Some(path) => FileConfig::load_with_env(path, &lookup),
            None => FileConfig::from_toml_str_with_env(
                "embedded default config",
                outbox_relay::config::file::EMBEDDED_DEFAULT,
                &lookup,
            ),
        }
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
        global.postgres.apply(&mut config.postgres);
        config.postgres.to_options().map_err(|error| {
            Failure::input(format!(
                "config error: {} (from the config file, a flag or its OUTBOX_PG_ variable): {}",
                error.field, error.reason
            ))
        })?;
        // clap reads `--database-url`, else `OUTBOX_DATABASE_URL`; an empty one (an unset
        // variable in a compose file) leaves the config's database.
        let given = global.database_url.as_deref().map(str::trim);
        let Some(url) = given.filter(|url| !url.is_empty()) else {
            let origin = global
                .config
                .as_ref()
                .map_or("embedded default config".to_owned(), |p| {
                    p.display().to_string()
                });
            let url = config.database_url().map_err(|error| {
                Failure::input(format!(
                    "config error: {origin}, field `database_url`: {error}"
                ))
            })?;
            return Ok(Self { config, url });
        };
        let source = format!("--database-url (or {DATABASE_URL_ENV})");
        let url = url
            .parse()
            .map_err(|error| Failure::input(format!("{source}: {error}")))?;
        Ok(Self { config, url })
    }

    /// Opens the store.
    async fn open(&self, create: CreateMode) -> Result<Outbox, Failure> {
        let options = outbox_relay::database::StoreOptions {
            create,
            ..self.config.store_options()
        };
        Ok(open_store(&self.url, &options).await?)
    }
}

/// How long the process waits at exit for the runtime's leftover tasks.
const RUNTIME_EXIT_WAIT: Duration = Duration::from_millis(500);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("outbox-relay: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(dispatch(cli));
    // A store call stuck on a silent connection must not hold the exit: everything that
    // matters was reported (or given up on) by now.
    runtime.shutdown_timeout(RUNTIME_EXIT_WAIT);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("outbox-relay: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<(), Failure> {
    let setup = Setup::resolve(&cli.global)?;
    match cli.command {
        Command::Run(args) => daemon::run(setup, cli.global.config, args).await,
        Command::Pause(args) => control::run(setup, true, args).await,
        Command::Resume(args) => control::run(setup, false, args).await,
        Command::Simulate(args) => simulate::run(setup, args),
        Command::Probe(args) => probe::run(setup, args),
        Command::Admin(command) => {
            admin::init_logging();
            admin::run(setup, command).await
        }
    }
}
