//! Lanes nobody serves: a message enqueued to a (lane, target) that no running relay has
//! among its lanes (a typo in a lane name, a lane removed from the config with messages
//! left) is never delivered, and the lanes' own gauges never see it. So every relay records
//! the lanes it runs in the store, for [`SERVED_FOR`] at a time, renewed every
//! [`SERVED_RENEWAL`] ([`Outbox::record_served`](super::Outbox::record_served)), and asks
//! which (lane, target) pairs hold pending messages that no record covers now
//! ([`Outbox::unserved_lanes`](super::Outbox::unserved_lanes)); it reports them in
//! `outbox_unserved_lanes` and `outbox_unserved_pending`, gauges without labels (the pairs'
//! names, which may be anything a producer wrote, go to the log).
//!
//! The same walk over the pairs holding pending messages finds the lanes a relay's lane
//! patterns serve ([`Outbox::pending_lanes`](super::Outbox::pending_lanes)), with no
//! record: a pattern serves each lane it matches in every relay that has the pattern, as
//! a `[[lanes]]` entry would.
//!
//! A relay that stops renewing (stopped, killed, cut off) stops covering its lanes
//! [`SERVED_FOR`] after its last renewal. A lane paused (here or fleet-wide) or failed in a
//! running relay is still served: other gauges and alerts say so.

use std::time::Duration;

use serde::Serialize;

/// How often a relay renews the record of the lanes it serves and reports the lanes nobody
/// serves.
pub const SERVED_RENEWAL: Duration = Duration::from_secs(30);
/// How long a record of a served lane holds: three renewals, so one renewal lost to a slow
/// or briefly unreachable store does not report a served lane as unserved.
pub const SERVED_FOR: Duration = Duration::from_secs(90);
/// The most pending messages counted per unserved lane: counting reads each one, and the
/// alert needs only one.
pub const UNSERVED_COUNT_CAP: u64 = 10_000;
/// The most unserved lanes one report names.
pub const UNSERVED_LIMIT: usize = 100;

/// A (lane, target) holding pending messages that no running relay serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnservedLane {
    /// The lane.
    pub lane: String,
    /// The target.
    pub target: String,
    /// Its pending messages, counted up to [`UNSERVED_COUNT_CAP`].
    pub pending: u64,
}

/// The pairs of `pending` (in name order) whose lane begins with a prefix given for its
/// target, at most `limit`: the answer of
/// [`OutboxBackend::pending_lanes`](super::OutboxBackend::pending_lanes) from the store's
/// pairs holding pending messages.
pub(crate) fn matching(
    pending: impl IntoIterator<Item = (String, String)>,
    prefixes: &[(String, String)],
    limit: usize,
) -> Vec<(String, String)> {
    pending
        .into_iter()
        .filter(|(lane, target)| {
            prefixes
                .iter()
                .any(|(prefix, t)| t == target && lane.starts_with(prefix.as_str()))
        })
        .take(limit)
        .collect()
}
