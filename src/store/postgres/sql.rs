//! The SQL of every operation, made once per store for its names. A statement is a file,
//! `sql/<name>.sql`, written for the default names and renamed at build like the migrations
//! ([`for_names`]); only the claim's family (the claims, `next_due` and the cycle function,
//! `sql/claim.rs` and `sql/cycle.rs`) is composed here, from clauses each ordering policy
//! words its own way.
//!
//! Conventions, so each statement reads the same way:
//! - `$1` is always "now" in Unix milliseconds when a clock was injected, or NULL, and
//!   [`NOW`] turns it into the statement's notion of now. Statements without time skip it.
//! - Durations travel as milliseconds (`int8`) and become intervals in the statement.
//! - Timestamps leave as milliseconds ([`columns`]), because the API speaks `UnixMillis`.
//! - Only the names are put in (built from validated identifiers); every value is a bind
//!   parameter.

use std::sync::Arc;

use super::schema::{for_names, Names};
use crate::store::OrderingPolicy;

mod claim;
mod cycle;

/// The statement's now: the injected clock's reading, else the database's.
///
/// `statement_timestamp()` rather than `now()`: a caller's long transaction that enqueues
/// late should not date its rows at the transaction's start. And rather than
/// `clock_timestamp()`: it is stable within a statement, so every row of a batch gets the
/// same instant and the planner can use it in index conditions.
pub(super) const NOW: &str =
    "COALESCE(timestamptz 'epoch' + $1::int8 * interval '1 millisecond', statement_timestamp())";

/// A `timestamptz` expression as Unix milliseconds.
fn millis(expr: &str) -> String {
    format!("floor(extract(epoch FROM {expr}) * 1000)::int8")
}

/// The columns [`super::row::message`] reads, with their SQL types as selected:
/// timestamps leave as Unix milliseconds (`int8`). One list for the select list
/// ([`columns`]) and for the result type of the cycle function (`sql/cycle.rs`).
pub(crate) const MESSAGE_COLUMNS: [(&str, &str); 19] = [
    ("outbox_id", "uuid"),
    ("seq", "int8"),
    ("lane", "text"),
    ("target", "text"),
    ("payload", "json"),
    ("headers", "jsonb"),
    ("ordering_key", "text"),
    ("dedupe_key", "text"),
    ("status", "text"),
    ("attempt_count", "int8"),
    ("max_attempts", "int8"),
    ("available_at", "int8"),
    ("claimed_by", "text"),
    ("claim_token", "uuid"),
    ("lease_expires_at", "int8"),
    ("last_error", "text"),
    ("created_at", "int8"),
    ("updated_at", "int8"),
    ("delivered_at", "int8"),
];

