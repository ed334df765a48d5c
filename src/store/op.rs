//! [`StoreOp`]: the one name of a store operation, as errors, hooks, logs and metric labels
//! spell it.

crate::named::label_values! {
    /// A store operation: what failed in a [`StoreError`](super::StoreError), what a
    /// [`StoreHook`](super::StoreHook) is told finished, and the value of the `op` label
    /// of the store metrics.
    pub enum StoreOp {
        /// `enqueue` or `enqueue_many` (through the pool, or in a caller's transaction).
        Enqueue => "enqueue",
        /// `claim`.
        Claim => "claim",
        /// `ack`.
        Ack => "ack",
        /// `nack`.
        Nack => "nack",
        /// `extend_lease`.
        ExtendLease => "extend_lease",
        /// `release`.
        Release => "release",
        /// `next_due`.
        NextDue => "next_due",
        /// `stats`.
        Stats => "stats",
        /// `ack_and_claim`: acks and the claim that follows them, in one call.
        AckAndClaim => "ack_and_claim",
        /// `list`.
        List => "list",
        /// `get`.
        Get => "get",
        /// `requeue_dead_letters`.
        RequeueDeadLetters => "requeue_dead_letters",
        /// `discard_dead_letters`.
        DiscardDeadLetters => "discard_dead_letters",
        /// `purge`.
        Purge => "purge",
        /// Opening a connection or a pool.
        Connect => "connect",
        /// Listening for wake-ups (PostgreSQL `LISTEN`).
        Listen => "listen",
        /// Reading or applying the schema's migrations.
        Migrate => "migrate",
        /// A backend's own maintenance or diagnostics (PostgreSQL `sweep_heads`,
        /// `explain`; SQLite checkpoints).
        Maintenance => "maintenance",
        /// `pause_lane`: a fleet-wide pause written to the lane-control table.
        PauseLane => "pause_lane",
        /// `resume_lane`: a fleet-wide pause lifted.
        ResumeLane => "resume_lane",
        /// `lane_pauses`: the fleet-wide pauses in force.
        LanePauses => "lane_pauses",
        /// `record_served`: a relay records the lanes it serves (`store::served`).
        RecordServed => "record_served",
        /// `unserved_lanes`: the lanes with pending messages that no relay serves.
        UnservedLanes => "unserved_lanes",
        /// `pending_lanes`: the lanes with pending messages that lane patterns match.
        PendingLanes => "pending_lanes",
    }
}
