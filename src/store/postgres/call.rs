//! [`Call`]: the connection one store call runs on. Directly to PostgreSQL (or through a
//! pooler in session mode) it is a pooled connection and each statement commits on its
//! own, with the session settings the connection got at startup. Through a transaction
//! pooler ([`Pooler::Transaction`](super::Pooler::Transaction)) a client keeps a server
//! connection only until its transaction ends, so the call is a transaction that begins
//! by setting them with `SET LOCAL`, and every statement in it is parsed unnamed: an
//! unnamed statement is parsed and executed in two round trips, which must reach the same
//! server connection.

use std::ops::{Deref, DerefMut};

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Postgres, Transaction};

use crate::store::{StoreError, StoreOp};

use super::row::db_error;
use super::PostgresOutboxStore;

/// The connection of one store call; [`Call::finish`] ends it.
pub(super) enum Call {
    /// Statements commit one by one.
    Pooled(PoolConnection<Postgres>),
    /// A transaction begun with the session settings; `finish` commits it.
    Transaction(Transaction<'static, Postgres>),
}

impl Call {
    /// Ends the call: commits its transaction, if it has one. A call dropped without it
    /// (an error half-way) rolls back.
    pub(super) async fn finish(self, op: StoreOp) -> Result<(), StoreError> {
        match self {
            Self::Pooled(_) => Ok(()),
            Self::Transaction(tx) => tx.commit().await.map_err(|e| db_error(op, e)),
        }
    }
}

impl Deref for Call {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Self::Pooled(conn) => conn,
            Self::Transaction(tx) => tx,
        }
    }
}

impl DerefMut for Call {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Self::Pooled(conn) => conn,
            Self::Transaction(tx) => tx,
        }
    }
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pooled(_) => "Call::Pooled",
            Self::Transaction(_) => "Call::Transaction",
        })
    }
}

impl PostgresOutboxStore {
    /// The connection for one call that runs `op` (see the module docs).
    pub(super) async fn call(&self, op: StoreOp) -> Result<Call, StoreError> {
        if self.named_statements {
            return self.conn(op).await.map(Call::Pooled);
        }
        self.pool
            .begin_with(AssertSqlSafe(self.begin_sql.clone()))
            .await
            .map(Call::Transaction)
            .map_err(|e| db_error(op, e))
    }
}
