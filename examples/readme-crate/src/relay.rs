use outbox_relay::sqlx::{self, PgPool};
use outbox_relay::store::postgres::{pool_options, PostgresConfig, DEFAULT_ACQUIRE_TIMEOUT};
use outbox_relay::{DeliveryHandler, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay};
use outbox_relay::{PostgresOutboxStore, RelayHandle};
use serde_json::json;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The service's pool, with the relay's session settings (`jit = off`, a statement timeout)
/// and its ping of idle connections only; the lane holds at most 3 of its 8 connections.
pub async fn pool(url: &str) -> Result<PgPool, Error> {
    let options = PostgresConfig::default().connect_options(url)?;
    let pool = pool_options(DEFAULT_ACQUIRE_TIMEOUT).max_connections(8);
    Ok(pool.connect_with(options).await?)
}

/// The relay on the service's pool, with one lane: orders → billing. It also purges what
/// the lane delivered a week ago, and dropping its handle stops it as `shutdown` would.
pub async fn start(
    pool: PgPool,
    billing: impl DeliveryHandler,
) -> Result<(Outbox, RelayHandle), Error> {
    let backend = PostgresOutboxStore::new(pool, PostgresConfig::default()).await?;
    backend.migrate().await?; // or let a DBA apply migrations/postgres/ beforehand
    let outbox = Outbox::new(backend); // counts outbox_enqueued_total, …
    let lane = LaneConfig::new("orders", "billing");
    let relay = OutboxRelay::builder(&outbox).lane(lane, billing).start().await?;
    Ok((outbox, relay))
}

/// An order and its outbox message commit together, or neither does.
pub async fn place_order(pool: &PgPool, outbox: &Outbox, order: i64) -> Result<(), Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id) VALUES ($1)").bind(order).execute(&mut *tx).await?;
    let draft = OutboxMessageDraft::new("orders", "billing", json!({ "order": order }))?;
    outbox.enqueue_in_tx(&mut tx, draft).await?;
    tx.commit().await?;
    Ok(())
}
