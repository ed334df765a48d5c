//! Checkpoints off the write path: the WAL's pages are copied back into the database file
//! by a connection of their own, in the background, instead of by whichever commit crossed
//! SQLite's threshold.
//!
//! Why: with `wal_autocheckpoint` the commit that finds the WAL past 1,000 pages runs the
//! checkpoint before it returns: it copies every page written since the last one into the
//! database file and syncs the file, while the store's write turn is held. Every claim and
//! ack queued behind it waits, and that commit is the claim's p99. Here each write commit
//! counts itself; after [`COMMITS_PER_CHECKPOINT`] a task checkpoints on its own connection:
//!
//! 1. `PRAGMA wal_checkpoint(PASSIVE)` without the write turn: the bulk of the copying and
//!    both syncs, beside the relay's commits (SQLite lets a checkpoint run while another
//!    connection writes);
//! 2. once the WAL holds [`RESTART_PAGES`] or more, the same again holding the write turn:
//!    it copies only what was committed during the first, so the WAL is fully checkpointed
//!    when the next write begins, and that write starts the WAL over from its beginning.
//!    Without this step a busy writer keeps appending while the checkpoint runs, the
//!    checkpoint never catches up, and the WAL file only grows. It costs the writers a
//!    wait (it syncs the WAL and the file), so it runs only every few thousand pages.
//!
//! The write connection keeps an automatic checkpoint at [`FALLBACK_AUTOCHECKPOINT`] pages,
//! ten times SQLite's default: should the task not run (its runtime gone, its checkpoints
//! failing), the WAL is still bounded, as it would be without it.

use std::sync::Arc;
use std::time::Instant;

use sqlx::sqlite::SqlitePool;
use sqlx::Row;
use tokio::sync::Mutex;

use crate::store::periodic::Periodic;

/// Write commits between two background checkpoints. A relay's claim or ack writes tens of
/// pages, so this checkpoints around SQLite's own threshold of 1,000 pages at a busy
/// relay's rates, and a quiet store checkpoints rarely.
pub(super) const COMMITS_PER_CHECKPOINT: u64 = 32;

/// The WAL's size (pages) from which a checkpoint takes the write turn for its second pass
/// and so starts the WAL over: 16 MiB of 4 KiB pages.
pub(super) const RESTART_PAGES: i64 = 4_000;

/// The write connection's `wal_autocheckpoint` (pages) while checkpoints run in the
/// background: the bound on the WAL should they stop.
pub(super) const FALLBACK_AUTOCHECKPOINT: u32 = 10_000;

/// Counts write commits and starts a checkpoint once enough have gone since the last.
#[derive(Debug)]
pub(super) struct Checkpoints {
    /// The checkpoints' own connection; `None` when they run in the writer (SQLite's
    /// automatic checkpoint), as configured.
    pool: Option<SqlitePool>,
    /// Commits since the last checkpoint began, and whether one is running.
    periodic: Periodic,
    /// [`RESTART_PAGES`], but for tests.
    restart_pages: i64,
}

impl Checkpoints {
    /// Background checkpoints on `pool` (one connection), or none; the WAL starts over
    /// once it holds `restart_pages`.
    pub(super) fn new(pool: Option<SqlitePool>, restart_pages: i64) -> Self {
        Self {
            pool,
            periodic: Periodic::new(COMMITS_PER_CHECKPOINT),
            restart_pages,
        }
    }

    /// A write transaction committed. Every [`COMMITS_PER_CHECKPOINT`], unless one is still
    /// running, starts a checkpoint in the background and returns at once; `turn` is the
    /// store's write turn, taken for the checkpoint's second pass.
    pub(super) fn committed(&self, turn: &Arc<Mutex<()>>) {
        let Some(pool) = &self.pool else {
            return;
        };
        let Some(running) = self.periodic.tick(1) else {
            return;
        };
        let (pool, turn) = (pool.clone(), turn.clone());
        let restart_pages = self.restart_pages;
        // Outside a runtime (a store used from blocking code) there is nowhere to run it:
        // the writer's automatic checkpoint keeps the WAL bounded instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let started = Instant::now();
            match checkpoint(&pool, &turn, restart_pages).await {
                Ok(pages) => tracing::debug!(
                    pages,
                    took_ms = started.elapsed().as_millis() as u64,
                    "SQLite WAL checkpointed"
                ),
                // `close()` ended it: nothing went wrong.
                Err(_) if pool.is_closed() => {}
                Err(error) => tracing::warn!(%error, "SQLite WAL checkpoint failed"),
            }
            drop(running);
        });
    }

    /// Closes the checkpoints' connection, waiting for a checkpoint in progress to finish.
    pub(super) async fn close(&self) {
        if let Some(pool) = &self.pool {
            pool.close().await;
        }
    }
}

/// The passes (module docs); answers the pages the WAL held at the end.
async fn checkpoint(
    pool: &SqlitePool,
    turn: &Mutex<()>,
    restart_pages: i64,
) -> Result<i64, sqlx::Error> {
    let pages = passive(pool).await?;
    if pages < restart_pages {
        return Ok(pages);
    }
    let _turn = turn.lock().await;
    passive(pool).await
}

/// `PRAGMA wal_checkpoint(PASSIVE)`: copies what no reader still needs, waits for nobody.
/// Answers its second column, the pages in the WAL.
async fn passive(pool: &SqlitePool) -> Result<i64, sqlx::Error> {
    let row = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(pool)
        .await?;
    row.try_get(1)
}
