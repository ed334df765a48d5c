//! `--rounds`: each case runs that many times and the report keeps, per case, the round
//! with the median rate, noting every round's rate beside it.

use super::Results;

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
pub(super) fn rounds_note(rounds: &[f64], unit: &str) -> String {
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
