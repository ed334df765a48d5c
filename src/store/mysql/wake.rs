//! Wake-ups from other processes without `NOTIFY`: an adaptive poll of the newest enqueue
//! sequence.
//!
//! While anybody subscribes to the store's wake-ups, one task per store reads
//! `MAX(seq)` of the messages table (the end of the primary key: one index dive) every
//! interval. When it moved, the task reads which (lane, target)s the new rows belong to (a
//! primary-key range of just those rows) and wakes them, then polls again after
//! [`WATCH_MIN_INTERVAL`]. Each poll that finds nothing new doubles the interval, up to
//! [`WATCH_MAX_INTERVAL`]: an idle process costs the database one index dive a second, a
//! busy one sees the next message within tens of milliseconds. So a message enqueued by
//! another process wakes this process's idle lane within [`WATCH_MAX_INTERVAL`] plus one
//! round trip (`tests/mysql/wakeups.rs` measures it), instead of the relay's poll ceiling.
//!
//! What the sequence does not show (a requeue or release by another process) is found by
//! the relay's own poll (`max_poll_interval`), as on SQLite.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::mysql::MySqlPool;
use sqlx::AssertSqlSafe;
use tokio::sync::broadcast;

use crate::store::WakeUp;

use super::row::text;
use super::schema::Names;

/// The shortest interval between two polls: right after one that found new messages.
pub const WATCH_MIN_INTERVAL: Duration = Duration::from_millis(50);
/// The longest interval between two polls, reached after a quiet second or so.
pub const WATCH_MAX_INTERVAL: Duration = Duration::from_secs(1);
/// More new rows than this in one poll wake every lane instead of reading their lanes.
const MAX_ROWS_READ: i64 = 10_000;

/// The running poll, if any.
#[derive(Debug, Default)]
pub(super) struct Watch {
    running: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Watch {
    /// Starts the poll unless it runs (it ends when nobody subscribes any more, or the store
    /// is dropped). Outside a tokio runtime it does nothing: wake-ups then come from this
    /// process's enqueues only.
    pub(super) fn ensure(
        &self,
        pool: &MySqlPool,
        names: &Names,
        wakeups: &Arc<broadcast::Sender<WakeUp>>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut running = match self.running.lock() {
            Ok(running) => running,
            Err(poisoned) => poisoned.into_inner(),
        };
        if running.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let pool = pool.clone();
        let statements = Statements {
            newest: Arc::clone(&names.sql.newest_seq),
            lanes_between: Arc::clone(&names.sql.lanes_between),
        };
        let wakeups = Arc::downgrade(wakeups);
        *running = Some(runtime.spawn(poll(pool, statements, wakeups)));
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(mut running) = self.running.lock() {
            if let Some(task) = running.take() {
                task.abort();
            }
        }
    }
}

/// The poll's two statements, for the store's prefix.
struct Statements {
    newest: Arc<str>,
    lanes_between: Arc<str>,
}

async fn poll(pool: MySqlPool, statements: Statements, wakeups: Weak<broadcast::Sender<WakeUp>>) {
    let mut seen: Option<i64> = None;
    let mut interval = WATCH_MIN_INTERVAL;
    loop {
        match wakeups.upgrade() {
            Some(sender) if sender.receiver_count() > 0 => {}
            _ => return,
        }
        let newest: Result<Option<i64>, sqlx::Error> =
            sqlx::query_scalar(AssertSqlSafe(Arc::clone(&statements.newest)))
                .fetch_one(&pool)
                .await;
        let moved = match (newest, seen) {
            (Ok(newest), None) => {
                // The first poll only sets where new rows start.
                seen = Some(newest.unwrap_or(0));
                false
            }
            (Ok(Some(newest)), Some(last)) if newest > last => {
                let woken = lanes_between(&pool, &statements.lanes_between, last, newest).await;
                if let Some(sender) = wakeups.upgrade() {
                    match woken {
                        Some(lanes) => {
                            for (lane, target) in lanes {
                                let _ = sender.send(WakeUp::Lane { lane, target });
                            }
                        }
                        None => {
                            let _ = sender.send(WakeUp::All);
                        }
                    }
                }
                seen = Some(newest);
                true
            }
            (Ok(_), Some(_)) => false,
            (Err(error), _) => {
                tracing::debug!(%error, "the wake-up poll could not read the newest sequence");
                false
            }
        };
        interval = if moved {
            WATCH_MIN_INTERVAL
        } else {
            (interval * 2).min(WATCH_MAX_INTERVAL)
        };
        tokio::time::sleep(interval).await;
    }
}

/// The (lane, target)s of the rows after `last` up to `newest`; `None` when there are too
/// many to read (wake every lane) or the read failed.
async fn lanes_between(
    pool: &MySqlPool,
    sql: &Arc<str>,
    last: i64,
    newest: i64,
) -> Option<Vec<(String, String)>> {
    if newest - last > MAX_ROWS_READ {
        return None;
    }
    let rows = sqlx::query(AssertSqlSafe(Arc::clone(sql)))
        .bind(last)
        .bind(newest)
        .fetch_all(pool)
        .await
        .ok()?;
    rows.iter()
        .map(|row| Some((text(row, "lane").ok()?, text(row, "target").ok()?)))
        .collect()
}
