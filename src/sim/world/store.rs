//! The store a run drives ([`Store`](crate::sim::plan::Store)), behind one face: the
//! memory store, or SQLite in a temporary file. Either reads the world's manual clock, and
//! the world waits for each call to finish before its next event, so a run is one order of
//! calls whatever the store.
//!
//! SQLite runs as a user runs it (`SqliteOutboxStore` with its write turn, its write
//! connection and its read pool, WAL mode, its migrations), with two settings for a
//! replay: no background checkpoints (a task of their own, beside the world's calls; they
//! change no row, but would run at times of the runtime's choosing), and one read
//! connection. Its calls run on a current-thread Tokio runtime of the run's own, each to
//! its end (`block_on`) before the world goes on: sqlx's worker thread answers the one
//! call asked, so the order of calls, and every answer, is the world's. The file is in
//! `/dev/shm` where there is one, so the enqueues' synced commits cost no disk.
//!
//! What that leaves out: two calls in progress at once. SQLite takes one write at a time
//! (the store's write turn) and a read in WAL mode sees the last commit before it began,
//! so calls that overlapped would answer as some order of the same calls one after
//! another; the world's event queue draws that order from the seed. Run concurrently,
//! the order would be the threads' and a seed would not replay.

use std::future::Future;
use std::sync::Arc;

use super::ready;
use crate::store::memory::InMemoryOutboxStore;
use crate::store::{Outbox, OutboxBackend};
use crate::time::ManualClock;

/// The store of one run.
#[derive(Debug)]
pub(crate) struct SimStore {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Memory(Arc<InMemoryOutboxStore>),
    #[cfg(all(test, feature = "sqlite"))]
    Sqlite(sqlite::Sqlite),
}

impl SimStore {
    /// The memory store on `clock`, saying `pre_claim` (its enqueues hand off).
    pub(crate) fn memory(clock: &ManualClock) -> Self {
        let store = InMemoryOutboxStore::with_clock(Arc::new(clock.clone())).with_pre_claim();
        Self {
            kind: Kind::Memory(Arc::new(store)),
        }
    }

    /// A new SQLite store on `clock`, in a file of its own.
    #[cfg(all(test, feature = "sqlite"))]
    pub(crate) fn sqlite(clock: &ManualClock) -> Self {
        Self {
            kind: Kind::Sqlite(sqlite::Sqlite::open(clock)),
        }
    }

    /// The backend, for its calls (each run to its end with [`SimStore::run`]).
    pub(crate) fn backend(&self) -> &dyn OutboxBackend {
        match &self.kind {
            Kind::Memory(store) => store.as_ref(),
            #[cfg(all(test, feature = "sqlite"))]
            Kind::Sqlite(store) => store.store.as_ref(),
        }
    }

    /// A new store object over the backend, as a process opens one: its own hand-off
    /// registry (when the backend says `pre_claim`).
    pub(crate) fn outbox(&self) -> Outbox {
        match &self.kind {
            Kind::Memory(store) => Outbox::from_arc(store.clone()),
            #[cfg(all(test, feature = "sqlite"))]
            Kind::Sqlite(store) => Outbox::from_arc(store.store.clone()),
        }
    }

    /// Runs a call of the store to its end.
    pub(crate) fn run<F: Future>(&self, future: F) -> F::Output {
        match &self.kind {
            Kind::Memory(_) => ready(future),
            #[cfg(all(test, feature = "sqlite"))]
            Kind::Sqlite(store) => store.runtime.block_on(future),
        }
    }

