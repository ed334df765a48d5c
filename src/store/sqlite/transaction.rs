//! `SqliteOutboxTx`: a service's own write transaction on the outbox file, so business rows
//! and outbox messages commit or roll back together, the SQLite counterpart of the
//! PostgreSQL store's `enqueue_in_tx`.
//!
//! Why on the store's write connection, under its write turn: SQLite has one writer per
//! file. A transaction on another connection would contend with the relay's claims at the
//! file lock (and fail with `SQLITE_BUSY` after the busy timeout); taking the store's turn
//! queues it fairly behind them instead.

use sqlx::sqlite::SqliteConnection;
use sqlx::{Sqlite, Transaction};
use tokio::sync::MutexGuard;

use crate::message::OutboxMessageDraft;
use crate::store::StoreOp;
use crate::store::{enqueue, CallOutcome, Enqueued, Outbox, StoreError};

use super::row::db;
use super::write::{self, Woken};
use super::{Commit, SqliteOutboxStore};

/// An open write transaction on the outbox's database file, from [`Outbox::begin`]. Run
/// business statements on
/// [`SqliteOutboxTx::connection`], enqueue with [`SqliteOutboxTx::enqueue`], then
/// [`SqliteOutboxTx::commit`]. Dropping it without committing rolls everything back.
///
/// While it is open, the store's other writes (relay claims and acks) wait: keep it short.
pub struct SqliteOutboxTx<'a> {
    store: &'a SqliteOutboxStore,
    /// Whose hooks hear of the messages at commit.
    outbox: &'a Outbox,
    _turn: MutexGuard<'a, ()>,
    tx: Transaction<'static, Sqlite>,
    woken: Woken,
    enqueued: Vec<Enqueued>,
}

impl std::fmt::Debug for SqliteOutboxTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteOutboxTx")
            .field("path", &self.store.path())
            .field("enqueued", &self.enqueued.len())
            .finish()
    }
}

impl SqliteOutboxStore {
    /// Begins a write transaction for business rows and outbox messages together, for
    /// [`Outbox::begin`].
    pub(crate) async fn begin<'a>(
        &'a self,
        outbox: &'a Outbox,
    ) -> Result<SqliteOutboxTx<'a>, StoreError> {
        let (turn, tx) = self.begin_write(StoreOp::Enqueue, Commit::Durable).await?;
        Ok(SqliteOutboxTx {
            store: self,
            outbox,
            _turn: turn,
            tx,
            woken: Woken::new(),
            enqueued: Vec::new(),
        })
    }
}

impl SqliteOutboxTx<'_> {
    /// The transaction's connection, for the service's own statements.
    pub fn connection(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    /// Enqueues one message inside the transaction (validated first; dedupe as in
    /// [`Outbox::enqueue`]).
    pub async fn enqueue(&mut self, draft: OutboxMessageDraft) -> Result<Enqueued, StoreError> {
        crate::store::backend::single(self.enqueue_many(vec![draft]).await?)
    }

    /// Enqueues many messages inside the transaction. An invalid draft or a dedupe conflict
    /// writes none of them; the transaction stays open for the caller to decide.
    pub async fn enqueue_many(
        &mut self,
        drafts: Vec<OutboxMessageDraft>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let (batch, plan) = enqueue::plan(drafts, &self.store.limits)?;
        let now = self.store.clock.now_millis();
        let written =
            write::enqueue(&self.store.sql, &mut self.tx, batch, now, &mut self.woken).await?;
        let answers = plan.answers(written)?;
        self.enqueued.extend(answers.iter().cloned());
        Ok(answers)
    }

    /// Commits business rows and messages together, then wakes the lanes that got work.
    pub async fn commit(self) -> Result<Vec<Enqueued>, StoreError> {
        let started = std::time::Instant::now();
        let Self {
            store,
            outbox,
            _turn,
            tx,
            woken,
            enqueued,
        } = self;
        store.finish(tx, Ok(()), StoreOp::Enqueue).await?;
        drop(_turn);
        store.wake(woken);
        // Reported once committed: a rolled-back enqueue wrote nothing.
        outbox.report(StoreOp::Enqueue, started, CallOutcome::Enqueued(&enqueued));
        Ok(enqueued)
    }

    /// Rolls everything back.
    pub async fn rollback(self) -> Result<(), StoreError> {
        self.tx.rollback().await.map_err(db(StoreOp::Enqueue))
    }
}
