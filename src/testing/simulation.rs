//! The simulation's schedules and its invariant checker, for runs that play a drawn
//! schedule against real relays and a real database (the crate's PostgreSQL and MySQL
//! tests): [`Plan::draw`] gives the messages, keys, target behaviour and faults a seed of
//! the simulation draws, and a [`Checker`] fed every store call (with the rows it touched,
//! read back after it) and every delivery's start and end judges the same invariants as
//! the simulation's seeds: nothing lost, per-key order, one delivery of a key at a time
//! while its claims are current, fencing, and the overlap past a lapse held to the start
//! margin's bound ([`overlap_bound`]).
//!
//! A store call's effect must reach the checker before any later call's: a run that lets
//! calls overlap serializes them around their read-back.

pub use crate::sim::{
    overlap_bound, settle_bound, Call, Checker, Fault, MessagePlan, Overlaps, Plan, Size, Stated,
    Store, TargetPlan, LANE, TARGET,
};
