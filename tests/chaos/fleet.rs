//! Relay processes on one lane, whatever their database: `outbox-relay run` as a child
//! process ([`RelayProcess`], which every chaos test with relay processes starts), several of them writing their log sinks' lines into one pipe
//! ([`Fleet`], [`DeliveryStream`]), their config ([`relay_config`]), and the waits and checks
//! every scenario with killed relays makes ([`wait_mid_batch`], [`wait_all_delivered`],
//! [`assert_printed_attempts`]).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use outbox_relay::sinks::log::LogLine;
use outbox_relay::{Outbox, OutboxMessage, OutboxStatus};
use tokio::runtime::Runtime;
use uuid::Uuid;

use crate::{counts, messages, wait_until, BIN};

/// The lane every relay of a [`Fleet`] serves.
pub(crate) const LANE: &str = "chaos";
/// Its target: the log sink, one JSON line on stdout per delivery.
pub(crate) const TARGET: &str = "log";

/// `outbox-relay run` as a child process, killed when dropped (a failed test leaves no
/// relay running).
pub(crate) struct RelayProcess {
    name: &'static str,
    // A mutex so that checks inside wait conditions can share the process.
    child: Mutex<Child>,
    stderr: Arc<Mutex<String>>,
    /// Set by [`RelayProcess::sigkill`]: the fleet no longer expects it to run.
    killed: AtomicBool,
}

impl RelayProcess {
    /// Starts the daemon with `config`, its stdout on `stdout` (shared by a fleet's relays:
    /// see [`DeliveryStream`]), its stderr captured.
    pub(crate) fn start(name: &'static str, dir: &Path, config: &Path, stdout: Stdio) -> Self {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .arg("run")
            .current_dir(dir)
            .env_remove("OUTBOX_DATABASE_URL")
            .env_remove("OUTBOX_METRICS_LISTEN")
            .env_remove("OUTBOX_LOG_FORMAT")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start outbox-relay run");
        let stderr = crate::stderr::capture(child.stderr.take().expect("stderr piped"));
        Self {
            name,
            child: Mutex::new(child),
            stderr,
            killed: AtomicBool::new(false),
        }
    }

    /// Its stderr so far, headed with its name.
    pub(crate) fn stderr(&self) -> String {
        format!(
            "--- relay {} stderr ---\n{}",
            self.name,
            self.stderr.lock().unwrap()
        )
    }

    /// Whether its stderr holds `text`.
    pub(crate) fn logged(&self, text: &str) -> bool {
        self.times_logged(text) > 0
    }

    /// How many times its stderr holds `text`.
    pub(crate) fn times_logged(&self, text: &str) -> usize {
        self.stderr.lock().unwrap().matches(text).count()
    }

    pub(crate) fn assert_alive(&self) {
        if let Some(status) = self
            .child
            .lock()
            .unwrap()
            .try_wait()
            .expect("poll the relay")
        {
            panic!("relay {} exited ({status})\n{}", self.name, self.stderr());
        }
    }

    pub(crate) fn wait_for_log(&self, text: &str) {
        wait_until(
            &format!("{text:?} in relay {}'s log", self.name),
            || {
                self.assert_alive();
                self.logged(text).then_some(())
            },
            || self.stderr(),
        );
    }

    /// SIGKILL: no shutdown, no release, claims left as they are.
    pub(crate) fn sigkill(&self) {
        let mut child = self.child.lock().unwrap();
        child.kill().expect("SIGKILL the relay");
        child.wait().expect("reap the relay");
        self.killed.store(true, Ordering::SeqCst);
    }

    fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// SIGSTOP (`stop`) or SIGCONT: the process freezes where it is, or goes on.
    pub(crate) fn freeze(&self, stop: bool) {
        let pid = self.child.lock().unwrap().id();
        let signal = if stop { "-STOP" } else { "-CONT" };
        let sent = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill {signal} failed");
    }

