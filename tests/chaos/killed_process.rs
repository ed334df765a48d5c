//! A relay process killed with SIGKILL mid-batch, and the one that survives it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use outbox_relay::sinks::log::LogLine;
use outbox_relay::OutboxStatus;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::{
    assert_first_deliveries_in_enqueue_order, counts, direct_store, enqueue, messages,
    postgres_url, wait_until, with_application_name, Schema, BIN,
};

/// `outbox-relay run` as a child process, killed when dropped (a failed test leaves no
/// relay running).
pub(crate) struct RelayProcess {
    name: &'static str,
    // A mutex so that checks inside wait conditions can share the process.
    child: Mutex<Child>,
    stderr: Arc<Mutex<String>>,
}

impl RelayProcess {
    /// Starts the daemon with `config`, its stdout on `stdout` (shared by both relays: see
    /// [`DeliveryStream`]), its stderr captured.
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
        }
    }

    pub(crate) fn stderr(&self) -> String {
        format!(
            "--- relay {} stderr ---\n{}",
            self.name,
            self.stderr.lock().unwrap()
        )
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
                self.stderr.lock().unwrap().contains(text).then_some(())
            },
            || self.stderr(),
        );
    }

    /// SIGKILL: no shutdown, no release, claims left as they are.
    pub(crate) fn sigkill(&self) {
        let mut child = self.child.lock().unwrap();
        child.kill().expect("SIGKILL the relay");
        child.wait().expect("reap the relay");
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

/// The log sink's lines of both relays, in the one order they were written.
///
/// Both relays write their stdout into the same pipe. A line is one `write` of less than
/// `PIPE_BUF` bytes, so lines never interleave, and the pipe keeps the order in which they
/// were written: if relay A wrote a line before acking its message, and relay B claimed the
/// next message of that key only after that ack, B's line comes after A's here. Reading two
/// pipes in two threads could not promise that.
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

const KILL_LANE: &str = "chaos";
const KILL_TARGET: &str = "log";

fn relay_config(database_url: &str, schema: &str, consumer_id: &str) -> String {
    // Lease 2 s (extended at 1.33 s while a delivery runs), deliveries 200 ms each: a killed
    // relay always dies holding claims, and they lapse soon after. The idle poll is long, so
    // the survivor finds the lapsed claims through `next_due` and its own pumping, not a
    // poll.
    format!(
        r#"
database_url = "{database_url}"
schema = "{schema}"
metrics_listen = false
connect_timeout = "10s"
shutdown_timeout = "10s"
consumer_id = "{consumer_id}"

[[lanes]]
lane = "{KILL_LANE}"
target = "{KILL_TARGET}"
concurrency = 4
lease = "2s"
retry_base = "100ms"
retry_max = "1s"
max_poll_interval = "60s"
sink = {{ kind = "log", delay = "200ms" }}
"#
    )
}

/// Two relay processes share one schema and lane; one is SIGKILLed in the middle of its
/// deliveries. What must hold:
///
/// - every message ends `delivered`, no row stays `claimed` or `pending`, none is dead;
/// - the claims the dead relay held when it died (read from the database once its sessions
///   are gone) are taken by the survivor after their lease lapsed: each ends with
///   `attempt_count` 2 and has a log line with `attempt` 2; no other message is attempted
///   twice;
/// - at least once, precisely: a message printed twice is one the dead relay held (it wrote
///   the line, then died before its ack), printed with attempt 1 and then 2;
/// - per-key order over both relays' output (one pipe, so one true order): for each key, the
///   sequence of *first* deliveries is the key's messages in enqueue order, all of them. A
///   redelivery of a message the dead relay had already printed is allowed and ignored.
#[test]
fn a_killed_relay_process_loses_nothing_and_keeps_per_key_order() {
    const MESSAGES: usize = 200;
    const KEYS: usize = 16;
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let schema = Schema::new();
    let store = runtime.block_on(direct_store(&schema));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let victim_app = format!("{}_victim", schema.name);
    let configs = [
        (
            "victim",
            with_application_name(&postgres_url(), &victim_app),
        ),
        ("survivor", postgres_url()),
    ]
    .map(|(name, url)| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, relay_config(&url, &schema.name, name)).expect("write config");
        path
    });

    let (reader, writer) = std::io::pipe().expect("a pipe");
    let stdout = |w: &std::io::PipeWriter| Stdio::from(w.try_clone().expect("clone the pipe"));
    let victim = RelayProcess::start("victim", dir.path(), &configs[0], stdout(&writer));
    let survivor = RelayProcess::start("survivor", dir.path(), &configs[1], stdout(&writer));
    // Only the relays may hold the pipe open, so it closes when both have exited.
    drop(writer);
    let stream = DeliveryStream::read(reader);
    victim.wait_for_log("relay running");
    survivor.wait_for_log("relay running");

    let sent = runtime.block_on(enqueue(&store, KILL_LANE, KILL_TARGET, 0..MESSAGES, KEYS));
    let victim_claims = || {
        runtime
            .block_on(messages(
                &store,
                KILL_LANE,
                KILL_TARGET,
                Some(OutboxStatus::Claimed),
            ))
            .into_iter()
            .filter(|m| m.claimed_by.as_deref() == Some("victim"))
            .collect::<Vec<_>>()
    };

    // Mid-batch: deliveries flowing, the victim holding claims.
    wait_until(
        "30 deliveries, and claims held by the victim",
        || {
            victim.assert_alive();
            survivor.assert_alive();
            (stream.len() >= 30 && !victim_claims().is_empty()).then_some(())
        },
        || {
            // Which half failed (no deliveries, or a victim holding nothing) and where every
            // row is: a timeout here once showed both relays running and nothing else.
            let rows = runtime.block_on(messages(&store, KILL_LANE, KILL_TARGET, None));
            let mut by_state: HashMap<(String, Option<String>), usize> = HashMap::new();
            for row in &rows {
                *by_state
                    .entry((format!("{:?}", row.status), row.claimed_by.clone()))
                    .or_default() += 1;
            }
            format!(
                "{} log-sink lines; rows by (status, claimed_by): {by_state:?}\n{}\n{}",
                stream.len(),
                victim.stderr(),
                survivor.stderr()
            )
        },
    );
    victim.sigkill();
    let killed_at = Instant::now();
    let lines_at_kill = stream.len();
    // The server may still be running a statement the victim sent (an ack, a claim); its
    // claims are settled only once its sessions have ended.
    wait_until(
        "the victim's database sessions to end",
        || {
            let sessions: i64 = runtime
                .block_on(
                    sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    )
                    .bind(&victim_app)
                    .fetch_one(crate::pg(&store).pool()),
                )
                .expect("count sessions");
            (sessions == 0).then_some(())
        },
        String::new,
    );
    let orphans: HashMap<Uuid, u32> = victim_claims()
        .into_iter()
        .map(|m| (m.outbox_id, m.attempt_count))
        .collect();
    assert!(
        !orphans.is_empty(),
        "the victim died holding no claims: the test killed nothing in flight"
    );
    assert!(
        orphans.values().all(|&attempts| attempts == 1),
        "{orphans:?}"
    );

    wait_until(
        "every message delivered",
        || {
            survivor.assert_alive();
            let (_, _, delivered, _) = runtime.block_on(counts(&store, KILL_LANE, KILL_TARGET));
            (delivered == MESSAGES as u64).then_some(())
        },
        || {
            let c = runtime.block_on(counts(&store, KILL_LANE, KILL_TARGET));
            format!(
                "(pending, claimed, delivered, dead) = {c:?}\n{}",
                survivor.stderr()
            )
        },
    );
    let drained_at = Instant::now();
    assert_eq!(
        runtime.block_on(counts(&store, KILL_LANE, KILL_TARGET)),
        (0, 0, MESSAGES as u64, 0),
        "(pending, claimed, delivered, dead)"
    );
    let rows = runtime.block_on(messages(&store, KILL_LANE, KILL_TARGET, None));
    for row in &rows {
        let want = if orphans.contains_key(&row.outbox_id) {
            2
        } else {
            1
        };
        assert_eq!(
            row.attempt_count, want,
            "{}: attempts (the victim's orphaned claims take 2, the rest 1)",
            row.outbox_id
        );
        assert_eq!(row.claimed_by, None, "{row:?}");
    }

    // The operator's view agrees.
    let status = Command::new(BIN)
        .arg("--config")
        .arg(&configs[1])
        .args(["status", "--json"])
        .env_remove("OUTBOX_DATABASE_URL")
        .output()
        .expect("run outbox-relay status");
    assert!(status.status.success(), "{status:?}");
    let status: Vec<Value> = serde_json::from_slice(&status.stdout).expect("status --json");
    let row = status
        .iter()
        .find(|r| r["lane"] == KILL_LANE && r["target"] == KILL_TARGET)
        .expect("a status row");
    assert_eq!(
        (
            &row["delivered"],
            &row["claimed"],
            &row["pending"],
            &row["dead_letter"]
        ),
        (&json!(MESSAGES), &json!(0), &json!(0), &json!(0)),
        "{row}"
    );

    let exit = survivor.sigterm();
    assert!(
        exit.success(),
        "survivor exit {exit}\n{}",
        survivor.stderr()
    );
    assert!(survivor.stderr.lock().unwrap().contains("relay stopped"));
    let lines = stream.finish();

    for line in &lines {
        assert_eq!(
            (line.lane.as_str(), line.target.as_str()),
            (KILL_LANE, KILL_TARGET)
        );
    }
    let mut attempts: HashMap<Uuid, Vec<u32>> = HashMap::new();
    for line in &lines {
        attempts
            .entry(line.outbox_id)
            .or_default()
            .push(line.attempt);
    }
    for (id, seen) in &attempts {
        match orphans.contains_key(id) {
            // Printed by the victim before it died (then again by the survivor), or only
            // by the survivor.
            true => assert!(
                seen == &[1, 2] || seen == &[2],
                "{id}: an orphaned claim printed with attempts {seen:?}"
            ),
            false => assert_eq!(seen, &[1], "{id}: printed with attempts {seen:?}"),
        }
    }
    let order: Vec<Uuid> = lines.iter().map(|l| l.outbox_id).collect();
    assert_first_deliveries_in_enqueue_order(&sent, &order);
    eprintln!(
        "killed relay: {} lines before the kill, {} orphaned claims, {} printed twice, \
         drained {:?} after the kill, test {:?}",
        lines_at_kill,
        orphans.len(),
        attempts.values().filter(|seen| seen.len() > 1).count(),
        drained_at - killed_at,
        started.elapsed()
    );
}
