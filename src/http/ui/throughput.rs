//! Delivered and failed per minute over the last hour, per lane, for the lanes page's
//! chart. The relay counts deliveries as running totals ([`LaneStatus`]); a sampler reads
//! them every [`SAMPLE_EVERY`] and this history turns the growth of each total into
//! per-minute buckets. Pure: minutes are numbers the caller passes, so tests need no clock.
//!
//! The figures are this process's: with several relays on one lane, each one's page shows
//! its own share (the store keeps no per-minute history, and counting delivered rows by
//! time would read the table).
//!
//! [`LaneStatus`]: crate::relay::LaneStatus

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

/// How often the sampler reads the relay's totals.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Minutes the chart shows.
pub(crate) const MINUTES: usize = 60;

/// One minute's growth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Minute {
    /// Messages delivered in it.
    pub(crate) delivered: u64,
    /// Deliveries that failed in it.
    pub(crate) failed: u64,
}

#[derive(Debug, Default)]
struct LaneHistory {
    /// The totals last seen.
    last: Option<(u64, u64)>,
    /// (minute number, growth), oldest first, at most [`MINUTES`] of them.
    minutes: VecDeque<(u64, Minute)>,
}

/// The per-minute history of every lane, by `lane/target`.
#[derive(Debug, Default)]
pub(crate) struct Throughput {
    lanes: BTreeMap<String, LaneHistory>,
}

impl Throughput {
    /// Records a lane's running totals seen in minute `minute` (minutes since any fixed
    /// start). The first sample of a lane only sets its baseline; a total that went down
    /// (a lane removed and added again) starts a new baseline.
    pub(crate) fn observe(&mut self, lane: &str, minute: u64, delivered: u64, failed: u64) {
        let history = self.lanes.entry(lane.to_owned()).or_default();
        let previous = history.last.replace((delivered, failed));
        let Some((was_delivered, was_failed)) = previous else {
            return;
        };
        if delivered < was_delivered || failed < was_failed {
            return;
        }
        let growth = Minute {
            delivered: delivered - was_delivered,
            failed: failed - was_failed,
        };
        match history.minutes.back_mut() {
            Some((last, bucket)) if *last == minute => {
                bucket.delivered += growth.delivered;
                bucket.failed += growth.failed;
            }
            _ => history.minutes.push_back((minute, growth)),
        }
        while history
            .minutes
            .front()
            .is_some_and(|(m, _)| m + MINUTES as u64 <= minute)
        {
            history.minutes.pop_front();
        }
    }

    /// The last [`MINUTES`] minutes up to `now` (the current one last), zero where
    /// nothing was seen.
    pub(crate) fn series(&self, lane: &str, now: u64) -> Vec<Minute> {
        let mut series = vec![Minute::default(); MINUTES];
        let Some(history) = self.lanes.get(lane) else {
            return series;
        };
        for (minute, growth) in &history.minutes {
            if *minute <= now && now - minute < MINUTES as u64 {
                // `now - minute` minutes ago: slot from the end.
                series[MINUTES - 1 - (now - minute) as usize] = *growth;
            }
        }
        series
    }
}

