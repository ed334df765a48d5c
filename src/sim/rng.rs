//! The simulation's one source of chance: SplitMix64, seeded from the run's seed. Small,
//! fast in debug builds, and the same on every platform, so a seed replays anywhere.

use std::time::Duration;

/// A seeded pseudo-random stream.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// A stream of its own for one purpose, so drawing more from one (a new fault kind)
    /// leaves the others' draws as they were.
    pub(crate) fn fork(&mut self, salt: u64) -> Self {
        Self(self.next_u64() ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `percent`/100.
    pub(crate) fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration uniform in `lo..=hi` milliseconds.
    pub(crate) fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.between(lo, hi))
    }

    /// One of `items`, by weight.
    pub(crate) fn weighted<T: Copy>(&mut self, items: &[(u64, T)]) -> T {
        let total: u64 = items.iter().map(|(w, _)| w).sum();
        let mut pick = self.below(total);
        for (weight, item) in items {
            if pick < *weight {
                return *item;
            }
            pick -= weight;
        }
        items[items.len() - 1].1
    }
}
