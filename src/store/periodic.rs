//! A background job a store starts every so many events, one run at a time: PostgreSQL's
//! vacuum after retired rows (`postgres/vacuum.rs`), SQLite's checkpoint after write
//! commits (`sqlite/checkpoint.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Counts events and says when the job is due: once `every` have come since the last run
/// started, and no run is in progress.
#[derive(Debug)]
pub(crate) struct Periodic {
    every: u64,
    count: AtomicU64,
    running: Arc<AtomicBool>,
}

/// A run in progress: dropping it (when the run ends, or if it cannot start) lets the next
/// one start.
#[derive(Debug)]
pub(crate) struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Periodic {
    pub(crate) fn new(every: u64) -> Self {
        Self {
            every,
            count: AtomicU64::new(0),
            running: Arc::new(AtomicBool::new(false)),
        }
    }

    /// `n` more events. `Some` when a run should start now: hold the answer for as long as
    /// it runs.
    pub(crate) fn tick(&self, n: u64) -> Option<Running> {
        let total = self.count.fetch_add(n, Ordering::Relaxed) + n;
        if total < self.every
            || self
                .running
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return None;
        }
        self.count.store(0, Ordering::Relaxed);
        Some(Running(self.running.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_due_every_so_many_events_and_never_while_one_runs() {
        let periodic = Periodic::new(3);
        assert!(periodic.tick(1).is_none());
        assert!(periodic.tick(1).is_none());
        let run = periodic.tick(1).expect("due at the third event");
        // Due again by count, but one is still running: skipped; the events still count.
        assert!(periodic.tick(5).is_none());
        drop(run);
        let run = periodic
            .tick(1)
            .expect("due at the first event after the run ended");
        drop(run);
        // Counted from that run's start.
        assert!(periodic.tick(2).is_none());
        assert!(periodic.tick(1).is_some());
    }
}
