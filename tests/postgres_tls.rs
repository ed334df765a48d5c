//! TLS to PostgreSQL: the test starts its own cluster with `ssl=on` and a certificate
//! signed by a CA it makes itself (openssl), then connects with `sslmode=require`, and with
//! `verify-full` against that CA. Without the CA, `verify-full` must refuse the server.
//!
//! Needs PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`: initdb, pg_ctl) and
//! `openssl`; a missing one fails the test, loudly. As root, the cluster runs as the
//! `postgres` user (initdb refuses root).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::ClaimRequest;
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;
use sqlx::{ConnectOptions, Connection};

#[path = "support/certificates.rs"]
mod certificates;

/// The directory holding initdb and pg_ctl.
fn postgres_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries under /usr/lib/postgresql")
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    found.pop().expect("initdb under /usr/lib/postgresql/*/bin")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `program`, to be run as the `postgres` user when we are root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Runs `program args` (as `postgres` when we are root); fails the test if it fails.
fn run(program: &Path, args: &[&str]) {
    let out = as_postgres(program)
        .args(args)
        .output()
        .expect("run a PostgreSQL tool");
    assert!(
        out.status.success(),
        "{} {args:?}: {}\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A PostgreSQL cluster of the test's own, stopped when dropped.
struct Cluster {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    port: u16,
    ca: PathBuf,
}

impl Cluster {
    fn start() -> Self {
        let bin = postgres_bin();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        certificates::make_certificates(&root, "outbox-relay test CA", "server");
        let data = root.join("data");
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&root)
                .status()
                .unwrap();
            assert!(status.success(), "chown the cluster directory");
        }
        run(
            &bin.join("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{root}'\n\
             ssl = on\nssl_cert_file = '{root}/server.pem'\nssl_key_file = '{root}/server.key'\n\
             fsync = off\n",
            root = root.display()
        );
        let conf_path = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).unwrap();
        text.push_str(&conf);
        std::fs::write(&conf_path, text).unwrap();
        // TLS connections only: a plain one is refused, so a passing test used TLS.
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        run(
            &bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                root.join("server.log").to_str().unwrap(),
                "-w",
                "-t",
                "120",
                "start",
            ],
        );
        Self {
            ca: root.join("ca.pem"),
            _dir: dir,
            data,
            bin,
            port,
        }
    }

    fn url(&self, host: &str, params: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres?{params}", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Pass or fail, the test's server must not outlive it.
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "stop"])
            .output();
    }
}

/// Whether the session `url` opens is encrypted, as the server sees it.
async fn session_uses_tls(url: &str) -> bool {
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let mut conn = options
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let _ = conn.close().await;
    ssl
}

async fn round_trip(url: &str) {
    let store = Outbox::new(
        PostgresOutboxStore::connect_with(url, PostgresConfig::default())
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}")),
    );
    let sent = store
        .enqueue(OutboxMessageDraft::new("orders", "billing", json!({"n": 1})).unwrap())
        .await
        .unwrap();
    let claimed = store
        .claim(&ClaimRequest::new(
            "orders",
            "billing",
            10,
            Duration::from_secs(30),
            "tls-test",
        ))
        .await
        .unwrap();
    assert_eq!(
        claimed.messages.first().map(|m| m.outbox_id),
        Some(sent.message.outbox_id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_over_tls_with_require_and_verify_full() {
    let cluster = Cluster::start();
    let require = cluster.url("127.0.0.1", "sslmode=require");
    assert!(session_uses_tls(&require).await);
    round_trip(&require).await;

    let verify = cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", cluster.ca.display()),
    );
    assert!(session_uses_tls(&verify).await);
    round_trip(&verify).await;

    // Without the CA the self-signed chain is not trusted: verification is real.
    let untrusted = cluster.url("localhost", "sslmode=verify-full");
    let refused = PostgresOutboxStore::connect_with(&untrusted, PostgresConfig::default()).await;
    assert!(refused.is_err(), "verify-full trusted an unknown CA");
}
