//! The SQL of every operation, made once per store for its names. A statement is a file,
//! `sql/<name>.sql`, written for the default names and renamed at build like the migrations
//! ([`for_names`]): what the database runs is the file, with only the names put in.
//!
//! What several statements share is written once, in a part (`sql/part/<name>.sql`), and
//! put in where a file says `{{name}}` ([`template::fill`]), when the statements are made:
//! the policies' claims and `next_due` share all but the lines a policy adds (a part each,
//! filled in or left empty), `lanes_next_due.sql` is `next_due` of each pair it is given,
//! and the cycle function (`cycle.sql`) is made of the statements' own parts.
//! [`Statements::new`] says which part goes where.
//!
//! Conventions, so each statement reads the same way:
//! - `$1` is always "now" in Unix milliseconds when a clock was injected, or NULL, and the
//!   statement's now is `COALESCE(timestamptz 'epoch' + $1::int8 * interval '1
//!   millisecond', statement_timestamp())`: `statement_timestamp()` rather than `now()`, as
//!   a caller's long transaction that enqueues late should not date its rows at the
//!   transaction's start; and rather than `clock_timestamp()`, as it is stable within a
//!   statement, so every row of a batch gets the same instant and the planner can use it in
//!   index conditions. Statements without time skip it.
//! - Durations travel as milliseconds (`int8`) and become intervals in the statement.
//! - Timestamps leave as milliseconds ([`columns`]), because the API speaks `UnixMillis`.
//! - Only the names are put in (built from validated identifiers); every value is a bind
//!   parameter.
//! - Anything that changes the plan (the ordering policy) is statement text: one file per
//!   policy (`claim_skip.sql`, `claim_block.sql`, ...), never a bind parameter.
//!
//! The relay's cycle is one server-side function (`sql/cycle.sql`, [`Statements::cycle`]):
//! ack what finished, promote the heads the acks left, claim the next batch and, when it is
//! empty, compute `next_due`. One round trip per cycle instead of five (BEGIN, ack,
//! promote_heads, claim, COMMIT). A function rather than one statement: the claim must see
//! the acks (an acked head's successor is claimable in the same cycle), and the head
//! promotion must take its key locks before it looks (schema/heads.rs). Both need a
//! snapshot taken after an earlier step, and every part of one statement shares one
//! snapshot; PL/pgSQL takes a new snapshot for each statement (READ COMMITTED), in one
//! transaction and one call. Its steps are the store's own statements, filled in from
//! their files and parts (`ack.sql` and `ack_delete.sql` reading `$7`/`$8`, the CTEs of the
//! one-statement claim, `part/head_runs.sql`, without their `lapsed_last` gate and with the
//! key run at `$11`, `part/next_due.sql`; the marking of `promote_heads` is inline: a call
//! of it cost a nested function call and a statement per key lock on every cycle that
//! acked keyed rows), with the same parameter numbers: PL/pgSQL names a function's
//! parameters `$1`, `$2`... too. The function's name carries a hash of its text, so a build
//! that changes any of its statements creates a function of its own, and relays of two
//! builds on one database (a rolling deploy) each call the one they were built with
//! (`schema.rs`).
//!
//! The cycle's head promotion marks each key's lowest *pending* row, one probe of
//! `key_pending_idx` instead of `promote_heads`' two (the lowest of each key index). That
//! keeps the invariant (schema/heads.rs): if the lowest live row is pending, it is that
//! row; if it is claimed, it carries the mark already (a claim marks what it claims, and
//! only the sweep clears a mark, from pending rows). The pending row marked behind a
//! claimed one is a stray mark, which costs a claim that meets it one refused head and
//! which the ack of the claimed row would have written anyway. Measured by callgrind
//! (`examples/benchmark/callgrind.sh`): 1.3 % fewer instructions a keyed cycle.

use std::sync::Arc;

use super::schema::{for_names, Names};
use template::{fill, part, TemplateError};

mod template;

/// The text of statement file `sql/{name}.sql`, placeholders and all.
macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!("sql/", $name, ".sql"))
    };
}

/// [`fill`] of `text` with `"placeholder" => part` pairs.
macro_rules! fill {
    ($text:expr $(, $placeholder:literal => $part:expr)*) => {
        fill($text, &[$(($placeholder, $part)),*])
    };
}

/// The text of part `sql/part/{name}.sql` ([`part`]).
macro_rules! part {
    ($name:literal) => {
        part(include_str!(concat!("sql/part/", $name, ".sql")))
    };
}

/// A `timestamptz` expression as Unix milliseconds.
fn millis(expr: &str) -> String {
    format!("floor(extract(epoch FROM {expr}) * 1000)::int8")
}