/// The select list [`super::row::message`] reads, for table alias `a`.
pub(crate) fn columns(a: &str) -> String {
    MESSAGE_COLUMNS
        .iter()
        .map(|(name, _)| {
            if name.ends_with("_at") {
                format!("{} AS {name}", millis(&format!("{a}.{name}")))
            } else {
                format!("{a}.{name}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `timestamptz` of the Unix milliseconds at parameter `param` (e.g. `$5`).
pub(super) fn instant(param: &str) -> String {
    format!("(timestamptz 'epoch' + {param}::int8 * interval '1 millisecond')")
}

/// Every statement of one store.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) enqueue: Arc<str>,
    pub(crate) find_dedupe: Arc<str>,
    pub(crate) delete_ids: Arc<str>,
    /// One claim statement per ordering policy (see `claim.rs`).
    pub(crate) claim_skip: Arc<str>,
    pub(crate) claim_block: Arc<str>,
    /// The one-statement claim per ordering policy, without dead-lettering (`claim.rs`).
    pub(crate) claim_fast_skip: Arc<str>,
    pub(crate) claim_fast_block: Arc<str>,
    pub(crate) ack: Arc<str>,
    pub(crate) ack_delete: Arc<str>,
    pub(crate) nack: Arc<str>,
    pub(crate) extend_lease: Arc<str>,
    pub(crate) release: Arc<str>,
    pub(crate) next_due_skip: Arc<str>,
    pub(crate) next_due_block: Arc<str>,
    /// `next_due` of many lanes at once (`claim::lanes_next_due`).
    pub(crate) lanes_next_due: Arc<str>,
    pub(crate) stats: Arc<str>,
    pub(crate) lanes_stats: Arc<str>,
    /// `SELECT promote_heads($1 lanes, $2 targets, $3 keys)`: see schema/heads.rs.
    pub(crate) promote_heads: Arc<str>,
    pub(crate) get: Arc<str>,
    pub(crate) requeue: Arc<str>,
    pub(crate) discard: Arc<str>,
    pub(crate) purge: Arc<str>,
    pub(crate) purge_count: Arc<str>,
    /// The keys a dead letter holds (`key_state.rs`).
    pub(crate) blocked_keys: Arc<str>,
    /// Lane control (`lane_control.rs`): pause, resume, every pause.
    pub(crate) pause_lane: Arc<str>,
    pub(crate) resume_lane: Arc<str>,
    pub(crate) lane_pauses: Arc<str>,
    /// Served lanes (`served.rs`): record some, read the unserved.
    pub(crate) record_served: Arc<str>,
    pub(crate) unserved: Arc<str>,
    /// The lanes lane patterns match (`served.rs`).
    pub(crate) pending_lanes: Arc<str>,
    /// The cycle function (`cycle.rs`): its name, which carries a hash of its text, the
    /// `CREATE FUNCTION` that `migrate` runs when the database lacks it, and its call.
    pub(crate) cycle_name: String,
    pub(crate) cycle_create: String,
    pub(crate) cycle: Arc<str>,
}

impl Statements {
    /// `async_commit`: the one-statement claim commits asynchronously
    /// ([`super::PostgresConfig::synchronous_commit`] false).
    pub(crate) fn new(names: &Names, async_commit: bool) -> Self {
        let renamed = |text: &str| -> Arc<str> { for_names(names, text).into() };
        /// The text of `sql/{name}.sql`, written for the default names, for `names`.
        macro_rules! file {
            ($name:literal) => {
                renamed(include_str!(concat!("sql/", $name, ".sql")))
            };
        }
        let t = &names.messages;
        let cols_m = columns("m");
        let ack = file!("ack");
        let ack_delete = file!("ack_delete");
        let promote = super::schema::heads::promote_inline(names, "v_lanes", "v_targets", "v_keys");
        let cycle_body = cycle::body(t, &promote, &cols_m, &ack, &ack_delete);
        let cycle_name = format!(
            "\"{}\".\"{}_cycle_{:08x}\"",
            names.schema,
            names.prefix,
            super::schema::fnv1a64(cycle_body.as_bytes()) as u32
        );
        Self {
            cycle_create: cycle::create(&cycle_name, &cycle_body),
            cycle: cycle::call(&cycle_name).into(),
            cycle_name,
            enqueue: file!("enqueue"),
            find_dedupe: file!("find_dedupe"),
            delete_ids: file!("delete_ids"),
            claim_skip: claim::claim(t, &cols_m, OrderingPolicy::Skip).into(),
            claim_block: claim::claim(t, &cols_m, OrderingPolicy::Block).into(),
            claim_fast_skip: claim::claim_fast(t, &cols_m, OrderingPolicy::Skip, async_commit)
                .into(),
            claim_fast_block: claim::claim_fast(t, &cols_m, OrderingPolicy::Block, async_commit)
                .into(),
            ack,
            ack_delete,
            nack: file!("nack"),
            extend_lease: file!("extend_lease"),
            release: file!("release"),
            next_due_skip: claim::next_due(t, OrderingPolicy::Skip).into(),
            next_due_block: claim::next_due(t, OrderingPolicy::Block).into(),
            lanes_next_due: claim::lanes_next_due(t).into(),
            promote_heads: file!("promote_heads"),
            lanes_stats: file!("lanes_stats"),
            stats: file!("stats"),
            get: file!("get"),
            requeue: file!("requeue"),
            discard: file!("discard"),
            purge: file!("purge"),
            purge_count: file!("purge_count"),
            blocked_keys: file!("blocked_keys"),
            pause_lane: file!("pause_lane"),
            resume_lane: file!("resume_lane"),
            lane_pauses: file!("lane_pauses"),
            record_served: file!("record_served"),
            unserved: file!("unserved"),
            pending_lanes: file!("pending_lanes"),
        }
    }
}

#[cfg(test)]
mod tests;
