//! TLS to PostgreSQL: the test starts its own cluster with `ssl=on` and a certificate
//! signed by a CA it makes itself (openssl), then connects with `sslmode=require`, and with
//! `verify-full` against that CA. Without the CA, `verify-full` must refuse the server.
//!
//! The cluster is `tests/support/postgres_cluster.rs`'s; it and `openssl` fail the test
//! loudly when missing.

use std::path::PathBuf;
use std::time::Duration;

use outbox_relay::store::postgres::{PostgresConfig, PostgresOutboxStore};
use outbox_relay::store::ClaimRequest;
use outbox_relay::{Outbox, OutboxMessageDraft};
use serde_json::json;
use sqlx::{ConnectOptions, Connection};

#[path = "support/certificates.rs"]
mod certificates;
#[path = "support/postgres_cluster.rs"]
mod postgres_cluster;

use postgres_cluster::Cluster;

/// A cluster with `ssl = on` and a certificate for localhost and 127.0.0.1 signed by the
/// test's CA (`ca.pem` in the cluster's directory), that takes TLS connections only: a plain
/// one is refused, so a passing test used TLS.
fn tls_cluster() -> (Cluster, PathBuf) {
    let mut ca = PathBuf::new();
    let cluster = Cluster::start_with(|root| {
        certificates::make_certificates(root, "outbox-relay test CA", "server");
        ca = root.join("ca.pem");
        let conf = "ssl = on\nssl_cert_file = '../server.pem'\nssl_key_file = '../server.key'\nfsync = off";
        let hba = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";
        (conf.to_owned(), Some(hba.to_owned()))
    });
    (cluster, ca)
}

fn url(cluster: &Cluster, host: &str, params: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?{params}",
        cluster.port()
    )
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
    let (cluster, ca) = tls_cluster();
    let require = url(&cluster, "127.0.0.1", "sslmode=require");
    assert!(session_uses_tls(&require).await);
    round_trip(&require).await;

    let verify = url(
        &cluster,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    assert!(session_uses_tls(&verify).await);
    round_trip(&verify).await;

    // Without the CA the self-signed chain is not trusted: verification is real.
    let untrusted = url(&cluster, "localhost", "sslmode=verify-full");
    let refused = PostgresOutboxStore::connect_with(&untrusted, PostgresConfig::default()).await;
    assert!(refused.is_err(), "verify-full trusted an unknown CA");
}
