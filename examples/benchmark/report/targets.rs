//! The project's performance goals, set against what the run measured: one line per
//! measured case, saying whether it meets or misses its goal. The goals (the guide's
//! benchmark page and `examples/benchmark/HISTORY.md` state them):
//!
//! - a PostgreSQL no-op drain at ≥ 0.7× the raw SQL ceiling at concurrency 64 and ≥ 0.55×
//!   at 16, and never below 0.3× at 64; a SQLite one at ≥ 0.6× at 64;
//! - the largest backlog drains at ≥ 0.8× the smallest's rate (a claim costs what it
//!   returns, not what waits);
//! - keyed lanes (1,000 keys; cold keys beside a hot one) at ≥ 0.8× no keys, and a 1,000-key
//!   lane's ratio not more than 0.05 below the last full run's (2026-12-04,
//!   [`KEYED_BEFORE`]) while the levers for keyless lanes move;
//! - relay processes on one PostgreSQL lane add: 2 or 3 processes sharing the lane's
//!   concurrency at ≥ 1.0× one process, each with the full concurrency at ≥ 1.2×;
//! - after a crash, every stranded claim redelivered within 50 ms of its lease lapse;
//! - an idle lane picks a message up within 0.30 ms (p50) in at most 2 store calls;
//! - a slow (10 ms) handler reaches ≥ 0.95× the concurrency ceiling.

use std::fmt::Write as _;

use super::{size, Results};
use crate::options::{Keys, StoreKind};

/// The 1,000-key lane against no keys in the last full run (2026-12-04, medians of 3
/// rounds): (store, backlog, concurrency, ratio).
const KEYED_BEFORE: [(StoreKind, usize, usize, f64); 8] = [
    (StoreKind::Postgres, 10_000, 16, 0.79),
    (StoreKind::Postgres, 10_000, 64, 0.83),
    (StoreKind::Postgres, 100_000, 16, 0.76),
    (StoreKind::Postgres, 100_000, 64, 0.83),
    (StoreKind::Sqlite, 10_000, 16, 0.82),
    (StoreKind::Sqlite, 10_000, 64, 0.77),
    (StoreKind::Sqlite, 100_000, 16, 0.73),
    (StoreKind::Sqlite, 100_000, 64, 0.73),
];

