//! A key's live rows in two indexes, one per status, and the probes over them (migration 4:
//! `migrations/postgres/V4__key_indexes_by_status.sql`).
//!
//! # Why two indexes
//!
//! Until migration 4 one index, `key_live_idx` (lane, target, ordering_key, seq), held every
//! pending and claimed row with a key, and `key_claimed_idx` (lane, target, ordering_key)
//! the claimed ones again. PostgreSQL cannot update a row in place when a column that an
//! index names or filters on changes (no HOT update), so a claim, which changes `status`,
//! writes a new version of the row and an entry for it into every index whose predicate the
//! new version meets: a keyless row 3 entries (`outbox_id`, `seq`, `lease_idx`), a keyed row
//! 5, both key indexes included. Index inserts are a third of the server's time in a
//! drain, keyed or not (`perf`), so this was a good part of a keyed claim's extra cost.
//! Measured server-side (`examples/claim_plans.rs`' cycle loop, 100 k pending rows over
//! 1,000 keys, the build before against this one, alternating), a keyed message went from
//! 0.65 to 0.66–0.68 of a keyless one's rate: a small part of the gap, which is the rest
//! of the keyed row's writes (`examples/benchmark/HISTORY.md`, "One key index per status",
//! has the numbers).
//!
//! So `key_pending_idx` holds pending rows and `key_claimed_idx` (now with `seq`) claimed
//! ones, and a claimed keyed row gets one key index entry, not two. "The key has a live
//! row" becomes two probes, one into each; "the key's lowest live row" the lower of the
//! first row of each. A key run reads pending rows only and stops before the key's first
//! claimed row after its head ([`run_bound`]).

/// The key of a row, as three SQL expressions: (lane, target, ordering_key).
#[derive(Debug, Clone)]
pub(crate) struct KeyOf {
    lane: String,
    target: String,
    key: String,
}

impl KeyOf {
    /// The key given by three expressions.
    pub(crate) fn new(lane: &str, target: &str, key: &str) -> Self {
        Self {
            lane: lane.to_owned(),
            target: target.to_owned(),
            key: key.to_owned(),
        }
    }

    /// The key of the row under alias `a`: `a.lane`, `a.target`, `a.ordering_key`.
    pub(crate) fn of(a: &str) -> Self {
        Self::new(
            &format!("{a}.lane"),
            &format!("{a}.target"),
            &format!("{a}.ordering_key"),
        )
    }

    /// `e` is a row of this key.
    pub(crate) fn matches(&self, e: &str) -> String {
        format!(
            "{e}.lane = {} AND {e}.target = {} AND {e}.ordering_key = {}",
            self.lane, self.target, self.key
        )
    }
}

/// The two live statuses, each with its own key index.
const LIVE: [&str; 2] = ["pending", "claimed"];

/// A query answering `outbox_id` and `seq` of the lowest row (by `seq`) of `key` in
/// `status` with `cond` (on `e`), if any: one descent of that status's key index.
fn lowest_in(t: &str, e: &str, key: &KeyOf, status: &str, cond: &str) -> String {
    format!(
        "SELECT {e}.outbox_id, {e}.seq FROM {t} {e}
                  WHERE {matches} AND {e}.status = '{status}'{cond}
                  ORDER BY {e}.seq LIMIT 1",
        matches = key.matches(e),
    )
}

/// A query answering `outbox_id` of the lowest live row (by `seq`) of `key` with `cond` (on
/// `e`), if any: the first row of each key index in `seq` order, then the lower of the two.
pub(crate) fn lowest_live(t: &str, e: &str, key: &KeyOf, cond: &str) -> String {
    let arms: Vec<String> = LIVE
        .iter()
        .map(|status| format!("({})", lowest_in(t, e, key, status, cond)))
        .collect();
    format!(
        "SELECT x.outbox_id FROM ({}) x ORDER BY x.seq LIMIT 1",
        arms.join(" UNION ALL ")
    )
}

/// A query answering `outbox_id` (and `seq`) of the lowest pending row of `key`, if any: one
/// descent of `key_pending_idx`.
pub(crate) fn lowest_pending(t: &str, e: &str, key: &KeyOf) -> String {
    lowest_in(t, e, key, "pending", "")
}

/// The `seq` of the first claimed row of `key` after `after` (an expression), or the
/// largest `int8` when there is none: a key run, read from `key_pending_idx`, stops before
/// it, as the run stopped at the first row that was not pending when both statuses shared
/// one index. One probe of `key_claimed_idx`.
pub(crate) fn run_bound(t: &str, key: &KeyOf, after: &str) -> String {
    format!(
        "coalesce((SELECT c.seq FROM {t} c
                   WHERE {matches} AND c.status = 'claimed' AND c.seq > {after}
                   ORDER BY c.seq LIMIT 1), {max})",
        matches = key.matches("c"),
        max = i64::MAX,
    )
}

#[cfg(test)]
mod tests;
