use std::time::Duration;

use outbox_relay::sqlx; // the sqlx the relay is built on: no second version to match
use outbox_relay::{
    async_trait, DeliveryError, DeliveryHandler, LaneConfig, Outbox, OutboxMessage,
    OutboxMessageDraft, OutboxRelay, RelayEvent, SqliteOutboxStore,
};

struct Billing;

#[async_trait]
impl DeliveryHandler for Billing {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        // `message.outbox_id` is the idempotency key: at-least-once means a target may see
        // a message twice after a crash, and should drop the second.
        publish(message).await.map_err(DeliveryError::retryable)
    }
}

async fn publish(message: &OutboxMessage) -> Result<(), std::io::Error> {
    println!("billing {}: {}", message.outbox_id, message.payload.as_str());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One outbox for the service and its relay (it records the store metrics).
    let store = Outbox::new(SqliteOutboxStore::open("outbox.db").await?);
    let relay = OutboxRelay::builder(&store)
        .lane(LaneConfig::new("orders", "billing").concurrency(16), Billing)
        .start()
        .await?;
    let mut events = relay.subscribe();

    // The order and its outbox message commit together, or neither does.
    let mut tx = store.begin().await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total INTEGER)")
        .execute(tx.connection())
        .await?;
    let order: i64 = sqlx::query_scalar("INSERT INTO orders (total) VALUES (?) RETURNING id")
        .bind(1999_i64)
        .fetch_one(tx.connection())
        .await?;
    let draft = OutboxMessageDraft::new("orders", "billing", serde_json::json!({"order": order}))?;
    let sent = tx.enqueue(draft).await?.message.outbox_id;
    tx.commit().await?;

    // ... serve requests; relay.status(), pause/resume/add_lane/remove_lane at run time ...
    loop {
        if let RelayEvent::Delivered { outbox_id, .. } = events.recv().await? {
            if outbox_id == sent {
                break;
            }
        }
    }
    let report = relay.shutdown(Duration::from_secs(10)).await?; // finish in-flight, release the rest
    assert!(report.is_clean(), "{report:?}");
    Ok(())
}
