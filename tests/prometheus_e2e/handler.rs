//! The scenario's handler: each message's payload says how its delivery goes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox_relay::{DeliveryError, DeliveryHandler, OutboxMessage};
use tokio::sync::Notify;
use uuid::Uuid;

/// Does what the payload's `do` says: `ok`; `retry_once`, `permanent_once`, `panic_once`,
/// `retry_after_once` (an hour's Retry-After) (fail that way on the first call, succeed
/// after); `permanent`; `hold:<gate>` (say so on the gate's `held` signal, wait until the
/// test opens the gate, then succeed); `take:<ms>` (take that long, as a slow target does,
/// then succeed).
#[derive(Clone, Default)]
pub(crate) struct ScenarioHandler {
    called: Arc<Mutex<HashSet<Uuid>>>,
    gates: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    held: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl ScenarioHandler {
    pub(crate) fn gate(&self, name: &str) -> Arc<Notify> {
        self.gates
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Notified when a delivery starts waiting at gate `name`.
    pub(crate) fn held(&self, name: &str) -> Arc<Notify> {
        self.held
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }
}

#[async_trait]
impl DeliveryHandler for ScenarioHandler {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let first_call = self.called.lock().unwrap().insert(message.outbox_id);
        let body = message.payload.to_value().unwrap();
        let action = body["do"].as_str().unwrap_or("ok");
        match action {
            "retry_once" if first_call => Err(DeliveryError::retryable("busy, try later")),
            "permanent_once" if first_call => Err(DeliveryError::permanent("bad request")),
            "permanent" => Err(DeliveryError::permanent("bad request")),
            "panic_once" if first_call => panic!("injected handler panic"),
            "retry_after_once" if first_call => Err(DeliveryError::retry_after(
                std::time::Duration::from_secs(3600),
                "come back in an hour",
            )),
            _ => {
                if let Some(gate) = action.strip_prefix("hold:") {
                    self.held(gate).notify_one();
                    self.gate(gate).notified().await;
                }
                if let Some(ms) = action.strip_prefix("take:") {
                    let ms = ms.parse().expect("take:<milliseconds>");
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                Ok(())
            }
        }
    }
}
