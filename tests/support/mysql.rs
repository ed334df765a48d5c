//! What every MySQL/MariaDB test shares: a database of its own per test (created on the
//! server at `OUTBOX_TEST_MYSQL_URL`, default `mysql://root@127.0.0.1:3306/test`, MariaDB
//! in CI; or, for the tests that run on both dialects, on the Oracle MySQL server at
//! `OUTBOX_TEST_MYSQL8_URL`, default `mysql://root@127.0.0.1:3307/test`), dropped at the
//! end, and a store on it. When a server is unreachable the tests panic with a message
//! saying so: nothing is skipped.

#![allow(dead_code, unreachable_pub)]

#[cfg(feature = "testing")]
use std::sync::Arc;

use outbox_relay::store::mysql::{Dialect, MysqlConfig, MysqlOutboxStore};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use uuid::Uuid;

/// The default test server and database.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// The default Oracle MySQL server and database (`.ci/mysql-sid` starts it).
pub const DEFAULT_MYSQL8_URL: &str = "mysql://root@127.0.0.1:3307/test";

/// Which test server a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `OUTBOX_TEST_MYSQL_URL`: MariaDB in CI, or any server of either dialect.
    Main,
    /// `OUTBOX_TEST_MYSQL8_URL`: Oracle MySQL; a test on it fails when the server there
    /// speaks another dialect.
    OracleMysql,
}

impl Server {
    /// Its URL: the variable, or the default.
    pub fn url(self) -> String {
        let (variable, default) = match self {
            Server::Main => ("OUTBOX_TEST_MYSQL_URL", DEFAULT_MYSQL_URL),
            Server::OracleMysql => ("OUTBOX_TEST_MYSQL8_URL", DEFAULT_MYSQL8_URL),
        };
        std::env::var(variable).unwrap_or_else(|_| default.to_owned())
    }

    /// The dialect the server must speak, when the test requires one.
    pub fn required_dialect(self) -> Option<Dialect> {
        match self {
            Server::Main => None,
            Server::OracleMysql => Some(Dialect::MySql),
        }
    }
}

/// The main test server's URL: `OUTBOX_TEST_MYSQL_URL`, or the default.
pub fn server_url() -> String {
    Server::Main.url()
}

/// A pool on `url`, panicking with a clear message when the server is down.
pub async fn pool_on(url: &str, max: u32) -> MySqlPool {
    let options: MySqlConnectOptions = url.parse().expect("a MySQL URL");
    MySqlPoolOptions::new()
        .max_connections(max)
        .connect_with(options)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "MySQL/MariaDB is required for these tests and is unreachable at {url} ({error}). \
                 Start it (.ci/run does; .ci/mysql-sid for Oracle MySQL on :3307), or point \
                 OUTBOX_TEST_MYSQL_URL (and OUTBOX_TEST_MYSQL8_URL) at one."
            )
        })
}

/// A database no other test uses, created empty; dropped when the guard's `drop_now` runs.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    /// Its name.
    pub name: String,
    /// A URL that connects to it.
    pub url: String,
    /// The server it is on.
    pub server: Server,
}

impl TestDatabase {
    /// Creates a fresh database on the main test server.
    pub async fn create() -> Self {
        Self::create_on(Server::Main).await
    }

    /// Creates a fresh database on `on`.
    pub async fn create_on(on: Server) -> Self {
        let name = format!("t_{}", Uuid::new_v4().simple());
        let server = on.url();
        let admin = pool_on(&server, 1).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .execute(&admin)
            .await
            .expect("create test database");
        admin.close().await;
        let base = match server.rfind('/') {
            Some(slash) if slash > "mysql://".len() => &server[..slash],
            _ => server.as_str(),
        };
        let url = format!("{base}/{name}");
        Self {
            name,
            url,
            server: on,
        }
    }

    /// A pool on this database.
    pub async fn pool(&self, max: u32) -> MySqlPool {
        pool_on(&self.url, max).await
    }

    /// Drops the database and everything in it.
    pub async fn drop_now(&self) {
        let admin = pool_on(&self.server.url(), 1).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS `{}`",
            self.name
        )))
        .execute(&admin)
        .await
        .expect("drop test database");
        admin.close().await;
    }
}

/// A migrated store on a pool of its own over `db`, with `config`; on a server that must
/// speak one dialect, checked to.
pub async fn open(db: &TestDatabase, config: MysqlConfig) -> MysqlOutboxStore {
    let store = MysqlOutboxStore::new(db.pool(8).await, config).expect("store");
    store.migrate().await.expect("migrate");
    if let Some(required) = db.server.required_dialect() {
        let found = store.dialect().await.expect("the server's dialect");
        assert_eq!(
            found,
            required,
            "the server at {} speaks {found}, and these tests are for {required}",
            db.server.url()
        );
    }
    store
}

/// A fresh store in a database of its own on the main server, on a manual clock, for the
/// conformance suite.
#[cfg(feature = "testing")]
pub async fn harness() -> outbox_relay::testing::Harness {
    harness_on(Server::Main).await
}

/// The same on the Oracle MySQL server.
#[cfg(feature = "testing")]
pub async fn harness_oracle_mysql() -> outbox_relay::testing::Harness {
    harness_on(Server::OracleMysql).await
}

/// A fresh store in a database of its own on `on`, on a manual clock.
#[cfg(feature = "testing")]
pub async fn harness_on(on: Server) -> outbox_relay::testing::Harness {
    use outbox_relay::testing::Harness;
    use outbox_relay::time::UnixMillis;
    use outbox_relay::time::{Clock, ManualClock};
    use outbox_relay::Outbox;

    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let db = TestDatabase::create_on(on).await;
    let config = MysqlConfig::default().clock(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let store = Outbox::new(open(&db, config.clone()).await);
    let dropped = db.clone();
    Harness {
        store,
        clock,
        cleanup: Some(Box::pin(async move { dropped.drop_now().await })),
        reopen: Arc::new(move || {
            let config = config.clone();
            let db = db.clone();
            Box::pin(async move { Outbox::new(open(&db, config).await) })
        }),
    }
}