/// The columns [`super::row::message`] reads, with their SQL types as selected:
/// timestamps leave as Unix milliseconds (`int8`). One list for the select list
/// ([`columns`]) and for the result type of the cycle function ([`cycle_create`]).
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

/// `CREATE FUNCTION` of the cycle function `name` with `body` (`sql/cycle.sql`).
fn cycle_create(name: &str, body: &str) -> String {
    format!(
        "CREATE OR REPLACE FUNCTION {name}({PARAMS}) RETURNS {returns}
         LANGUAGE plpgsql AS $fn${body}$fn$",
        returns = returns(),
    )
}

/// `sql/claim_fast_*.sql` committing asynchronously: the statement sets
/// `synchronous_commit = off` for its own implicit transaction (`set_config(.., true)`, read
/// at the commit that follows the statement), as `BEGIN; SET LOCAL ..` does for the relay's
/// other transactions.
fn async_commit(claim_fast: &str) -> Arc<str> {
    const ANSWER: &str = "AS lapsed_last, c.*";
    debug_assert_eq!(claim_fast.matches(ANSWER).count(), 1, "{claim_fast}");
    claim_fast
        .replacen(
            ANSWER,
            "AS lapsed_last, set_config('synchronous_commit', 'off', true) AS async_commit, c.*",
            1,
        )
        .into()
}

/// Every statement of one store.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) enqueue: Arc<str>,
    pub(crate) find_dedupe: Arc<str>,
    pub(crate) delete_ids: Arc<str>,
    /// One claim statement per ordering policy (`sql/claim_*.sql`).
    pub(crate) claim_skip: Arc<str>,
    pub(crate) claim_block: Arc<str>,
    /// The one-statement claim per ordering policy, without dead-lettering.
    pub(crate) claim_fast_skip: Arc<str>,
    pub(crate) claim_fast_block: Arc<str>,
    pub(crate) ack: Arc<str>,
    pub(crate) ack_delete: Arc<str>,
    pub(crate) nack: Arc<str>,
    pub(crate) extend_lease: Arc<str>,
    pub(crate) release: Arc<str>,
    pub(crate) next_due_skip: Arc<str>,
    pub(crate) next_due_block: Arc<str>,
    /// `next_due` of many lanes at once.
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
    /// The cycle function (`sql/cycle.sql`): its name, which carries a hash of its text, the
    /// `CREATE FUNCTION` that `migrate` runs when the database lacks it, and its call.
    pub(crate) cycle_name: String,
    pub(crate) cycle_create: String,
    pub(crate) cycle: Arc<str>,
}

/// The text of the statements and the cycle's steps that differ by ordering policy,
/// before renaming.
struct Policy {
    /// `part/claim.sql`: the full claim.
    claim: String,
    /// `part/claim_fast.sql`: the one-statement claim.
    claim_fast: String,
    /// `part/next_due.sql` of lane `$2` and target `$3`.
    next_due: String,
    /// `part/next_due.sql` of each pair `q` (`lanes_next_due.sql`).
    next_due_of_each: String,
    /// `part/head_runs.sql` as the cycle function runs it: without the `lapsed_last` gate,
    /// the key run at `$11`.
    cycle_claim: String,
}

impl Policy {
    fn new(block: bool) -> Result<Self, TemplateError> {
        let when = |yes: bool, part: &'static str| if yes { part } else { "" };
        let key_free = |skip_to_dead: bool| {
            fill!(part!("key_free"),
                "dead_letter" => when(block, part!("key_free_dead_letter")),
                "skip_to_dead" => when(skip_to_dead, part!("skip_to_dead")))
        };
        let free = key_free(false)?;
        let pending =
            |heads: &str, run: &str| fill!(part!("pending"), "heads" => heads, "run" => run);
        let head_runs = |gate: bool, run: &str| {
            fill!(part!("head_runs"),
                "gate" => when(gate, part!("lapsed_last_gate")),
                "key_free" => &free,
                "run" => run,
                "dead_column" => when(block, part!("head_runs_dead_column")),
                "dead_bound" => when(block, part!("head_runs_dead_bound")),
                "dead_probe" => when(block, part!("head_runs_dead_probe")),
                "dead_check" => when(block, part!("head_runs_dead_check")),
                "pending" => &pending("due", part!("head_runs_run"))?,
                "to_claim" => part!("to_claim"),
                "claimed" => part!("claimed"))
        };
        let next_due = |lane: &str, target: &str| {
            fill!(part!("next_due"),
                "key_free" => &free, "lane" => lane, "target" => target)
        };
        let (successors, heads) = if block {
            (String::new(), "due")
        } else {
            let successors = fill!(part!("successors"), "key_free" => &key_free(true)?)?;
            (successors, part!("due_and_successors"))
        };
        let key_runs =
            fill!(part!("key_runs"), "dead_letter" => when(block, part!("key_runs_dead_letter")))?;
        Ok(Self {
            claim: fill!(part!("claim"),
                "key_free" => &free,
                "key_free_skip_to_dead" => &key_free(!block)?,
                "successors" => &successors,
                "pending" => &pending(heads, &key_runs)?,
                "to_claim" => part!("to_claim"),
                "claimed" => part!("claimed"))?,
            claim_fast: fill!(part!("claim_fast"),
                "lapsed_last" => part!("lapsed_last"),
                "head_runs" => &head_runs(true, "$7")?)?,
            next_due: next_due("$2", "$3")?,
            next_due_of_each: next_due("q.lane", "q.target")?,
            cycle_claim: head_runs(false, "$11")?,
        })
    }
}

