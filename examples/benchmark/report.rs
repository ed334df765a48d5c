//! The results and their markdown report (printed and written to `<out>/results.md`); the
//! plot is in `plot.rs`.

use std::fmt::Write as _;

use std::time::Duration;

use crate::crash::Redelivery;
use crate::drain::Drained;
use crate::options::{Keys, StoreKind};
use crate::pickup::Pickup;
use crate::raw::Ceiling;
use crate::webhook::WebhookRow;

#[derive(Debug, Clone)]
pub struct CeilingRow {
    pub store: StoreKind,
    pub backlog: usize,
    pub fill: Duration,
    pub ceiling: Ceiling,
    /// With `--rounds`: every round's rows/s, in run order (this row is their median).
    pub rounds: Vec<f64>,
}

#[derive(Debug, Clone)]
pub struct DrainRow {
    pub store: StoreKind,
    pub backlog: usize,
    /// Rows in the table (the hot key's rows come on top of the backlog).
    pub rows: usize,
    pub keys: Keys,
    pub concurrency: usize,
    pub fill: Duration,
    pub drained: Drained,
    /// Claim p50, p99 in ms, and the number of claim calls.
    pub claim: Option<(f64, f64, usize)>,
    pub claimed_rows: u64,
    /// With `--rounds`: every round's msg/s, in run order (this row is their median).
    pub rounds: Vec<f64>,
}

#[derive(Debug, Clone)]
pub struct SingleRow {
    pub store: StoreKind,
    pub messages: usize,
    pub latency: Duration,
    pub concurrency: usize,
    pub single: Drained,
    pub relay: Drained,
}

#[derive(Debug, Clone)]
pub struct SlowRow {
    pub store: StoreKind,
    pub latency: Duration,
    pub concurrency: usize,
    pub drained: Drained,
    /// With `--rounds`: every round's msg/s, in run order (this row is their median).
    pub rounds: Vec<f64>,
}

impl SlowRow {
    pub fn ceiling(&self) -> f64 {
        self.concurrency as f64 / self.latency.as_secs_f64()
    }

    /// The ceiling at the handler's wait as measured around it (a wait ends a little
    /// later than asked: the timer thread's wake-up, then the task's).
    pub fn measured_ceiling(&self) -> Option<f64> {
        self.drained
            .mean_sleep
            .map(|slept| self.concurrency as f64 / slept.as_secs_f64().max(1e-9))
    }
}

#[derive(Debug, Default)]
pub struct Results {
    pub command: String,
    pub load_start: String,
    pub load_end: String,
    pub total: Duration,
    pub ceilings: Vec<CeilingRow>,
    pub drains: Vec<DrainRow>,
    pub singles: Vec<SingleRow>,
    pub crashes: Vec<(StoreKind, Redelivery)>,
    pub pickup: Vec<Pickup>,
    pub slow: Vec<SlowRow>,
    pub webhooks: Vec<WebhookRow>,
    pub errors: Vec<String>,
}

