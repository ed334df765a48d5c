use outbox_relay::sqlx::{self, PgPool};
use outbox_relay::store::postgres::PostgresConfig;
use outbox_relay::{DeliveryHandler, LaneConfig, Outbox, OutboxMessageDraft, OutboxRelay};
use outbox_relay::{PostgresOutboxStore, RelayHandle};
use serde_json::json;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The relay on the service's own pool, with one lane: orders → billing.
pub async fn start(
    pool: PgPool,
    billing: impl DeliveryHandler,
) -> Result<(Outbox, RelayHandle), Error> {
    let backend = PostgresOutboxStore::new(pool, PostgresConfig::default()).await?;
    backend.migrate().await?; // or let a DBA apply migrations/postgres/ beforehand
    let outbox = Outbox::new(backend);
    let lane = LaneConfig::new("orders", "billing");
    let relay = OutboxRelay::builder(outbox.clone()).lane(lane, billing).start().await?;
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