impl Statements {
    /// `async_commit`: the one-statement claim commits asynchronously
    /// ([`super::PostgresConfig::synchronous_commit`] false). Fails only when a file's
    /// placeholders and the parts `sql.rs` gives for them differ: a defect of the build.
    pub(crate) fn new(names: &Names, async_commit: bool) -> Result<Self, TemplateError> {
        let renamed = |text: &str| -> Arc<str> { for_names(names, text).into() };
        /// Statement file `sql/{name}.sql` with its placeholders filled, for `names`.
        macro_rules! statement {
            ($name:literal $(, $placeholder:literal => $part:expr)*) => {
                renamed(&fill!(sql!($name) $(, $placeholder => $part)*)?)
            };
        }
        let fast = |claim: Arc<str>| {
            if async_commit {
                self::async_commit(&claim)
            } else {
                claim
            }
        };
        // The cycle's acks read the function's `$7` ids and `$8` tokens.
        let ack = fill!(sql!("ack"), "ids" => "$7", "tokens" => "$8")?;
        let ack_delete = fill!(sql!("ack_delete"), "ids" => "$7", "tokens" => "$8")?;
        let (skip, block) = (Policy::new(false)?, Policy::new(true)?);
        let cycle = fill!(sql!("cycle"),
            "ack_delete" => &ack_delete,
            "ack" => &ack,
            "acked" => part!("acked"),
            "lapsed_last" => part!("lapsed_last"),
            "head_runs_block" => &block.cycle_claim,
            "head_runs_skip" => &skip.cycle_claim,
            "next_due_block" => &block.next_due,
            "next_due_skip" => &skip.next_due)?;
        let cycle_body = for_names(names, &cycle);
        let cycle_name = format!(
            "\"{}\".\"{}_cycle_{:08x}\"",
            names.schema,
            names.prefix,
            super::schema::fnv1a64(cycle_body.as_bytes()) as u32
        );
        Ok(Self {
            cycle_create: cycle_create(&cycle_name, &cycle_body),
            cycle: format!(
                "SELECT * FROM {cycle_name}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
            )
            .into(),
            cycle_name,
            enqueue: statement!("enqueue"),
            find_dedupe: statement!("find_dedupe", "select_message" => part!("select_message")),
            delete_ids: statement!("delete_ids"),
            claim_skip: statement!("claim_skip", "claim" => &skip.claim),
            claim_block: statement!("claim_block", "claim" => &block.claim),
            claim_fast_skip: fast(statement!("claim_fast_skip", "claim_fast" => &skip.claim_fast)),
            claim_fast_block: fast(
                statement!("claim_fast_block", "claim_fast" => &block.claim_fast),
            ),
            ack: statement!("ack", "ids" => "$2", "tokens" => "$3"),
            ack_delete: statement!("ack_delete", "ids" => "$1", "tokens" => "$2"),
            nack: statement!("nack"),
            extend_lease: statement!("extend_lease"),
            release: statement!("release"),
            next_due_skip: statement!("next_due_skip", "next_due" => &skip.next_due),
            next_due_block: statement!("next_due_block", "next_due" => &block.next_due),
            lanes_next_due: statement!(
                "lanes_next_due",
                "next_due_skip" => &skip.next_due_of_each,
                "next_due_block" => &block.next_due_of_each
            ),
            promote_heads: statement!("promote_heads"),
            lanes_stats: statement!("lanes_stats"),
            stats: statement!("stats"),
            get: statement!("get", "select_message" => part!("select_message")),
            requeue: statement!("requeue"),
            discard: statement!("discard"),
            purge: statement!("purge"),
            purge_count: statement!("purge_count"),
            blocked_keys: statement!("blocked_keys"),
            pause_lane: statement!("pause_lane"),
            resume_lane: statement!("resume_lane"),
            lane_pauses: statement!("lane_pauses"),
            record_served: statement!("record_served"),
            unserved: statement!("unserved", "pairs" => part!("pairs")),
            pending_lanes: statement!("pending_lanes", "pairs" => part!("pairs")),
        })
    }
}

#[cfg(test)]
mod tests;
