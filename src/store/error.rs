//! `StoreError`: what a store call can fail with. The database's errors keep the driver's
//! error as their source and the operation that failed, and say whether a retry may help.

use uuid::Uuid;

use crate::delivery::BoxError;
use crate::message::ValidationError;
use crate::store::StoreOp;

/// What can go wrong in a store call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The draft or request is invalid; nothing was written.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// The dedupe key is already used in this (lane, target) by a message with other content.
    #[error("conflict: dedupe_key {dedupe_key:?} in lane {lane:?}, target {target:?} is already used by message {existing} with different content")]
    Conflict {
        /// The lane.
        lane: String,
        /// The target.
        target: String,
        /// The reused key.
        dedupe_key: String,
        /// The message that holds it.
        existing: Uuid,
    },
    /// The database cannot be reached right now (connection refused, lost, pool timed
    /// out). Retryable: nothing was half written.
    #[error("store unavailable: {op}: {source}")]
    Unavailable {
        /// The store operation that failed.
        op: StoreOp,
        /// The driver's error (a `sqlx::Error` for the SQL stores).
        #[source]
        source: BoxError,
    },
    /// The database refuses this relay for good: no permission, a read-only database, a
    /// missing schema or table. Not retryable: nothing changes until an operator acts.
    #[error("store refused: {op}: {source} (permissions, a read-only database or a missing schema: retrying cannot help)")]
    Denied {
        /// The store operation that failed.
        op: StoreOp,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The database refused the operation for another reason.
    #[error("store error: {op}: {source}")]
    Database {
        /// The store operation that failed.
        op: StoreOp,
        /// The driver's error; [`StoreError::sqlstate`] reads its code.
        #[source]
        source: BoxError,
    },
    /// The backend does not offer this operation (a caller's transaction on a backend
    /// without [`Capabilities::user_transactions`](crate::store::Capabilities)).
    #[error("unsupported: {op}: {what}")]
    Unsupported {
        /// The store operation asked for.
        op: StoreOp,
        /// What was asked, and why it cannot be done.
        what: String,
    },
    /// A stored row could not be read back into a message.
    #[error("corrupt row {id}: {reason}")]
    Corrupt {
        /// The row's id, or `?` when it could not be read either.
        id: String,
        /// What could not be decoded.
        reason: String,
    },
}

impl StoreError {
    /// [`StoreError::Unavailable`]: operation `op` could not reach the database.
    pub fn unavailable(op: StoreOp, source: impl Into<BoxError>) -> Self {
        StoreError::Unavailable {
            op,
            source: source.into(),
        }
    }

    /// [`StoreError::Denied`]: the database refuses operation `op` for good.
    pub fn denied(op: StoreOp, source: impl Into<BoxError>) -> Self {
        StoreError::Denied {
            op,
            source: source.into(),
        }
    }

    /// [`StoreError::Database`]: operation `op` failed for another reason.
    pub fn database(op: StoreOp, source: impl Into<BoxError>) -> Self {
        StoreError::Database {
            op,
            source: source.into(),
        }
    }

    /// Whether trying the same call again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// Whether the database refuses this call for good ([`StoreError::Denied`]): a relay
    /// should give up after a few attempts and say why, not back off forever.
    pub fn is_permanent(&self) -> bool {
        matches!(self, StoreError::Denied { .. })
    }

    /// The store operation that failed, for the errors the database gave.
    pub fn op(&self) -> Option<StoreOp> {
        match self {
            StoreError::Unavailable { op, .. }
            | StoreError::Denied { op, .. }
            | StoreError::Database { op, .. } => Some(*op),
            _ => None,
        }
    }

    /// The database's own error code, when the database answered with one: the SQLSTATE
    /// on PostgreSQL (e.g. `40001`, serialization failure; `23505`, unique violation), the
    /// extended result code on SQLite (e.g. `2067`). `None` for errors that did not come
    /// from the database server (a lost connection, a validation error).
    pub fn sqlstate(&self) -> Option<String> {
        let source = match self {
            StoreError::Unavailable { source, .. }
            | StoreError::Denied { source, .. }
            | StoreError::Database { source, .. } => source,
            _ => return None,
        };
        database_code(source.as_ref())
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn database_code(source: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<String> {
    // The driver's error may sit under one that explains it (a migration's lock wait).
    let mut error: Option<&(dyn std::error::Error + 'static)> = Some(source);
    while let Some(current) = error {
        if let Some(sqlx) = current.downcast_ref::<sqlx::Error>() {
            return Some(sqlx.as_database_error()?.code()?.into_owned());
        }
        if let Some(store) = current.downcast_ref::<StoreError>() {
            return store.sqlstate();
        }
        error = current.source();
    }
    None
}

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
fn database_code(_: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_store_error_keeps_its_op_and_source_and_says_whether_to_retry() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let unavailable = StoreError::unavailable(StoreOp::Claim, io);
        assert!(unavailable.is_retryable() && !unavailable.is_permanent());
        assert_eq!(unavailable.op(), Some(StoreOp::Claim));
        assert_eq!(
            unavailable.to_string(),
            "store unavailable: claim: connection refused"
        );
        let source = unavailable.source().expect("a source");
        assert!(
            source.downcast_ref::<std::io::Error>().is_some(),
            "{source:?}"
        );
        assert_eq!(unavailable.sqlstate(), None);

        let denied =
            StoreError::denied(StoreOp::Ack, "permission denied for table outbox_messages");
        assert!(denied.is_permanent() && !denied.is_retryable());
        let database = StoreError::database(StoreOp::Nack, "no answer");
        assert!(!database.is_permanent() && !database.is_retryable());
        assert_eq!(database.op(), Some(StoreOp::Nack));
        let validation = StoreError::from(ValidationError::new("lane", "is empty"));
        assert_eq!(validation.op(), None);
    }
}
