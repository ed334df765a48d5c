//! The LISTEN side of wake-ups: one background task per store forwards the outbox channel's
//! notifications to the store's broadcast channel.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::{broadcast, oneshot};

use crate::retry::RetryPolicy;
use crate::store::StoreOp;
use crate::store::{StoreError, WakeUp};

/// The payload of the notification a lane pause or resume sends: no (lane, target) can
/// write it (it starts with the tab that separates them, and a lane is never empty), and
/// a relay of a build that does not know it reads it as "every lane should look".
pub(super) const LANE_CONTROL_PAYLOAD: &str = "\tlane_control";

use super::row::db_error;

/// The first wait before listening again after the connection was lost.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between attempts to listen again.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Keeps the listener task alive; dropping it (with the store) ends the task.
#[derive(Debug)]
pub(crate) struct ListenerGuard {
    _stop: oneshot::Sender<()>,
}

/// Starts listening on `channel` over a connection of its own (never one of the store's
/// pool, which it would hold forever), made with `options` (`PostgresConfig::listen_url`)
/// or else the pool's, and returns once LISTEN took effect: a subscriber that subscribes
/// after the store was built misses nothing.
pub(crate) async fn start(
    store_pool: &PgPool,
    options: Option<PgConnectOptions>,
    channel: String,
    wakeups: broadcast::Sender<WakeUp>,
) -> Result<ListenerGuard, StoreError> {
    let options = options.unwrap_or_else(|| (*store_pool.connect_options()).clone());
    // The store pool's acquire timeout: a store over a pool that gives up after 2 s should
    // not wait sqlx's default 30 s for its listener.
    let pool = PgPoolOptions::new()
        .acquire_timeout(store_pool.options().get_acquire_timeout())
        .max_connections(1)
        .min_connections(0)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options);
    let listener = listen(&pool, &channel).await?;
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(forward(pool, listener, channel, wakeups, stopped));
    Ok(ListenerGuard { _stop: stop })
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, StoreError> {
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(|e| db_error(StoreOp::Listen, e))?;
    listener
        .listen(channel)
        .await
        .map_err(|e| db_error(StoreOp::Listen, e))?;
    Ok(listener)
}

/// Forwards notifications until the store is dropped. When the connection drops it listens
/// again, with backoff, and then sends [`WakeUp::All`]: whatever was notified meanwhile is
/// lost, so every lane should look.
async fn forward(
    pool: PgPool,
    mut listener: PgListener,
    channel: String,
    wakeups: broadcast::Sender<WakeUp>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        let received = tokio::select! {
            _ = &mut stopped => return,
            received = listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => {
                // A send error only means nobody subscribed yet: nobody is waiting.
                let _ = wakeups.send(parse(notification.payload()));
            }
            // The connection dropped and PgListener already listens again on a new one.
            Ok(None) => {
                let _ = wakeups.send(WakeUp::All);
            }
            Err(error) => {
                tracing::warn!(%error, channel, "outbox wake-up listener lost its connection");
                // A listener that failed this way (a reset connection, say) may still hold
                // its connection, the only one its pool allows: while it lives, no new
                // listener can get one, and every attempt below would time out. Dropping it
                // hands the connection back (closed, since it is broken).
                drop(listener);
                // The same backoff as the lanes' store errors and the supervisor's restarts.
                let backoff =
                    RetryPolicy::new(RECONNECT_BACKOFF_MIN, RECONNECT_BACKOFF_MAX).jitter(false);
                let mut attempts = 1;
                listener = loop {
                    tokio::select! {
                        _ = &mut stopped => return,
                        _ = tokio::time::sleep(backoff.backoff(attempts)) => {}
                    }
                    match listen(&pool, &channel).await {
                        Ok(listener) => break listener,
                        Err(error) => {
                            tracing::warn!(%error, channel, "outbox wake-up listener cannot listen yet");
                            attempts = attempts.saturating_add(1);
                        }
                    }
                };
                tracing::info!(channel, "outbox wake-up listener listens again");
                let _ = wakeups.send(WakeUp::All);
            }
        }
    }
}

/// `lane<TAB>target`, as the store's statements notify. Anything else (someone else
/// notifying on our channel) wakes every lane rather than being dropped.
fn parse(payload: &str) -> WakeUp {
    if payload == LANE_CONTROL_PAYLOAD {
        return WakeUp::LaneControl;
    }
    match payload.split_once('\t') {
        Some((lane, target)) if !lane.is_empty() && !target.is_empty() => WakeUp::Lane {
            lane: lane.to_owned(),
            target: target.to_owned(),
        },
        _ => WakeUp::All,
    }
}

#[cfg(test)]
mod tests;