impl Results {
    /// The project's goals, against what this run measured.
    pub(super) fn checks(&self, w: &mut String) {
        let mut lines = Vec::new();
        let mark = |ok: bool| if ok { "meets" } else { "misses" };
        let pg = StoreKind::Postgres;
        let largest = self.drains.iter().map(|d| d.backlog).max();
        let sqlite = StoreKind::Sqlite;
        for (store, c, target) in [(pg, 64, 0.7), (pg, 16, 0.55), (sqlite, 64, 0.6)] {
            for d in self
                .drains
                .iter()
                .filter(|d| d.store == store && d.concurrency == c && d.keys == Keys::None)
            {
                if let Some(raw) = self.ceiling(store, d.backlog) {
                    let r = d.drained.rate() / raw;
                    let floor = if store == pg && c == 64 {
                        format!("; {} the 0.3× floor", mark(r >= 0.3))
                    } else {
                        String::new()
                    };
                    lines.push(format!(
                        "{} no-op drain c={c} at {}: {r:.2}× raw ceiling ({} ≥ {target}×{floor})",
                        store.label(),
                        size(d.backlog),
                        mark(r >= target)
                    ));
                }
            }
        }
        if let (Some(small), Some(large)) = (self.smallest(), largest) {
            if large > small {
                for d in self.drains.iter().filter(|d| d.backlog == large) {
                    if let Some(b) = self.drain(d.store, small, d.keys, d.concurrency) {
                        let r = d.drained.rate() / b.drained.rate();
                        lines.push(format!(
                            "{} {} c={}: {} against {}: {r:.2}× ({} ≥ 0.8×)",
                            d.store.label(),
                            d.keys.label(),
                            d.concurrency,
                            size(large),
                            size(small),
                            mark(r >= 0.8)
                        ));
                    }
                }
            }
        }
        for d in self.drains.iter().filter(|d| d.keys != Keys::None) {
            if let Some(none) = self.drain(d.store, d.backlog, Keys::None, d.concurrency) {
                let r = d.drained.rate() / none.drained.rate();
                // Beside a hot key, the relay also delivers hot messages in the time it
                // takes to deliver the cold (measured) ones: both rates are given.
                let all = (d.drained.others > 0).then(|| {
                    let r_all = d.drained.rate_all() / none.drained.rate();
                    format!(
                        "; counting the {} hot messages delivered meanwhile {r_all:.2}× ({} ≥ 0.8×)",
                        d.drained.others,
                        mark(r_all >= 0.8)
                    )
                });
                let before = KEYED_BEFORE
                    .iter()
                    .find(|(store, backlog, c, _)| {
                        d.keys == Keys::Many(crate::options::COLD_KEYS)
                            && (*store, *backlog, *c) == (d.store, d.backlog, d.concurrency)
                    })
                    .map(|(.., before)| {
                        format!(
                            "; 2026-12-04: {before:.2}× ({} not more than 0.05 below)",
                            mark(r >= before - 0.05)
                        )
                    });
                lines.push(format!(
                    "{} {} c={} at {}: {r:.2}× no keys{} ({} ≥ 0.8×){}{}",
                    d.store.label(),
                    d.keys.label(),
                    d.concurrency,
                    size(d.backlog),
                    if all.is_some() {
                        ", cold messages only"
                    } else {
                        ""
                    },
                    mark(r >= 0.8),
                    all.unwrap_or_default(),
                    before.unwrap_or_default()
                ));
            }
        }
        for full in [false, true] {
            let target = if full { 1.2 } else { 1.0 };
            let one = self
                .replicas
                .iter()
                .find(|r| r.full == full && r.processes == 1);
            for r in self
                .replicas
                .iter()
                .filter(|r| r.full == full && r.processes > 1)
            {
                if let Some(one) = one {
                    let x = r.rate / one.rate;
                    lines.push(format!(
                        "PostgreSQL replicas, {} processes of c={} ({}): {x:.2}× one process ({} ≥ {target}×)",
                        r.processes,
                        r.concurrency,
                        if full { "full concurrency each" } else { "the lane's concurrency split" },
                        mark(x >= target)
                    ));
                }
            }
        }
        for (store, r) in &self.crashes {
            if let Some(max) = r.percentile(1.0) {
                let all = r.redelivered == r.stranded;
                lines.push(format!("{} crash redelivery: every stranded claim within {max:.1} ms of its lapse{} ({} ≤ 50 ms)", store.label(), if all { "" } else { " (not all redelivered)" }, mark(all && max <= 50.0)));
            }
        }
        // The PgBouncer rows are there to compare with the direct ones, not held to their
        // targets: each of their store calls is a transaction of its own, and without
        // LISTEN the poll is the pickup.
        for p in self.pickup.iter().filter(|p| !p.path.pooled()) {
            if let Some(p50) = p.percentile(0.5) {
                lines.push(format!("PostgreSQL idle pickup, {}: p50 {p50:.2} ms ({} ≤ 0.30 ms), {:.2} store calls per message ({} ≤ 2)", p.path.label(), mark(p50 <= 0.30), p.statements_per_message(), mark(p.statements_per_message() <= 2.0)));
            }
        }
        for s in &self.slow {
            let r = s.drained.rate() / s.ceiling();
            lines.push(format!(
                "{} {} ms handler c={}: {r:.2}× the concurrency ceiling ({} ≥ 0.95×)",
                s.store.label(),
                s.latency.as_millis(),
                s.concurrency,
                mark(r >= 0.95)
            ));
        }
        if lines.is_empty() {
            return;
        }
        let _ = writeln!(w, "## Against the project's goals\n");
        for line in lines {
            let _ = writeln!(w, "- {line}");
        }
        let _ = writeln!(w);
    }
}
