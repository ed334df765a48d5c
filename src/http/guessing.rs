//! Token guessing made slow: each peer may fail a few times for free, then waits a time
//! that doubles with every further failure before its next try is even looked at; and the
//! warnings a flood of wrong tokens would write are one line per [`WARN_EVERY`] at most.
//! Pure: no clock of its own (callers pass `Instant`s), no I/O, unit-tested.
//!
//! Why per peer, and what a peer is: a wrong bearer token (the API) and a wrong login (the
//! UI) count alike against the address they came from; an IPv6 address counts by its /64,
//! the block one host is usually given. A router mounted in a service that does not pass
//! the peer's address (`ConnectInfo`) counts every request as one peer: its operators may
//! then be made to wait by whoever guesses, which is better than free guessing.
//! Bounded: at most [`MAX_PEERS`] peers are remembered (the quietest forgotten first), and a
//! peer with no failure for [`FORGET_AFTER`] starts over.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failures a peer may make before it must wait.
pub(crate) const FREE_FAILURES: u32 = 5;
/// The first wait, after [`FREE_FAILURES`] failures; each further failure doubles it.
pub(crate) const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait: 300 guesses from one peer take hours.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);
/// A peer that failed nothing for this long starts over.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// The most peers remembered at once.
pub(crate) const MAX_PEERS: usize = 4096;
/// At most one warning per this long; the ones in between are counted in the next.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(10);

/// Whom a failure counts against: an IPv4 address, an IPv6 /64, or every peer at once
/// when the address is not known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Peer(Option<IpAddr>);

impl Peer {
    /// The peer of a request from `addr` (`None`: not known).
    pub(crate) fn of(addr: Option<IpAddr>) -> Self {
        Self(addr.map(|ip| match ip {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let mut segments = v6.segments();
                    segments[4..].fill(0);
                    IpAddr::V6(segments.into())
                }
            },
        }))
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(IpAddr::V6(v6)) => write!(f, "{v6}/64"),
            Some(ip) => write!(f, "{ip}"),
            None => f.write_str("unknown"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    last: Instant,
    /// No try is looked at before this.
    until: Option<Instant>,
}

/// A warning to log: a failure, and how many were not logged since the last warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    /// Who failed.
    pub(crate) peer: Peer,
    /// That peer's failures in a row.
    pub(crate) failures: u32,
    /// How long it must now wait, if it must.
    pub(crate) wait: Option<Duration>,
    /// Failures (of any peer) since the last warning, not logged.
    pub(crate) unlogged: u64,
}

/// The failures of every peer, and the warnings' pace.
#[derive(Debug, Default)]
pub(crate) struct Guesses {
    peers: HashMap<Peer, Record>,
    last_warning: Option<Instant>,
    unlogged: u64,
}

