//! The results and their markdown report (printed and written to `<out>/results.md`): the
//! rows each section measures, and the report's header. Each section's table is in
//! `report/tables.rs`, the check against the project's goals in `report/targets.rs`, the
//! median of `--rounds` in `report/rounds.rs`; the plot is in `plot.rs`.

use std::fmt::Write as _;

use std::time::Duration;

use crate::crash::Redelivery;
use crate::drain::Drained;
use crate::options::{Keys, StoreKind};
use crate::pickup::Pickup;
use crate::raw::Ceiling;
use crate::webhook::SinkRow;

mod rounds;
mod tables;
mod targets;

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
    /// The claim calls' times.
    pub claim: Option<crate::metered::ClaimTimes>,
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
    pub webhooks: Vec<SinkRow>,
    pub kafkas: Vec<SinkRow>,
    pub ui: Vec<crate::ui::UiRow>,
    pub histories: Vec<crate::levers::HistoryRow>,
    pub replicas: Vec<crate::levers::ReplicaRow>,
    pub lanes: Vec<crate::lanes::LanesRow>,
    pub errors: Vec<String>,
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

pub fn size(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{} M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{} k", n / 1_000),
        n => n.to_string(),
    }
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
        if crate::drain::relays() > 1 {
            let _ = writeln!(
                w,
                "- {} relays on each drain's lane (`OUTBOX_BENCH_RELAYS`), each at its concurrency",
                crate::drain::relays()
            );
        }
        if crate::stores::analyze_after_fill() {
            let _ = writeln!(
                w,
                "- PostgreSQL tables analyzed after each fill (`OUTBOX_BENCH_ANALYZE=1`)"
            );
        }
        for name in [
            "OUTBOX_BENCH_SQLITE_CACHE",
            "OUTBOX_BENCH_SQLITE_MMAP",
            "OUTBOX_BENCH_SQLITE_SYNC",
            "OUTBOX_BENCH_SQLITE_CHECKPOINTS",
        ] {
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
        self.kafka_table(w);
        for row in &self.ui {
            row.markdown(w);
        }
        if !self.histories.is_empty() {
            let _ = writeln!(
                w,
                "{}",
                crate::levers::HistoryRow::markdown(&self.histories)
            );
        }
        if !self.replicas.is_empty() {
            let _ = writeln!(w, "{}", crate::levers::ReplicaRow::markdown(&self.replicas));
        }
        crate::lanes::LanesRow::markdown(&self.lanes, w);
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
}
