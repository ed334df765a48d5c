//! Deliberate bugs at the lane's real decision points, for the simulation to prove its
//! checks bite (`sim::tests::every_mutation_is_caught`).
//!
//! The memory store's two (`AckSkipsToken`, `LapsedClaimsBehindPending`, and
//! `StaleAckAcceptedOnce`) are switched on per thread (`sim::mutation`).
//!
//! A lane holds an `Option<Mutation>` and its decision lines ask it
//! ([`LaneCore::mutated_by`](crate::relay::lane::core::LaneCore::mutated_by)): the simulation runs
//! the very lines production runs, with one value switched. Production builds never
//! construct a `Mutation` (every lane holds `None`), so the cost is a compare with a
//! constant field.

// Only the simulation's seed runs construct one.
#![cfg_attr(not(test), allow(dead_code))]

/// A deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// The memory store acks a claimed row whatever the token (no fencing).
    AckSkipsToken,
    /// The lane starts a buffered claim although its lease may have lapsed.
    LapsedClaimStarts,
    /// The lane starts a key's next buffered message while the one before it still runs.
    KeyNextBeforeOutcome,
    /// The memory store takes due pending rows before lapsed claims.
    LapsedClaimsBehindPending,
    /// A wake-up that comes while a claim is out is forgotten when the claim comes back
    /// short.
    LostWakeUp,
    /// A claim's limit leaves out what the lane's other claims out may bring (so several
    /// claims out together pass the lane's bound, `LaneConfig::most_held`).
    ClaimRoomIgnoresClaimsOut,
    /// A claim's limit leaves out the finished deliveries whose outcomes are recorded apart
    /// from it (the nacks, a plain ack flush in flight): their slots are free, but until
    /// the store records them their messages are still claimed, so the lane holds more
    /// than `LaneConfig::most_held` in the store.
    ClaimRoomIgnoresUnrecordedOutcomes,
    /// A claim's limit leaves out the hand-off credits taken and still on their way (so a
    /// lane that takes hand-offs holds more than `LaneConfig::most_held`).
    ClaimRoomIgnoresCredits,
    /// A failed delivery leaves the rest of its key run in the buffer (they may start
    /// before the failed one is retried).
    FailedRunNotReleased,
    /// A claim's earliest lapse is timed from its answer, not from its send (a slow answer
    /// makes the lane trust a lease the store may already count as lapsed).
    LeaseTimedFromAnswer,
    /// The memory store takes one ack whose token is stale (the row claimed again since),
    /// once in a run: fencing that fails rarely.
    StaleAckAcceptedOnce,
    /// A buffered message starts whenever its lease still holds, however near its end (no
    /// start margin): a delivery then runs past its lapse.
    NoStartMargin,
    /// An extension's "lost claim" for a token the lane no longer holds (the message was
    /// released and claimed again since) lapses the fresh claim of the same message: its
    /// key's next message then starts before it.
    LostTokenLapsesFreshClaim,
}

impl Mutation {
    /// Every mutation.
    pub(crate) const ALL: [Mutation; 13] = [
        Mutation::AckSkipsToken,
        Mutation::LapsedClaimStarts,
        Mutation::KeyNextBeforeOutcome,
        Mutation::LapsedClaimsBehindPending,
        Mutation::LostWakeUp,
        Mutation::ClaimRoomIgnoresClaimsOut,
        Mutation::ClaimRoomIgnoresUnrecordedOutcomes,
        Mutation::ClaimRoomIgnoresCredits,
        Mutation::FailedRunNotReleased,
        Mutation::LeaseTimedFromAnswer,
        Mutation::StaleAckAcceptedOnce,
        Mutation::NoStartMargin,
        Mutation::LostTokenLapsesFreshClaim,
    ];
}