    /// SIGTERM, then the exit status.
    pub(crate) fn sigterm(&self) -> std::process::ExitStatus {
        let pid = self.child.lock().unwrap().id();
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        wait_until(
            &format!("relay {} to exit after SIGTERM", self.name),
            || {
                self.child
                    .lock()
                    .unwrap()
                    .try_wait()
                    .expect("poll the relay")
            },
            String::new,
        )
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The log sink's lines of a fleet's relays, in the one order they were written.
///
/// Every relay writes its stdout into the same pipe. A line is one `write` of less than
/// `PIPE_BUF` bytes, so lines never interleave, and the pipe keeps the order in which they
/// were written: if relay A wrote a line before acking its message, and relay B claimed the
/// next message of that key only after that ack, B's line comes after A's here. Reading one
/// pipe per relay in threads of their own could not promise that.
pub(crate) struct DeliveryStream {
    lines: Arc<Mutex<Vec<LogLine>>>,
    closed: Arc<AtomicBool>,
}

impl DeliveryStream {
    pub(crate) fn read(pipe: std::io::PipeReader) -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(AtomicBool::new(false));
        let (sink, done) = (Arc::clone(&lines), Arc::clone(&closed));
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let parsed: LogLine = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a log-sink line ({e}): {line}"));
                sink.lock().unwrap().push(parsed);
            }
            done.store(true, Ordering::SeqCst);
        });
        Self { lines, closed }
    }

    pub(crate) fn len(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Every line, once every writer has closed the pipe.
    pub(crate) fn finish(self) -> Vec<LogLine> {
        wait_until(
            "the relays' stdout to close",
            || self.closed.load(Ordering::SeqCst).then_some(()),
            String::new,
        );
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

/// The config of one relay of [`LANE`]/[`TARGET`] on `database_url` (and `schema`, on
/// PostgreSQL).
pub(crate) fn relay_config(database_url: &str, schema: Option<&str>, consumer_id: &str) -> String {
    let schema = schema
        .map(|schema| format!("schema = \"{schema}\"\n"))
        .unwrap_or_default();
    // Lease 2 s (extended at 1.33 s while a delivery runs), deliveries 200 ms each: a killed
    // relay always dies holding claims, and they lapse soon after. The idle poll is long, so
    // the survivors find the lapsed claims through `next_due` and their own pumping, not a
    // poll. While the database is down a store call waits for a connection up to the
    // connect timeout, then fails: at 2 s a relay reports an outage within 2 s (at 10 s the
    // MariaDB crash took 10.1 s to show in both relays' logs).
    format!(
        r#"
database_url = "{database_url}"
{schema}metrics_listen = false
connect_timeout = "2s"
shutdown_timeout = "10s"
consumer_id = "{consumer_id}"

[[lanes]]
lane = "{LANE}"
target = "{TARGET}"
concurrency = 4
lease = "2s"
retry_base = "100ms"
retry_max = "1s"
max_poll_interval = "60s"
sink = {{ kind = "log", delay = "200ms" }}
"#
    )
}

/// Relay processes on one lane, their stdout in one pipe.
pub(crate) struct Fleet {
    pub(crate) relays: Vec<RelayProcess>,
    /// Each relay's config file, in the order of `relays`.
    pub(crate) configs: Vec<PathBuf>,
    pub(crate) stream: DeliveryStream,
}

impl Fleet {
    /// Writes a config per `(name, database URL)` into `dir`, starts the relays and waits
    /// until each runs.
    pub(crate) fn start(
        dir: &Path,
        relays: &[(&'static str, String)],
        schema: Option<&str>,
    ) -> Self {
        Self::start_with(dir, relays, |url, name| relay_config(url, schema, name))
    }

    /// [`Fleet::start`] with each relay's config from `config(database URL, name)`.
    pub(crate) fn start_with(
        dir: &Path,
        relays: &[(&'static str, String)],
        config: impl Fn(&str, &str) -> String,
    ) -> Self {
        let configs: Vec<PathBuf> = relays
            .iter()
            .map(|(name, url)| {
                let path = dir.join(format!("{name}.toml"));
                std::fs::write(&path, config(url, name)).expect("write config");
                path
            })
            .collect();
        let (reader, writer) = std::io::pipe().expect("a pipe");
        let relays: Vec<RelayProcess> = relays
            .iter()
            .zip(&configs)
            .map(|((name, _), config)| {
                let stdout = Stdio::from(writer.try_clone().expect("clone the pipe"));
                RelayProcess::start(name, dir, config, stdout)
            })
            .collect();
        // Only the relays may hold the pipe open, so it closes when all have exited.
        drop(writer);
        let stream = DeliveryStream::read(reader);
        for relay in &relays {
            relay.wait_for_log("relay running");
        }
        Self {
            relays,
            configs,
            stream,
        }
    }

    /// The relay called `name`.
    pub(crate) fn relay(&self, name: &str) -> &RelayProcess {
        self.relays
            .iter()
            .find(|relay| relay.name == name)
            .unwrap_or_else(|| panic!("no relay {name} in the fleet"))
    }

    /// Fails the test if a relay that was not killed has exited.
    pub(crate) fn assert_running(&self) {
        for relay in self.relays.iter().filter(|relay| !relay.is_killed()) {
            relay.assert_alive();
        }
    }

    /// Every relay's stderr.
    pub(crate) fn stderr(&self) -> String {
        self.relays
            .iter()
            .map(RelayProcess::stderr)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERMs every relay still running, each of which must exit cleanly, and returns
    /// every line the fleet printed.
    pub(crate) fn stop(self) -> Vec<LogLine> {
        for relay in self.relays.iter().filter(|relay| !relay.is_killed()) {
            let exit = relay.sigterm();
            assert!(
                exit.success(),
                "{} exit {exit}\n{}",
                relay.name,
                relay.stderr()
            );
            assert!(relay.logged("relay stopped"), "{}", relay.stderr());
        }
        self.stream.finish()
    }
}

/// The claims `consumer` holds on the fleet's lane.
pub(crate) fn claims_of(runtime: &Runtime, store: &Outbox, consumer: &str) -> Vec<OutboxMessage> {
    runtime
        .block_on(messages(store, LANE, TARGET, Some(OutboxStatus::Claimed)))
        .into_iter()
        .filter(|m| m.claimed_by.as_deref() == Some(consumer))
        .collect()
}

/// Where every row of the lane is: a count per (status, claimed_by).
fn rows_by_state(runtime: &Runtime, store: &Outbox) -> String {
    let rows = runtime.block_on(messages(store, LANE, TARGET, None));
    let mut by_state: HashMap<(String, Option<String>), usize> = HashMap::new();
    for row in &rows {
        *by_state
            .entry((format!("{:?}", row.status), row.claimed_by.clone()))
            .or_default() += 1;
    }
    format!("rows by (status, claimed_by): {by_state:?}")
}

/// Mid-batch: waits until the fleet printed `lines` lines and `holder` holds claims.
pub(crate) fn wait_mid_batch(
    runtime: &Runtime,
    store: &Outbox,
    fleet: &Fleet,
    holder: &str,
    lines: usize,
) {
    wait_until(
        &format!("{lines} deliveries, and claims held by {holder}"),
        || {
            fleet.assert_running();
            (fleet.stream.len() >= lines && !claims_of(runtime, store, holder).is_empty())
                .then_some(())
        },
        || {
            // Which half failed (too few deliveries, or a holder holding nothing) and where
            // every row is: a timeout here once showed every relay running and nothing else.
            format!(
                "{} log-sink lines; {}\n{}",
                fleet.stream.len(),
                rows_by_state(runtime, store),
                fleet.stderr()
            )
        },
    );
}

/// Waits until all `total` messages of the lane are delivered, every relay not killed
/// running meanwhile; then checks that no row is pending, claimed or dead, and returns
/// every row.
pub(crate) fn wait_all_delivered(
    runtime: &Runtime,
    store: &Outbox,
    fleet: &Fleet,
    total: usize,
) -> Vec<OutboxMessage> {
    wait_until(
        "every message delivered",
        || {
            fleet.assert_running();
            let (_, _, delivered, _) = runtime.block_on(counts(store, LANE, TARGET));
            (delivered == total as u64).then_some(())
        },
        || {
            let c = runtime.block_on(counts(store, LANE, TARGET));
            format!(
                "(pending, claimed, delivered, dead) = {c:?}\n{}",
                fleet.stderr()
            )
        },
    );
    assert_eq!(
        runtime.block_on(counts(store, LANE, TARGET)),
        (0, 0, total as u64, 0),
        "(pending, claimed, delivered, dead)"
    );
    let rows = runtime.block_on(messages(store, LANE, TARGET, None));
    for row in &rows {
        assert_eq!(row.claimed_by, None, "{row:?}");
    }
    rows
}

/// Checks the fleet's printed lines against the delivered `rows`: every line is of the
/// lane and of a row; each row was printed, its attempts in increasing order, the last one
/// its final `attempt_count` (the attempt that was acked printed its line first). So a
/// message printed more than once was claimed again after an attempt that printed and was
/// never acked. Returns the attempts printed per message.
pub(crate) fn assert_printed_attempts(
    lines: &[LogLine],
    rows: &[OutboxMessage],
) -> HashMap<Uuid, Vec<u32>> {
    let mut printed: HashMap<Uuid, Vec<u32>> = HashMap::new();
    for line in lines {
        assert_eq!((line.lane.as_str(), line.target.as_str()), (LANE, TARGET));
        printed
            .entry(line.outbox_id)
            .or_default()
            .push(line.attempt);
    }
    for row in rows {
        let seen = printed
            .get(&row.outbox_id)
            .unwrap_or_else(|| panic!("{}: delivered, never printed", row.outbox_id));
        assert!(
            seen.windows(2).all(|pair| pair[0] < pair[1])
                && seen.last() == Some(&row.attempt_count),
            "{}: printed with attempts {seen:?}, delivered at attempt {}",
            row.outbox_id,
            row.attempt_count
        );
    }
    assert_eq!(
        printed.len(),
        rows.len(),
        "printed messages that are not rows of the lane"
    );
    printed
}