    /// The next `n` writes of drafts fail before they commit.
    pub(crate) fn fail_next_writes(&self, n: u32) {
        match &self.kind {
            Kind::Memory(store) => store.fail_next_writes(n),
            #[cfg(all(test, feature = "sqlite"))]
            Kind::Sqlite(store) => store.store.fail_next_writes(n),
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod sqlite {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use async_trait::async_trait;
    use tokio::sync::broadcast;
    use uuid::Uuid;

    use crate::message::ClaimRef;
    use crate::message::{DraftLimits, OutboxMessage};
    use crate::store::key_state::{BlockedKeys, KeyState};
    use crate::store::sqlite::SqliteOutboxStore;
    use crate::store::{
        AckAndClaim, AckMode, Capabilities, ClaimBatch, ClaimOutcome, ClaimRequest, DraftBatch,
        Enqueued, LaneCount, LanePause, LanePauseRequest, LaneStats, MessageFilter, Nack,
        NackOutcome, OrderingPolicy, OutboxBackend, Page, PageRequest, PurgeRequest, StoreError,
        StoreOp, UnservedLane, WakeUp,
    };
    use crate::time::ManualClock;

    /// SQLite, its runtime and its directory.
    #[derive(Debug)]
    pub(super) struct Sqlite {
        pub(super) store: Arc<FailingWrites>,
        pub(super) runtime: tokio::runtime::Runtime,
        _dir: tempfile::TempDir,
    }

    impl Sqlite {
        pub(super) fn open(clock: &ManualClock) -> Self {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime for the simulation's SQLite store");
            let shm = std::path::Path::new("/dev/shm");
            let dir = if shm.is_dir() {
                tempfile::tempdir_in(shm)
            } else {
                tempfile::tempdir()
            }
            .expect("a temporary directory for the simulation's SQLite store");
            let path = dir.path().join("outbox.db");
            std::fs::write(&path, migrated()).expect("the migrated file copied");
            let store = runtime
                .block_on(open(&path, clock))
                .expect("the simulation's SQLite store opens");
            Self {
                store: Arc::new(FailingWrites {
                    inner: store,
                    failing: AtomicU32::new(0),
                }),
                runtime,
                _dir: dir,
            }
        }
    }

    /// The store on the file at `path`, as a run opens it.
    async fn open(
        path: &std::path::Path,
        clock: &ManualClock,
    ) -> Result<SqliteOutboxStore, StoreError> {
        SqliteOutboxStore::builder(path)
            .clock(Arc::new(clock.clone()))
            .background_checkpoints(false)
            .read_connections(1)
            .open()
            .await
    }

    /// An empty file with every migration applied, made once per process and copied for
    /// each run: migrating costs as much as a small run's calls.
    fn migrated() -> &'static [u8] {
        static MIGRATED: OnceLock<Vec<u8>> = OnceLock::new();
        MIGRATED.get_or_init(|| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("outbox.db");
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime");
            runtime.block_on(async {
                let store = open(&path, &ManualClock::new(crate::message::UnixMillis::EPOCH))
                    .await
                    .expect("the template SQLite store opens");
                // The last connection to close checkpoints the WAL into the file.
                store.close().await;
            });
            std::fs::read(&path).expect("the migrated file reads")
        })
    }

    impl Drop for Sqlite {
        /// Closes the connections (their worker threads end) before the runtime goes.
        fn drop(&mut self) {
            self.runtime.block_on(self.store.inner.close());
        }
    }

    /// SQLite whose next writes of drafts fail before they reach it: the memory store's
    /// `fail_next_writes`, for the simulation's failing enqueues. Every other call goes
    /// through as it is.
    #[derive(Debug)]
    pub(super) struct FailingWrites {
        inner: SqliteOutboxStore,
        failing: AtomicU32,
    }

    impl FailingWrites {
        pub(super) fn fail_next_writes(&self, n: u32) {
            self.failing.fetch_add(n, Ordering::Relaxed);
        }
    }

    #[async_trait]
    impl OutboxBackend for FailingWrites {
        fn capabilities(&self) -> Capabilities {
            self.inner.capabilities()
        }

        fn draft_limits(&self) -> DraftLimits {
            self.inner.draft_limits()
        }

        async fn write_drafts(&self, drafts: DraftBatch) -> Result<Vec<Enqueued>, StoreError> {
            let failing = self
                .failing
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            if failing.is_ok() {
                return Err(StoreError::unavailable(
                    StoreOp::Enqueue,
                    "the write failed before it committed (an injected fault)",
                ));
            }
            self.inner.write_drafts(drafts).await
        }

        async fn claim(&self, requests: &[ClaimRequest]) -> Result<Vec<ClaimBatch>, StoreError> {
            self.inner.claim(requests).await
        }

        async fn ack(
            &self,
            claims: &[ClaimRef],
            mode: AckMode,
        ) -> Result<Vec<ClaimOutcome>, StoreError> {
            self.inner.ack(claims, mode).await
        }

        async fn ack_and_claim(
            &self,
            acks: &[ClaimRef],
            requests: &[ClaimRequest],
            mode: AckMode,
        ) -> Result<AckAndClaim<Vec<ClaimBatch>>, StoreError> {
            self.inner.ack_and_claim(acks, requests, mode).await
        }

        async fn nack(&self, nacks: &[Nack]) -> Result<Vec<NackOutcome>, StoreError> {
            self.inner.nack(nacks).await
        }

        async fn extend_lease(
            &self,
            claims: &[ClaimRef],
            lease: Duration,
        ) -> Result<Vec<ClaimOutcome>, StoreError> {
            self.inner.extend_lease(claims, lease).await
        }

        async fn release(&self, claims: &[ClaimRef]) -> Result<Vec<ClaimOutcome>, StoreError> {
            self.inner.release(claims).await
        }

        async fn next_due(
            &self,
            lane: &str,
            target: &str,
            ordering: OrderingPolicy,
        ) -> Result<Option<Duration>, StoreError> {
            self.inner.next_due(lane, target, ordering).await
        }

        async fn lanes_next_due(
            &self,
            lanes: &[(String, String, OrderingPolicy)],
        ) -> Result<Vec<Option<Duration>>, StoreError> {
            self.inner.lanes_next_due(lanes).await
        }

        async fn stats(&self, filter: &MessageFilter) -> Result<Vec<LaneStats>, StoreError> {
            self.inner.stats(filter).await
        }

        async fn list(
            &self,
            filter: &MessageFilter,
            page: PageRequest,
        ) -> Result<Page, StoreError> {
            self.inner.list(filter, page).await
        }

        async fn get(&self, outbox_id: Uuid) -> Result<Option<OutboxMessage>, StoreError> {
            self.inner.get(outbox_id).await
        }

        async fn requeue_dead_letters_per_lane(
            &self,
            filter: &MessageFilter,
        ) -> Result<Vec<LaneCount>, StoreError> {
            self.inner.requeue_dead_letters_per_lane(filter).await
        }

        async fn discard_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
            self.inner.discard_dead_letters(filter).await
        }

        async fn purge(&self, request: &PurgeRequest) -> Result<Vec<LaneCount>, StoreError> {
            self.inner.purge(request).await
        }

        async fn count_dead_letters(&self, filter: &MessageFilter) -> Result<u64, StoreError> {
            self.inner.count_dead_letters(filter).await
        }

        async fn key_state(
            &self,
            lane: &str,
            target: &str,
            key: &str,
            limit: usize,
        ) -> Result<KeyState, StoreError> {
            self.inner.key_state(lane, target, key, limit).await
        }

        async fn blocked_keys(
            &self,
            lane: &str,
            target: &str,
            after: Option<i64>,
            limit: usize,
        ) -> Result<BlockedKeys, StoreError> {
            self.inner.blocked_keys(lane, target, after, limit).await
        }

        fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
            self.inner.subscribe()
        }

        fn max_connections(&self) -> Option<u32> {
            self.inner.max_connections()
        }

        async fn pause_lane(&self, request: &LanePauseRequest) -> Result<LanePause, StoreError> {
            self.inner.pause_lane(request).await
        }

        async fn resume_lane(
            &self,
            lane: &str,
            target: &str,
        ) -> Result<Option<LanePause>, StoreError> {
            self.inner.resume_lane(lane, target).await
        }

        async fn lane_pauses(&self) -> Result<Vec<LanePause>, StoreError> {
            self.inner.lane_pauses().await
        }

        async fn record_served(
            &self,
            lanes: &[(String, String)],
            served_for: Duration,
        ) -> Result<(), StoreError> {
            self.inner.record_served(lanes, served_for).await
        }

        async fn unserved_lanes(&self, limit: usize) -> Result<Vec<UnservedLane>, StoreError> {
            self.inner.unserved_lanes(limit).await
        }
    }
}
