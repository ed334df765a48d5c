//! The project's performance goals, set against what the run measured: one line per
//! measured case, saying whether it meets or misses its goal. The goals (the README's
//! Benchmark section and `examples/benchmark/HISTORY.md` state them):
//!
//! - a PostgreSQL no-op drain at ≥ 0.6× the raw SQL ceiling at concurrency 64 and ≥ 0.4×
//!   at 16, and never below 0.3× at 64;
//! - the largest backlog drains at ≥ 0.8× the smallest's rate (a claim costs what it
//!   returns, not what waits);
//! - keyed lanes (1,000 keys; cold keys beside a hot one) at ≥ 0.8× no keys;
//! - after a crash, every stranded claim redelivered within 50 ms of its lease lapse;
//! - an idle lane picks a message up within 0.30 ms (p50) in at most 2 store calls;
//! - a slow (10 ms) handler reaches ≥ 0.95× the concurrency ceiling.

use std::fmt::Write as _;

use super::{size, Results};
use crate::options::{Keys, StoreKind};

impl Results {
    /// The project's goals, against what this run measured.
    pub(super) fn checks(&self, w: &mut String) {
        let mut lines = Vec::new();
        let mark = |ok: bool| if ok { "meets" } else { "misses" };
        let pg = StoreKind::Postgres;
        let largest = self.drains.iter().map(|d| d.backlog).max();
        for (c, target) in [(64, 0.6), (16, 0.4)] {
            for d in self
                .drains
                .iter()
                .filter(|d| d.store == pg && d.concurrency == c && d.keys == Keys::None)
            {
                if let Some(raw) = self.ceiling(pg, d.backlog) {
                    let r = d.drained.rate() / raw;
                    lines.push(format!("PostgreSQL no-op drain c={c} at {}: {r:.2}× raw ceiling ({} ≥ {target}×; floor 0.3× at c=64)", size(d.backlog), mark(r >= target)));
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
                lines.push(format!(
                    "{} {} c={} at {}: {r:.2}× no keys{} ({} ≥ 0.8×){}",
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
                    all.unwrap_or_default()
                ));
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
