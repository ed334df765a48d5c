//! One markdown table per section of the benchmark, each left out when its section did not
//! run.

use std::fmt::Write as _;

use super::rounds::rounds_note;
use super::{size, Results};
use crate::options::StoreKind;
use crate::webhook::SinkRow;

fn ms(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.2}"))
}

impl Results {
    pub(super) fn throughput_table(&self, w: &mut String) {
        if self.ceilings.is_empty() && self.drains.is_empty() {
            return;
        }
        let base = self.smallest().map_or("smallest".to_owned(), size);
        let _ = writeln!(w, "## No-op drain and raw ceiling\n");
        let _ = writeln!(
            w,
            "| store | backlog | keys | c | msg/s | × raw | × {base} | claim p50 ms | claim p99 ms | rows/claim | in claims | fill s | run s | note |"
        );
        let _ = writeln!(
            w,
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
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
                        "| {} | {} | raw SQL, claim {} + ack | 1 | {:.0} | 1.00 | | | | {} | | {:.1} | {:.1} | {note} |",
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
                    let (p50, p99, claims) = d.claim.map_or((None, None, 0), |c| {
                        (Some(c.p50_ms), Some(c.p99_ms), c.calls)
                    });
                    let per_claim = if claims > 0 {
                        format!("{:.1}", d.claimed_rows as f64 / claims as f64)
                    } else {
                        "–".to_owned()
                    };
                    let in_claims = d.claim.map_or("–".to_owned(), |c| {
                        let share = c.total.as_secs_f64() / d.drained.took.as_secs_f64().max(1e-9);
                        format!("{:.0} %", share * 100.0)
                    });
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
                        "| {} | {} | {} | {} | {rate:.0} | {raw} | {vs_base} | {} | {} | {per_claim} | {in_claims} | {:.1} | {:.1} | {note} |",
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

    pub(super) fn single_table(&self, w: &mut String) {
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

    pub(super) fn crash_table(&self, w: &mut String) {
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

    pub(super) fn pickup_section(&self, w: &mut String) {
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

    pub(super) fn slow_table(&self, w: &mut String) {
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

    pub(super) fn webhook_table(&self, w: &mut String) {
        sink_table(
            w,
            "Webhook sink against the log sink (local HTTP receiver, medians)",
            "webhook",
            &self.webhooks,
        );
    }

    pub(super) fn kafka_table(&self, w: &mut String) {
        sink_table(
            w,
            "Kafka sink against the log sink (local tansu broker, acks=all, medians)",
            "Kafka",
            &self.kafkas,
        );
    }
}

/// A sink's rows against the log sink's (the webhook and Kafka sections share the shape):
/// `title` heads the section, `sink` names the sink's columns; left out with no rows.
fn sink_table(w: &mut String, title: &str, sink: &str, rows: &[SinkRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(w, "## {title}\n");
    let _ = writeln!(
        w,
        "| store | messages | c | rounds | log msg/s | {sink} msg/s | {sink} / log | per round |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
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
            r.median_sink(),
            r.median_ratio(),
            rounds.join(", "),
        );
    }
    let _ = writeln!(w);
}
