//! The relay's cycle as one server-side function: ack what finished, promote the heads the
//! acks left, claim the next batch and, when it is empty, compute `next_due`. One round
//! trip per cycle instead of five (BEGIN, ack, promote_heads, claim, COMMIT).
//!
//! Why a function rather than one statement: the claim must see the acks (an acked head's
//! successor is claimable in the same cycle), and `promote_heads` must take its key locks
//! before it looks (schema/heads.rs). Both need a snapshot taken after an earlier step, and
//! every part of one statement shares one snapshot. PL/pgSQL takes a new snapshot for each
//! statement (READ COMMITTED), in one transaction and one call.
//!
//! The steps are the statements the store runs on their own (`ack`, [`super::claim`]'s
//! CTEs, `next_due`), with the same parameter numbers: PL/pgSQL names a function's
//! parameters `$1`, `$2`... too, so the claim's text is used as it is (but for the key
//! run: `$7` in the claim statements, `$11` here). The ordering policy stays statement
//! text: one static claim per policy, each with its own cached plan; the key run is a
//! parameter (its `LIMIT`), which changes no plan.
//!
//! The function's name carries a hash of its text, so a build that changes any of these
//! statements creates a function of its own, and relays of two builds on one database
//! (a rolling deploy) each call the one they were built with (`schema.rs`).

use super::claim::{fast_ctes, lapsed_last, next_due};
use super::MESSAGE_COLUMNS;
use crate::store::OrderingPolicy;

/// Parameters, in order: `$1` now, `$2` lane, `$3` target, `$4` limit, `$5` lease in ms,
/// `$6` consumer (as the claim), `$7` ids and `$8` tokens to ack, `$9` Block (else Skip),
/// `$10` commit asynchronously, `$11` the longest key run, `$12` the acks delete their
/// rows (`keep_delivered = false`) instead of marking them delivered.
const PARAMS: &str = "p_now int8, p_lane text, p_target text, p_limit int8, p_lease int8, \
    p_consumer text, p_ids uuid[], p_tokens uuid[], p_block boolean, p_async boolean, \
    p_run int8, p_delete boolean";

/// The result: the claimed rows in claim order (the message columns, the first three
/// NULL), then one last row with the message columns NULL: `acked`, the ordinals (1-based)
/// of the acks applied; `lapsed_last`, true when the lane has a lapsed last attempt, which
/// only the full claim dead-letters (the cycle then claimed nothing); `next_due_ms`, when the
/// claim was empty, as `next_due` answers it.
fn returns() -> String {
    let columns: Vec<String> = MESSAGE_COLUMNS
        .iter()
        .map(|(name, ty)| format!("{name} {ty}"))
        .collect();
    format!(
        "TABLE (acked int8[], lapsed_last boolean, next_due_ms int8, {})",
        columns.join(", ")
    )
}

/// The body of the cycle function for table `t`; `promote` marks the heads of the keys in
/// `v_lanes`, `v_targets` and `v_keys` (`schema/heads.rs`, `promote_inline`): inline, not
/// a call of `promote_heads`, which cost a nested function call and a statement per key
/// lock on every cycle that acked keyed rows. `ack` and `ack_delete`: the store's
/// statements `sql/ack.sql` and `sql/ack_delete.sql` for `t` ([`ack_step`]).
pub(crate) fn body(t: &str, promote: &str, cols_m: &str, ack: &str, ack_delete: &str) -> String {
    let claim = |policy| {
        format!(
            "WITH {ctes}
             SELECT NULL::int8[], NULL::boolean, NULL::int8, c.*
             FROM claimed c JOIN to_claim o ON o.outbox_id = c.outbox_id
             ORDER BY o.ord",
            ctes = fast_ctes(t, cols_m, policy, "", "$11"),
        )
    };
    let nulls: Vec<String> = MESSAGE_COLUMNS
        .iter()
        .map(|(_, ty)| format!("NULL::{ty}"))
        .collect();
    format!(
        "
#variable_conflict use_column
DECLARE
    v_acked int8[] := '{{}}';
    v_lanes text[];
    v_targets text[];
    v_keys text[];
    v_lapsed boolean;
    v_claimed int8 := 0;
    v_due int8;
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF cardinality(p_ids) > 0 AND p_delete THEN
        WITH a AS ({ack_delete})
        SELECT {acked}
        INTO v_acked, v_lanes, v_targets, v_keys
        FROM a;
    ELSIF cardinality(p_ids) > 0 THEN
        WITH a AS ({ack})
        SELECT {acked}
        INTO v_acked, v_lanes, v_targets, v_keys
        FROM a;
    END IF;
    IF cardinality(p_ids) > 0 THEN
        IF cardinality(v_keys) > 0 THEN
            {promote}
        END IF;
    END IF;
    v_lapsed := {lapsed_last};
    IF NOT v_lapsed THEN
        IF p_block THEN
            RETURN QUERY {claim_block};
        ELSE
            RETURN QUERY {claim_skip};
        END IF;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        IF v_claimed = 0 THEN
            IF p_block THEN
                v_due := ({due_block});
            ELSE
                v_due := ({due_skip});
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT v_acked, v_lapsed, v_due, {nulls};
END
",
        ack = ack_step(ack, "unnest($2::uuid[], $3::uuid[])"),
        ack_delete = ack_step(ack_delete, "unnest($1::uuid[], $2::uuid[])"),
        acked = "coalesce(array_agg(a.ord), '{}'),
               array_agg(a.lane) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.target) FILTER (WHERE a.ordering_key IS NOT NULL),
               array_agg(a.ordering_key) FILTER (WHERE a.ordering_key IS NOT NULL)",
        lapsed_last = lapsed_last(t),
        claim_block = claim(OrderingPolicy::Block),
        claim_skip = claim(OrderingPolicy::Skip),
        due_block = next_due(t, OrderingPolicy::Block),
        due_skip = next_due(t, OrderingPolicy::Skip),
        nulls = nulls.join(", "),
    )
}

/// An ack statement as a step of the function: the same text, but for its ids and tokens,
/// `input` (their `unnest` in the statement), which the function has at `$7` and `$8`. Its
/// only other parameter, `$1` now, is the function's `$1` too.
fn ack_step(statement: &str, input: &str) -> String {
    debug_assert!(statement.contains(input), "{statement}");
    statement.replace(input, "unnest($7::uuid[], $8::uuid[])")
}

/// `CREATE FUNCTION` of the cycle function `name` with `body`.
pub(crate) fn create(name: &str, body: &str) -> String {
    format!(
        "CREATE OR REPLACE FUNCTION {name}({PARAMS}) RETURNS {returns}
         LANGUAGE plpgsql AS $fn${body}$fn$",
        returns = returns(),
    )
}

/// The call: parameters as [`PARAMS`] lists them.
pub(crate) fn call(name: &str) -> String {
    format!("SELECT * FROM {name}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
}

#[cfg(test)]
mod tests;
