//! Shrinking a failing schedule: the same seed with fewer messages and fewer faults, as
//! long as it still fails. Greedy: each fault alone, then runs of messages, halving the
//! run length; a bounded number of runs. The result is a [`Cut`] that a replay applies.

use std::fmt;

use super::{run, Failure, Plan};

/// Which messages and faults of a plan to keep, by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cut {
    pub(crate) messages: Vec<usize>,
    pub(crate) faults: Vec<usize>,
}

impl Cut {
    /// Everything.
    pub(crate) fn all(plan: &Plan) -> Self {
        Self {
            messages: (0..plan.messages.len()).collect(),
            faults: (0..plan.faults.len()).collect(),
        }
    }

    /// The plan with only what the cut keeps.
    pub(crate) fn apply(&self, plan: &Plan) -> Plan {
        let mut cut = plan.clone();
        cut.messages = self
            .messages
            .iter()
            .map(|&i| plan.messages[i].clone())
            .collect();
        cut.faults = self.faults.iter().map(|&i| plan.faults[i]).collect();
        cut
    }

    /// Parses what [`Cut`]'s `Display` wrote: `messages/faults`, each a list of indices and
    /// ranges (`0-49,60`).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (messages, faults) = text.split_once('/')?;
        Some(Self {
            messages: parse_list(messages)?,
            faults: parse_list(faults)?,
        })
    }
}

fn parse_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn write_list(f: &mut fmt::Formatter<'_>, list: &[usize]) -> fmt::Result {
    let mut i = 0;
    let mut first = true;
    while i < list.len() {
        let mut j = i;
        while j + 1 < list.len() && list[j + 1] == list[j] + 1 {
            j += 1;
        }
        if !first {
            f.write_str(",")?;
        }
        first = false;
        if j > i {
            write!(f, "{}-{}", list[i], list[j])?;
        } else {
            write!(f, "{}", list[i])?;
        }
        i = j + 1;
    }
    Ok(())
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_list(f, &self.messages)?;
        f.write_str("/")?;
        write_list(f, &self.faults)
    }
}

/// The smallest cut of `plan` found within `budget` runs that still fails, and its failure.
pub(crate) fn shrink(plan: &Plan, failure: Failure, budget: usize) -> (Cut, Failure) {
    let mut best = (Cut::all(plan), failure);
    let mut runs = 0;
    let mut try_cut = |cut: Cut, best: &mut (Cut, Failure)| -> bool {
        runs += 1;
        if runs > budget {
            return false;
        }
        match run(&cut.apply(plan)) {
            Err(failure) => {
                *best = (cut, failure);
                true
            }
            Ok(_) => false,
        }
    };
    // Each fault alone.
    let mut i = 0;
    while i < best.0.faults.len() {
        let mut cut = best.0.clone();
        cut.faults.remove(i);
        if !try_cut(cut, &mut best) {
            i += 1;
        }
    }
    // Runs of messages, long ones first.
    let mut chunk = best.0.messages.len() / 2;
    while chunk > 0 {
        let mut start = 0;
        while start < best.0.messages.len() {
            let mut cut = best.0.clone();
            let end = (start + chunk).min(cut.messages.len());
            cut.messages.drain(start..end);
            if !try_cut(cut, &mut best) {
                start += chunk;
            }
        }
        chunk /= 2;
    }
    best
}