/// The series as a small inline SVG: a bar per minute, delivered up from the middle line
/// and failed down from it, each scaled to its own largest minute. It carries a title and
/// a text summary for screen readers; the colours come from the page's CSS.
pub(crate) fn chart(series: &[Minute]) -> String {
    const WIDTH: usize = 180;
    const HALF: f64 = 18.0;
    let most_delivered = series.iter().map(|m| m.delivered).max().unwrap_or(0);
    let most_failed = series.iter().map(|m| m.failed).max().unwrap_or(0);
    let total_delivered: u64 = series.iter().map(|m| m.delivered).sum();
    let total_failed: u64 = series.iter().map(|m| m.failed).sum();
    let bar = WIDTH as f64 / series.len().max(1) as f64;
    let height = |value: u64, most: u64| {
        if most == 0 {
            0.0
        } else {
            (value as f64 / most as f64 * HALF).max(if value > 0 { 1.0 } else { 0.0 })
        }
    };
    let mut svg = format!(
        "<svg class=\"chart\" role=\"img\" viewBox=\"0 0 {WIDTH} {h}\" width=\"{WIDTH}\" height=\"{h}\" \
         aria-label=\"last hour: {total_delivered} delivered, {total_failed} failed\">\
         <title>Last hour, per minute: {total_delivered} delivered (peak {most_delivered}/min), \
         {total_failed} failed (peak {most_failed}/min)</title>\
         <line class=\"axis\" x1=\"0\" y1=\"{HALF}\" x2=\"{WIDTH}\" y2=\"{HALF}\"/>",
        h = HALF * 2.0
    );
    for (i, minute) in series.iter().enumerate() {
        let x = i as f64 * bar;
        let up = height(minute.delivered, most_delivered);
        let down = height(minute.failed, most_failed);
        if up > 0.0 {
            let _ = write!(
                svg,
                "<rect class=\"delivered\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{up:.1}\"/>",
                HALF - up,
                bar.max(1.0) - 0.5
            );
        }
        if down > 0.0 {
            let _ = write!(
                svg,
                "<rect class=\"failed\" x=\"{x:.1}\" y=\"{HALF}\" width=\"{:.1}\" height=\"{down:.1}\"/>",
                bar.max(1.0) - 0.5
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_of_the_totals_goes_into_its_minute() {
        let mut history = Throughput::default();
        history.observe("orders/audit", 100, 10, 1);
        assert_eq!(
            history.series("orders/audit", 100)[MINUTES - 1],
            Minute::default()
        );
        history.observe("orders/audit", 100, 15, 1);
        history.observe("orders/audit", 100, 20, 3);
        history.observe("orders/audit", 102, 26, 3);
        let series = history.series("orders/audit", 102);
        assert_eq!(series.len(), MINUTES);
        assert_eq!(
            series[MINUTES - 1],
            Minute {
                delivered: 6,
                failed: 0
            }
        );
        assert_eq!(series[MINUTES - 2], Minute::default());
        assert_eq!(
            series[MINUTES - 3],
            Minute {
                delivered: 10,
                failed: 2
            }
        );
        assert_eq!(
            history.series("other/lane", 102),
            vec![Minute::default(); MINUTES]
        );
    }

    #[test]
    fn minutes_older_than_an_hour_drop_out_and_a_reset_restarts_the_baseline() {
        let mut history = Throughput::default();
        history.observe("l/t", 0, 0, 0);
        history.observe("l/t", 0, 5, 0);
        history.observe("l/t", 59, 7, 0);
        assert_eq!(
            history.series("l/t", 59)[0],
            Minute {
                delivered: 5,
                failed: 0
            }
        );
        history.observe("l/t", 60, 8, 0);
        let series = history.series("l/t", 60);
        assert_eq!(
            series.iter().map(|m| m.delivered).sum::<u64>(),
            3,
            "{series:?}"
        );
        // The lane was removed and added: its totals start again.
        history.observe("l/t", 61, 2, 0);
        history.observe("l/t", 61, 4, 0);
        assert_eq!(history.series("l/t", 61)[MINUTES - 1].delivered, 2);
    }

    #[test]
    fn the_chart_scales_each_series_to_its_peak_and_says_its_totals() {
        let mut series = vec![Minute::default(); MINUTES];
        series[10] = Minute {
            delivered: 50,
            failed: 0,
        };
        series[20] = Minute {
            delivered: 100,
            failed: 4,
        };
        let svg = chart(&series);
        assert!(svg.contains("150 delivered, 4 failed"), "{svg}");
        assert_eq!(svg.matches("class=\"delivered\"").count(), 2, "{svg}");
        assert_eq!(svg.matches("class=\"failed\"").count(), 1, "{svg}");
        assert!(
            svg.contains("height=\"18.0\""),
            "the peak fills its half: {svg}"
        );
        assert!(
            svg.contains("height=\"9.0\""),
            "half the peak, half the height: {svg}"
        );
        let empty = chart(&vec![Minute::default(); MINUTES]);
        assert!(!empty.contains("<rect"), "{empty}");
    }
}