impl Results {
    /// With `--rounds`, one row per case: the median round, listing them all.
    pub fn keep_medians(&mut self) {
        self.ceilings = medians(
            &self.ceilings,
            |c| (c.store, c.backlog),
            |c| c.ceiling.rate(),
            |c, rounds| c.rounds = rounds,
        );
        self.drains = medians(
            &self.drains,
            |d| (d.store, d.backlog, d.keys, d.concurrency),
            |d| d.drained.rate(),
            |d, rounds| d.rounds = rounds,
        );
        self.slow = medians(
            &self.slow,
            |s| (s.store, s.latency, s.concurrency),
            |s| s.drained.rate(),
            |s, rounds| s.rounds = rounds,
        );
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// Keeps, of the rows that share a key, the one with the median rate (the lower middle
/// of an even count), noting every round's rate in it, in run order.
fn medians<R: Clone, K: PartialEq>(
    rows: &[R],
    key: impl Fn(&R) -> K,
    rate: impl Fn(&R) -> f64,
    note: impl Fn(&mut R, Vec<f64>),
) -> Vec<R> {
    let mut kept: Vec<R> = Vec::new();
    let mut seen: Vec<K> = Vec::new();
    for row in rows {
        let k = key(row);
        if seen.contains(&k) {
            continue;
        }
        let mut same: Vec<&R> = rows.iter().filter(|r| key(r) == k).collect();
        let rounds: Vec<f64> = same.iter().map(|r| rate(r)).collect();
        same.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
        let mut median = same[(same.len() - 1) / 2].clone();
        note(&mut median, rounds);
        kept.push(median);
        seen.push(k);
    }
    kept
}

/// ", median of 3 rounds: 9,812, 10,420, 11,003" for more than one round.
fn rounds_note(rounds: &[f64], unit: &str) -> String {
    if rounds.len() < 2 {
        return String::new();
    }
    let each: Vec<String> = rounds.iter().map(|r| format!("{r:.0}")).collect();
    format!(
        "median of {} rounds ({unit}: {})",
        rounds.len(),
        each.join(", ")
    )
}

pub fn size(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{} M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{} k", n / 1_000),
        n => n.to_string(),
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.2}"))
}

impl Results {
    fn ceiling(&self, store: StoreKind, backlog: usize) -> Option<f64> {
        self.ceilings
            .iter()
            .find(|c| c.store == store && c.backlog == backlog)
            .map(|c| c.ceiling.rate())
    }

    fn smallest(&self) -> Option<usize> {
        self.drains.iter().map(|d| d.backlog).min()
    }

