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
//! Layout: [`cli`] is the command line; this file holds the error type and what every
//! command shares; [`daemon`] is `run`;
//! [`admin`] holds the admin commands; [`control`] is `pause` and `resume` (in the store); [`reload`] is
//! what SIGHUP does.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use outbox_relay::config::file::FileConfig;
use outbox_relay::database::{open_store, CreateMode, DatabaseUrl, OpenError};
use outbox_relay::{Outbox, StoreError};

use cli::{Cli, Command, GlobalArgs, DATABASE_URL_ENV};

mod admin;
mod cli;
mod control;
mod daemon;
mod gates;
mod otlp;
mod probe;
mod reload;
mod simulate;

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
        config.postgres.validate().map_err(|error| {
            Failure::input(format!(
                "config error: postgres.{} (from the config file, a flag or its OUTBOX_PG_ \
                 variable): {}",
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
