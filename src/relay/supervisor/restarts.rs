//! The restart policy as a plain type: what the supervisor does with a lane that crashed.
//! No actor and no clock read (the time comes in as a value), so the unit tests below and
//! the simulation (`sim::relay`) drive the very rule `RelaySupervisor::lane_crashed` runs.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::SupervisorConfig;

/// What becomes of a lane that crashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Start it again `after` this long; `restarts` counts this restart among those in the
    /// window (the backoff doubles with each).
    After { after: Duration, restarts: u32 },
    /// It crashed again with `max_restarts` restarts already in the window: it stays down
    /// (failed) until its process restarts.
    GiveUp,
}

/// One lane's restarts: the instants of those within the window, oldest first, and how
/// many there were in all.
#[derive(Debug, Default)]
pub(crate) struct Restarts {
    recent: VecDeque<Instant>,
    total: u64,
}

impl Restarts {
    /// The lane crashed at `now`: restart it after the backoff, or give up when the window
    /// already holds `max_restarts` restarts. A restart older than `restart_window` no
    /// longer counts.
    pub(crate) fn crashed(&mut self, now: Instant, config: &SupervisorConfig) -> Restart {
        while self
            .recent
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) > config.restart_window)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= config.max_restarts as usize {
            return Restart::GiveUp;
        }
        self.recent.push_back(now);
        self.total += 1;
        let restarts = u32::try_from(self.recent.len()).unwrap_or(u32::MAX);
        Restart::After {
            after: config.restart_backoff.delay(restarts, None),
            restarts,
        }
    }

    /// Every restart so far, in or out of the window.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::RetryPolicy;

    fn config(max_restarts: u32, window_ms: u64) -> SupervisorConfig {
        SupervisorConfig::default()
            .max_restarts(max_restarts)
            .restart_window(Duration::from_millis(window_ms))
            .restart_backoff(
                RetryPolicy::new(Duration::from_millis(100), Duration::from_millis(350))
                    .jitter(false),
            )
    }

    fn after(restart: Restart) -> Option<(u64, u32)> {
        match restart {
            Restart::After { after, restarts } => Some((after.as_millis() as u64, restarts)),
            Restart::GiveUp => None,
        }
    }

    #[test]
    fn the_backoff_doubles_with_each_restart_in_the_window_up_to_its_cap() {
        let config = config(5, 60_000);
        let start = Instant::now();
        let mut restarts = Restarts::default();
        let delays: Vec<_> = (0..4)
            .map(|i| after(restarts.crashed(start + Duration::from_secs(i), &config)))
            .collect();
        assert_eq!(
            delays,
            [
                Some((100, 1)),
                Some((200, 2)),
                Some((350, 3)),
                Some((350, 4))
            ]
        );
        assert_eq!(restarts.total(), 4);
    }

    #[test]
    fn one_crash_past_max_restarts_within_the_window_gives_up() {
        let config = config(2, 1_000);
        let start = Instant::now();
        let mut restarts = Restarts::default();
        assert!(after(restarts.crashed(start, &config)).is_some());
        assert!(after(restarts.crashed(start + Duration::from_millis(500), &config)).is_some());
        assert_eq!(
            restarts.crashed(start + Duration::from_millis(1_000), &config),
            Restart::GiveUp,
            "the first restart is exactly one window old: it still counts"
        );
        assert_eq!(restarts.total(), 2);
    }

    #[test]
    fn restarts_older_than_the_window_no_longer_count_and_the_backoff_starts_over() {
        let config = config(2, 1_000);
        let start = Instant::now();
        let mut restarts = Restarts::default();
        restarts.crashed(start, &config);
        restarts.crashed(start + Duration::from_millis(100), &config);
        assert_eq!(
            after(restarts.crashed(start + Duration::from_millis(1_101), &config)),
            Some((100, 1)),
            "both earlier restarts left the window"
        );
        assert_eq!(restarts.total(), 3);
    }

    #[test]
    fn max_restarts_zero_gives_up_at_the_first_crash() {
        let mut restarts = Restarts::default();
        assert_eq!(
            restarts.crashed(Instant::now(), &config(0, 1_000)),
            Restart::GiveUp
        );
        assert_eq!(restarts.total(), 0);
    }
}