    fn drain(&self, store: StoreKind, backlog: usize, keys: Keys, c: usize) -> Option<&DrainRow> {
        self.drains.iter().find(|d| {
            d.store == store && d.backlog == backlog && d.keys == keys && d.concurrency == c
        })
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(w, "# outbox-relay benchmark\n");
        let _ = writeln!(w, "- command: `{}`", self.command);
        if !crate::stores::cycle_function() {
            let _ = writeln!(
                w,
                "- PostgreSQL relays without the cycle function (`OUTBOX_BENCH_CYCLE_FUNCTION=off`)"
            );
        }
        for name in ["OUTBOX_BENCH_SQLITE_CACHE", "OUTBOX_BENCH_SQLITE_MMAP"] {
            if let Ok(value) = std::env::var(name) {
                let _ = writeln!(w, "- SQLite stores with `{name}={value}`");
            }
        }
        let _ = writeln!(w, "- load average at start: `{}`", self.load_start);
        let _ = writeln!(w, "- load average at end: `{}`", self.load_end);
        let _ = writeln!(
            w,
            "- cores: {}",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let _ = writeln!(w, "- total time: {:.0} s\n", self.total.as_secs_f64());
        self.throughput_table(w);
        self.single_table(w);
        self.crash_table(w);
        self.pickup_section(w);
        self.slow_table(w);
        self.webhook_table(w);
        self.checks(w);
        if !self.errors.is_empty() {
            let _ = writeln!(w, "## Errors\n");
            for error in &self.errors {
                let _ = writeln!(w, "- {error}");
            }
            let _ = writeln!(w);
        }
        out
    }

    fn throughput_table(&self, w: &mut String) {
        if self.ceilings.is_empty() && self.drains.is_empty() {
            return;
        }
        let base = self.smallest().map_or("smallest".to_owned(), size);
        let _ = writeln!(w, "## No-op drain and raw ceiling\n");
        let _ = writeln!(
            w,
            "| store | backlog | keys | c | msg/s | × raw | × {base} | claim p50 ms | claim p99 ms | rows/claim | fill s | run s | note |"
        );
        let _ = writeln!(
            w,
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        let mut stores: Vec<StoreKind> = Vec::new();
        for store in self
            .ceilings
            .iter()
            .map(|c| c.store)
            .chain(self.drains.iter().map(|d| d.store))
        {
            if !stores.contains(&store) {
                stores.push(store);
            }
        }
        let mut sizes: Vec<usize> = self
            .ceilings
            .iter()
            .map(|c| c.backlog)
            .chain(self.drains.iter().map(|d| d.backlog))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for &store in &stores {
            for &backlog in &sizes {
                if let Some(c) = self
                    .ceilings
                    .iter()
                    .find(|c| c.store == store && c.backlog == backlog)
                {
                    let rounds = rounds_note(&c.rounds, "rows/s");
                    let note = match (c.ceiling.timed_out, rounds.is_empty()) {
                        (true, true) => "timed out".to_owned(),
                        (true, false) => format!("timed out; {rounds}"),
                        (false, _) => rounds,
                    };
                    let _ = writeln!(
                        w,
                        "| {} | {} | raw SQL, claim {} + ack | 1 | {:.0} | 1.00 | | | | {} | {:.1} | {:.1} | {note} |",
                        store.label(),
                        size(backlog),
                        crate::raw::RAW_BATCH,
                        c.ceiling.rate(),
                        crate::raw::RAW_BATCH,
                        c.fill.as_secs_f64(),
                        c.ceiling.took.as_secs_f64(),
                    );
                }
                for d in self
                    .drains
                    .iter()
                    .filter(|d| d.store == store && d.backlog == backlog)
                {
                    let rate = d.drained.rate();
                    let raw = self
                        .ceiling(store, backlog)
                        .map_or(String::new(), |r| format!("{:.2}", rate / r));
                    let vs_base = self
                        .smallest()
                        .and_then(|b| self.drain(store, b, d.keys, d.concurrency))
                        .map_or(String::new(), |b| format!("{:.2}", rate / b.drained.rate()));
                    let (p50, p99, claims) = d
                        .claim
                        .map_or((None, None, 0), |(a, b, n)| (Some(a), Some(b), n));
                    let per_claim = if claims > 0 {
                        format!("{:.1}", d.claimed_rows as f64 / claims as f64)
                    } else {
                        "–".to_owned()
                    };
                    let mut note = String::new();
                    if d.drained.timed_out {
                        let _ = write!(
                            note,
                            "timed out after {} of {}",
                            d.drained.delivered, d.backlog
                        );
                    }
                    if d.rows != d.backlog {
                        let _ = write!(
                            note,
                            "{}{} rows in the lane; {} hot ones delivered meanwhile, {:.0} msg/s counting them",
                            if note.is_empty() { "" } else { "; " },
                            d.rows,
                            d.drained.others,
                            d.drained.rate_all(),
                        );
                    }
                    let rounds = rounds_note(&d.rounds, "msg/s");
                    if !rounds.is_empty() {
                        let sep = if note.is_empty() { "" } else { "; " };
                        let _ = write!(note, "{sep}{rounds}");
                    }
                    let _ = writeln!(
                        w,
                        "| {} | {} | {} | {} | {rate:.0} | {raw} | {vs_base} | {} | {} | {per_claim} | {:.1} | {:.1} | {note} |",
                        store.label(),
                        size(backlog),
                        d.keys.label(),
                        d.concurrency,
                        ms(p50),
                        ms(p99),
                        d.fill.as_secs_f64(),
                        d.drained.took.as_secs_f64(),
                    );
                }
            }
        }
        let _ = writeln!(w);
    }

    fn single_table(&self, w: &mut String) {
        if self.singles.is_empty() {
            return;
        }
        let _ = writeln!(
            w,
            "## Seed single loop against the relay (simulated target latency)\n"
        );
        let _ = writeln!(
            w,
            "| store | messages | latency | relay c | single loop msg/s | relay msg/s | ratio |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
        for s in &self.singles {
            let _ = writeln!(
                w,
                "| {} | {} | {} ms | {} | {:.0} | {:.0} | {:.2}× |",
                s.store.label(),
                s.messages,
                s.latency.as_millis(),
                s.concurrency,
                s.single.rate(),
                s.relay.rate(),
                s.relay.rate() / s.single.rate().max(1e-9),
            );
        }
        let _ = writeln!(w);
    }

    fn crash_table(&self, w: &mut String) {
        if self.crashes.is_empty() {
            return;
        }
        let _ = writeln!(w, "## Crash redelivery (lapse of the aborted relay's lease → redelivery by a second relay)\n");
        let _ = writeln!(w, "| store | backlog | lease | stranded | redelivered | pending at B's start | p50 ms | max ms | B's other deliveries before the last | note |");
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for (store, r) in &self.crashes {
            let _ = writeln!(
                w,
                "| {} | {} | {} ms | {} | {} | {} | {} | {} | {} | {} |",
                store.label(),
                size(r.backlog),
                r.lease.as_millis(),
                r.stranded,
                r.redelivered,
                r.pending_at_start,
                ms(r.percentile(0.5)),
                ms(r.percentile(1.0)),
                r.others_before,
                if r.timed_out { "timed out" } else { "" },
            );
        }
        let _ = writeln!(w);
    }

    fn pickup_section(&self, w: &mut String) {
        if self.pickup.is_empty() {
            return;
        }
        let _ = writeln!(
            w,
            "## Idle pickup on PostgreSQL (enqueue commit returned → handler started)\n"
        );
        let _ = writeln!(
            w,
            "| path | messages | p50 ms | p99 ms | max ms | claim call p50 ms | store calls per message | of which |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---|");
        for p in &self.pickup {
            let detail: Vec<String> = p
                .calls_per_message
                .iter()
                .map(|(op, n)| format!("{} {n:.2}", op.label()))
                .collect();
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {:.2} | {} |",
                p.path.label(),
                p.latencies_ms.len(),
                ms(p.percentile(0.5)),
                ms(p.percentile(0.99)),
                ms(p.percentile(1.0)),
                ms(p.claim_p50_ms),
                p.statements_per_message(),
                detail.join(", "),
            );
        }
        let _ = writeln!(w);
    }

    fn slow_table(&self, w: &mut String) {
        if self.slow.is_empty() {
            return;
        }
        let _ = writeln!(w, "## Slow handler (concurrency ceiling = c / latency)\n");
        let _ = writeln!(
            w,
            "| store | messages | latency | c | msg/s | ceiling msg/s | × ceiling | measured sleep ms | × measured ceiling | note |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for s in &self.slow {
            let _ = writeln!(
                w,
                "| {} | {} | {} ms | {} | {:.0} | {:.0} | {:.2} | {} | {} | {} |",
                s.store.label(),
                s.drained.delivered,
                s.latency.as_millis(),
                s.concurrency,
                s.drained.rate(),
                s.ceiling(),
                s.drained.rate() / s.ceiling(),
                ms(s.drained.mean_sleep.map(|d| d.as_secs_f64() * 1e3)),
                s.measured_ceiling()
                    .map_or("–".to_owned(), |c| format!("{:.2}", s.drained.rate() / c)),
                [
                    if s.drained.timed_out { "timed out" } else { "" }.to_owned(),
                    rounds_note(&s.rounds, "msg/s"),
                ]
                .iter()
                .filter(|n| !n.is_empty())
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
            );
        }
        let _ = writeln!(w);
    }

    fn webhook_table(&self, w: &mut String) {
        if self.webhooks.is_empty() {
            return;
        }
        let _ = writeln!(
            w,
            "## Webhook sink against the log sink (local HTTP receiver, medians)\n"
        );
        let _ = writeln!(
            w,
            "| store | messages | c | rounds | log msg/s | webhook msg/s | webhook / log | per round |"
        );
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---|");
        for r in &self.webhooks {
            let rounds: Vec<String> = r
                .rounds
                .iter()
                .map(|round| format!("{:.2}×", round.ratio()))
                .collect();
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.2}× | {} |",
                r.store.label(),
                r.messages,
                r.concurrency,
                r.rounds.len(),
                r.median_log(),
                r.median_webhook(),
                r.median_ratio(),
                rounds.join(", "),
            );
        }
        let _ = writeln!(w);
    }

    /// The "done when" targets of issues 8 and 9, against what this run measured.
    fn checks(&self, w: &mut String) {
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
                    lines.push(format!("PostgreSQL no-op drain c={c} at {}: {r:.2}× raw ceiling ({} at ≥ {target}×; issue 8 wants ≥ 0.3× at c=64)", size(d.backlog), mark(r >= target)));
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
        for p in &self.pickup {
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
        let _ = writeln!(w, "## Against the targets of issues 8 and 9\n");
        for line in lines {
            let _ = writeln!(w, "- {line}");
        }
        let _ = writeln!(w);
    }
}