impl Guesses {
    /// Whether `peer` may try now; else how long it must still wait.
    pub(crate) fn admit(&self, peer: Peer, now: Instant) -> Result<(), Duration> {
        match self.peers.get(&peer).and_then(|record| record.until) {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// `peer` presented a wrong token at `now`: counts it, and sets its wait past the free
    /// failures. A warning to log, unless one went out within [`WARN_EVERY`].
    pub(crate) fn failed(&mut self, peer: Peer, now: Instant) -> Option<Warning> {
        self.forget(now);
        let record = self.peers.entry(peer).or_insert(Record {
            failures: 0,
            last: now,
            until: None,
        });
        record.failures = record.failures.saturating_add(1);
        record.last = now;
        let wait = wait_after(record.failures);
        record.until = wait.map(|wait| now + wait);
        let warning = Warning {
            peer,
            failures: record.failures,
            wait,
            unlogged: self.unlogged,
        };
        match self.last_warning {
            Some(last) if now.duration_since(last) < WARN_EVERY => {
                self.unlogged += 1;
                None
            }
            _ => {
                self.last_warning = Some(now);
                self.unlogged = 0;
                Some(warning)
            }
        }
    }

    /// `peer` presented the right token: it starts over.
    pub(crate) fn succeeded(&mut self, peer: Peer) {
        self.peers.remove(&peer);
    }

    /// Drops peers quiet for [`FORGET_AFTER`], then the quietest while over [`MAX_PEERS`].
    fn forget(&mut self, now: Instant) {
        self.peers
            .retain(|_, record| now.duration_since(record.last) < FORGET_AFTER);
        while self.peers.len() >= MAX_PEERS {
            let Some(quietest) = self
                .peers
                .iter()
                .min_by_key(|(_, record)| record.last)
                .map(|(peer, _)| *peer)
            else {
                break;
            };
            self.peers.remove(&quietest);
        }
    }
}

/// How long a peer waits after its `failures`th failure in a row: nothing for the first
/// [`FREE_FAILURES`], then [`FIRST_WAIT`] doubling, at most [`MAX_WAIT`].
fn wait_after(failures: u32) -> Option<Duration> {
    let past = failures.checked_sub(FREE_FAILURES + 1)?;
    let doubled = FIRST_WAIT.saturating_mul(1u32.checked_shl(past).unwrap_or(u32::MAX));
    Some(doubled.min(MAX_WAIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str) -> Peer {
        Peer::of(Some(ip.parse().unwrap()))
    }

    #[test]
    fn a_peer_waits_longer_after_each_failure_past_the_free_ones() {
        let start = Instant::now();
        let mut guesses = Guesses::default();
        let attacker = peer("10.0.0.9");
        let mut now = start;
        for _ in 0..FREE_FAILURES {
            assert_eq!(guesses.admit(attacker, now), Ok(()));
            guesses.failed(attacker, now);
        }
        assert_eq!(
            guesses.admit(attacker, now),
            Ok(()),
            "the free failures cost nothing"
        );
        let mut waits = Vec::new();
        for _ in 0..9 {
            guesses.failed(attacker, now);
            let wait = guesses.admit(attacker, now).unwrap_err();
            waits.push(wait.as_secs());
            now += wait;
            assert_eq!(
                guesses.admit(attacker, now),
                Ok(()),
                "free again after the wait"
            );
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // Another peer is not held back; the right token starts the attacker over.
        assert_eq!(guesses.admit(peer("10.0.0.10"), now), Ok(()));
        guesses.failed(attacker, now);
        guesses.succeeded(attacker);
        assert_eq!(guesses.admit(attacker, now), Ok(()));
        guesses.failed(attacker, now);
        assert_eq!(guesses.admit(attacker, now), Ok(()), "free failures again");
    }

    #[test]
    fn warnings_go_out_at_most_once_per_interval_counting_the_rest() {
        let start = Instant::now();
        let mut guesses = Guesses::default();
        let attacker = peer("192.0.2.1");
        let first = guesses
            .failed(attacker, start)
            .expect("the first is logged");
        assert_eq!((first.failures, first.unlogged, first.wait), (1, 0, None));
        for i in 1..300u32 {
            let at = start + Duration::from_millis(u64::from(i));
            assert_eq!(guesses.failed(attacker, at), None);
        }
        let next = guesses
            .failed(attacker, start + WARN_EVERY)
            .expect("one more once the interval passed");
        assert_eq!(next.unlogged, 299);
        assert_eq!(next.failures, 301);
        assert_eq!(next.wait, Some(MAX_WAIT));
    }

    #[test]
    fn ipv6_peers_count_by_their_64_and_quiet_peers_are_forgotten() {
        assert_eq!(peer("2001:db8:1:2:aaaa::1"), peer("2001:db8:1:2:bbbb::9"));
        assert_ne!(peer("2001:db8:1:2::1"), peer("2001:db8:1:3::1"));
        assert_eq!(peer("::ffff:10.0.0.1"), peer("10.0.0.1"));
        assert_eq!(peer("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        assert_eq!(Peer::of(None).to_string(), "unknown");
        let start = Instant::now();
        let mut guesses = Guesses::default();
        let attacker = peer("10.0.0.9");
        for _ in 0..=FREE_FAILURES {
            guesses.failed(attacker, start);
        }
        assert!(guesses.admit(attacker, start).is_err());
        let later = start + FORGET_AFTER;
        guesses.failed(peer("10.0.0.10"), later);
        assert_eq!(guesses.peers.len(), 1, "the quiet peer is forgotten");
        for i in 0..MAX_PEERS + 10 {
            let ip = std::net::Ipv4Addr::from(u32::try_from(i).unwrap());
            guesses.failed(Peer::of(Some(IpAddr::V4(ip))), later);
        }
        assert!(guesses.peers.len() <= MAX_PEERS);
    }
}
