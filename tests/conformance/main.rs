//! One conformance suite, run against every store backend.
//!
//! Each case in `cases.rs` is an `async fn(Harness)`. The `conformance!` macro turns the
//! whole list into `#[tokio::test]`s for one backend; each backend module (`memory.rs`,
//! `sqlite.rs`, `postgres.rs`) calls it with a function that builds a fresh, isolated
//! harness (its own file, its own schema).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use outbox_relay::store::ManualClock;
use outbox_relay::OutboxStore;

mod cases;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

/// Opens another store handle over the same data.
pub type Opener =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn OutboxStore>> + Send>> + Send + Sync>;

/// What a case gets: a fresh store on a manual clock.
pub struct Harness {
    /// The store under test, empty.
    pub store: Arc<dyn OutboxStore>,
    /// The store's clock; it moves only when a case advances it.
    pub clock: ManualClock,
    /// Which backend this is, for the few cases that only make sense for some.
    pub backend: Backend,
    /// Opens a second store handle over the same data (same file, same schema) and the same
    /// clock. For memory it returns the same store.
    pub reopen: Opener,
}

/// The backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `InMemoryOutboxStore`.
    Memory,
    /// `SqliteOutboxStore`.
    Sqlite,
    /// `PostgresOutboxStore`.
    Postgres,
}

impl Harness {
    /// Whether the data outlives the store handle (SQLite, PostgreSQL).
    pub fn is_durable(&self) -> bool {
        self.backend != Backend::Memory
    }
}

/// Generates one `#[tokio::test]` per case for a backend. `$make` is an async fn returning a
/// fresh `Harness`. Add every new case to the list below.
#[macro_export]
macro_rules! conformance {
    ($make:path) => {
        $crate::conformance!(@cases $make;
            enqueue_then_claim_and_ack,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::cases::$case($make().await).await;
            }
        )*
    };
}
