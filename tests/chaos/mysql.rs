//! The killed relay process on MariaDB (or MySQL 8): two `outbox-relay run` processes on
//! one database and lane, one SIGKILLed mid-batch. Nothing is lost, the dead relay's claims
//! are taken over once their leases lapse (attempt 2, nothing else attempted twice), and
//! per-key order holds over both relays' output. The database is the test's own, dropped
//! when the test ends, pass or fail.

use std::collections::HashMap;
use std::process::Stdio;
use std::thread;
use std::time::Instant;

use outbox_relay::store::mysql::{MysqlConfig, MysqlOutboxStore};
use outbox_relay::{Outbox, OutboxStatus};
use uuid::Uuid;

use crate::killed_process::{DeliveryStream, RelayProcess};
use crate::{assert_first_deliveries_in_enqueue_order, counts, enqueue, messages, wait_until};

#[path = "../support/mysql.rs"]
mod support;

const LANE: &str = "chaos";
const TARGET: &str = "log";

/// The test's database and the server user the victim connects as (so its sessions can be
/// told apart), both dropped when the test ends.
struct Fixture {
    db: support::TestDatabase,
    victim_user: String,
}

impl Fixture {
    fn create(runtime: &tokio::runtime::Runtime) -> Self {
        let db = runtime.block_on(support::TestDatabase::create());
        let victim_user = format!("v{}", &Uuid::new_v4().simple().to_string()[..12]);
        runtime.block_on(async {
            let admin = support::pool_on(&support::server_url(), 1).await;
            for sql in [
                format!("CREATE USER '{victim_user}'@'%' IDENTIFIED BY 'victim'"),
                format!("GRANT ALL ON `{}`.* TO '{victim_user}'@'%'", db.name),
            ] {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(&admin)
                    .await
                    .expect("create the victim's user");
            }
        });
        Self { db, victim_user }
    }

    /// The database's URL as the victim's user.
    fn victim_url(&self) -> String {
        let mut url = url::Url::parse(&self.db.url).expect("a MySQL URL");
        url.set_username(&self.victim_user).expect("a user");
        url.set_password(Some("victim")).expect("a password");
        url.to_string()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let db = self.db.clone();
        let user = self.victim_user.clone();
        let dropped = thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .expect("a runtime")
                .block_on(async move {
                    let admin = support::pool_on(&support::server_url(), 1).await;
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP USER IF EXISTS '{user}'@'%'"
                    )))
                    .execute(&admin)
                    .await;
                    db.drop_now().await;
                })
        })
        .join();
        if dropped.is_err() {
            eprintln!("could not drop database {}", self.db.name);
        }
    }
}

fn relay_config(database_url: &str, consumer_id: &str) -> String {
    // As the PostgreSQL test: lease 2 s, deliveries 200 ms each, a long idle poll.
    format!(
        r#"
database_url = "{database_url}"
metrics_listen = false
connect_timeout = "10s"
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

#[test]
fn a_killed_relay_process_on_mysql_loses_nothing_and_keeps_per_key_order() {
    const MESSAGES: usize = 200;
    const KEYS: usize = 16;
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let fixture = Fixture::create(&runtime);
    let store: Outbox = Outbox::new(runtime.block_on(async {
        MysqlOutboxStore::connect_with(&fixture.db.url, MysqlConfig::default())
            .await
            .expect("the MySQL store")
    }));
    let mysql: &MysqlOutboxStore = store.backend().expect("a MySQL outbox");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let configs = [
        ("victim", fixture.victim_url()),
        ("survivor", fixture.db.url.clone()),
    ]
    .map(|(name, url)| {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, relay_config(&url, name)).expect("write config");
        path
    });

    let (reader, writer) = std::io::pipe().expect("a pipe");
    let stdout = |w: &std::io::PipeWriter| Stdio::from(w.try_clone().expect("clone the pipe"));
    let victim = RelayProcess::start("victim", dir.path(), &configs[0], stdout(&writer));
    let survivor = RelayProcess::start("survivor", dir.path(), &configs[1], stdout(&writer));
    drop(writer);
    let stream = DeliveryStream::read(reader);
    victim.wait_for_log("relay running");
    survivor.wait_for_log("relay running");

    let sent = runtime.block_on(enqueue(&store, LANE, TARGET, 0..MESSAGES, KEYS));
    let victim_claims = || {
        runtime
            .block_on(messages(&store, LANE, TARGET, Some(OutboxStatus::Claimed)))
            .into_iter()
            .filter(|m| m.claimed_by.as_deref() == Some("victim"))
            .collect::<Vec<_>>()
    };
    wait_until(
        "30 deliveries, and claims held by the victim",
        || {
            victim.assert_alive();
            survivor.assert_alive();
            (stream.len() >= 30 && !victim_claims().is_empty()).then_some(())
        },
        || format!("{}\n{}", victim.stderr(), survivor.stderr()),
    );
    victim.sigkill();
    let killed_at = Instant::now();
    let lines_at_kill = stream.len();
    // A statement the victim sent may still run on the server; its claims are settled once
    // its sessions are gone.
    wait_until(
        "the victim's database sessions to end",
        || {
            let sessions: i64 = runtime
                .block_on(
                    sqlx::query_scalar(
                        "SELECT COUNT(*) FROM information_schema.processlist WHERE user = ?",
                    )
                    .bind(&fixture.victim_user)
                    .fetch_one(mysql.pool()),
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
    assert!(orphans.values().all(|&a| a == 1), "{orphans:?}");

    wait_until(
        "every message delivered",
        || {
            survivor.assert_alive();
            let (_, _, delivered, _) = runtime.block_on(counts(&store, LANE, TARGET));
            (delivered == MESSAGES as u64).then_some(())
        },
        || {
            let c = runtime.block_on(counts(&store, LANE, TARGET));
            format!(
                "(pending, claimed, delivered, dead) = {c:?}\n{}",
                survivor.stderr()
            )
        },
    );
    let drained_at = Instant::now();
    assert_eq!(
        runtime.block_on(counts(&store, LANE, TARGET)),
        (0, 0, MESSAGES as u64, 0),
        "(pending, claimed, delivered, dead)"
    );
    for row in runtime.block_on(messages(&store, LANE, TARGET, None)) {
        let want = if orphans.contains_key(&row.outbox_id) {
            2
        } else {
            1
        };
        assert_eq!(row.attempt_count, want, "{}: attempts", row.outbox_id);
        assert_eq!(row.claimed_by, None, "{row:?}");
    }

    let exit = survivor.sigterm();
    assert!(
        exit.success(),
        "survivor exit {exit}\n{}",
        survivor.stderr()
    );
    let lines = stream.finish();
    let mut attempts: HashMap<Uuid, Vec<u32>> = HashMap::new();
    for line in &lines {
        assert_eq!((line.lane.as_str(), line.target.as_str()), (LANE, TARGET));
        attempts
            .entry(line.outbox_id)
            .or_default()
            .push(line.attempt);
    }
    for (id, seen) in &attempts {
        match orphans.contains_key(id) {
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
        "killed relay on MySQL: {} lines before the kill, {} orphaned claims, {} printed twice, \
         drained {:?} after the kill, test {:?}",
        lines_at_kill,
        orphans.len(),
        attempts.values().filter(|seen| seen.len() > 1).count(),
        drained_at - killed_at,
        started.elapsed()
    );
}
