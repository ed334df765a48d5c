//! The README's embedding, run as a user's service would run it: `relay.rs` is the README's
//! snippet, character for character (`tests/readme_crate.rs`); this file is the service
//! around it. It makes a database of its own on the PostgreSQL server of
//! `OUTBOX_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`), places
//! an order through the snippet, waits until the relay delivered its message, shuts down
//! and drops the database.

mod relay;

use std::time::Duration;

use outbox_relay::sqlx::{self, postgres::PgPoolOptions, Connection, PgConnection};
use outbox_relay::{async_trait, DeliveryError, DeliveryHandler, OutboxMessage, RelayEvent};

struct Billing;

#[async_trait]
impl DeliveryHandler for Billing {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        println!("billing {}: {}", message.outbox_id, message.payload.as_str());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), relay::Error> {
    let server = std::env::var("OUTBOX_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let database = format!("readme_{}", std::process::id());
    let mut admin = PgConnection::connect(&server).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    let outcome = run(&database_url(&server, &database)).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE {database} WITH (FORCE)")))
        .execute(&mut admin)
        .await?;
    outcome
}

/// The server's URL with another database.
fn database_url(server: &str, database: &str) -> String {
    let (base, _) = server.rsplit_once('/').unwrap_or((server, ""));
    format!("{base}/{database}")
}

async fn run(url: &str) -> Result<(), relay::Error> {
    let pool = PgPoolOptions::new().max_connections(8).connect(url).await?;
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .execute(&pool)
        .await?;
    let (outbox, relay) = relay::start(pool.clone(), Billing).await?;
    let mut events = relay.subscribe();
    relay::place_order(&pool, &outbox, 42).await?;
    let delivered = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let RelayEvent::Delivered { .. } = events.recv().await? {
                return Ok::<_, relay::Error>(());
            }
        }
    });
    delivered.await.map_err(|_| "the order's message was not delivered within 60 s")??;
    let report = relay.shutdown(Duration::from_secs(10)).await?;
    assert!(report.is_clean(), "{report:?}");
    pool.close().await;
    Ok(())
}
