//! A store hook that counts every call a relay makes through its outbox and times its
//! claims.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_relay::store::{CallOutcome, StoreCall, StoreHook, StoreOp};
use outbox_relay::Outbox;

/// The store operations a relay issues, each counted on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Claim,
    AckAndClaim,
    Ack,
    Nack,
    ExtendLease,
    Release,
    NextDue,
    Stats,
    Other,
}

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Claim,
        Op::AckAndClaim,
        Op::Ack,
        Op::Nack,
        Op::ExtendLease,
        Op::Release,
        Op::NextDue,
        Op::Stats,
        Op::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Op::Claim => "claim",
            Op::AckAndClaim => "ack_and_claim",
            Op::Ack => "ack",
            Op::Nack => "nack",
            Op::ExtendLease => "extend_lease",
            Op::Release => "release",
            Op::NextDue => "next_due",
            Op::Stats => "stats",
            Op::Other => "other",
        }
    }
}

/// The claim calls (`claim` and `ack_and_claim`) of one drain.
#[derive(Debug, Clone, Copy)]
pub struct ClaimTimes {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub calls: usize,
    /// Their time added up: the lane keeps at most one out, so this over the drain's time
    /// is the share of it the lane spent waiting on a claim.
    pub total: Duration,
}

/// What the hook saw.
#[derive(Debug, Default)]
pub struct Meter {
    calls: [AtomicU64; 9],
    /// Microseconds of every claim and ack_and_claim call.
    claim_micros: Mutex<Vec<u64>>,
    /// Microseconds of the plain claim calls alone (an idle lane's pickup claim).
    plain_claim_micros: Mutex<Vec<u64>>,
    /// Rows handed out by claims (either kind).
    claimed_rows: AtomicU64,
}

impl Meter {
    fn count(&self, op: Op) {
        self.calls[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op as usize].load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> [u64; 9] {
        Op::ALL.map(|op| self.calls(op))
    }

    pub fn claimed_rows(&self) -> u64 {
        self.claimed_rows.load(Ordering::Relaxed)
    }

    fn time_claim(&self, micros: u64, rows: usize) {
        if let Ok(mut samples) = self.claim_micros.lock() {
            samples.push(micros);
        }
        self.claimed_rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// p50 of the plain claim calls (not `ack_and_claim`), in milliseconds.
    pub fn plain_claim_p50(&self) -> Option<f64> {
        let mut samples = self.plain_claim_micros.lock().ok()?.clone();
        samples.sort_unstable();
        samples.get(samples.len() / 2).map(|&us| us as f64 / 1e3)
    }

    /// p50 and p99 of the claim calls, how many there were and their total time.
    pub fn claim_times(&self) -> Option<ClaimTimes> {
        let mut samples = self.claim_micros.lock().ok()?.clone();
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        Some(ClaimTimes {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            calls: samples.len(),
            total: Duration::from_micros(samples.iter().sum()),
        })
    }
}

impl StoreHook for Meter {
    fn finished(&self, call: &StoreCall<'_>) {
        let op = match call.op {
            StoreOp::Claim => Op::Claim,
            StoreOp::AckAndClaim => Op::AckAndClaim,
            StoreOp::Ack => Op::Ack,
            StoreOp::Nack => Op::Nack,
            StoreOp::ExtendLease => Op::ExtendLease,
            StoreOp::Release => Op::Release,
            StoreOp::NextDue => Op::NextDue,
            StoreOp::Stats => Op::Stats,
            _ => Op::Other,
        };
        self.count(op);
        if let CallOutcome::Claimed(batch) = call.outcome {
            let micros = call.duration.as_micros() as u64;
            if op == Op::Claim {
                if let Ok(mut samples) = self.plain_claim_micros.lock() {
                    samples.push(micros);
                }
            }
            self.time_claim(micros, batch.messages.len());
        }
    }
}

/// `outbox` with a fresh meter on it: the outbox a relay runs on, and the meter.
pub fn metered(outbox: &Outbox) -> (Outbox, Arc<Meter>) {
    let meter = Arc::new(Meter::default());
    (outbox.clone().with_hook(meter.clone()), meter)
}
