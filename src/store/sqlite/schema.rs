//! Every fixed statement the store runs, one file each under `sql/`, and the migrations
//! that make the table and indexes they read (`schema/migrations.rs`). The files are
//! written for the default table, `outbox`; a table prefix is a validated identifier, put
//! into their names once, at open, by [`for_table`]; values are always bound.

use std::collections::BTreeSet;
use std::sync::{Arc, LazyLock};

use crate::message::ValidationError;
use crate::store::OrderingPolicy;

/// The longest table prefix accepted.
pub const MAX_TABLE_PREFIX_LEN: usize = 32;

/// The columns every query that reads messages selects, in the order `row::decode` reads.
pub(super) const COLUMNS: &str = "seq, outbox_id, lane, target, payload, headers, \
     ordering_key, dedupe_key, status, attempt_count, max_attempts, available_at, \
     claimed_by, claim_token, lease_expires_at, last_error, created_at, updated_at, \
     delivered_at";

/// Checks a table prefix: empty, or an SQL identifier start of at most
/// [`MAX_TABLE_PREFIX_LEN`] ASCII letters, digits and underscores, not starting with a digit.
pub(super) fn validate_table_prefix(prefix: &str) -> Result<(), ValidationError> {
    const FIELD: &str = "table_prefix";
    if prefix.len() > MAX_TABLE_PREFIX_LEN {
        return Err(ValidationError::new(
            FIELD,
            format!(
                "is {} characters, over the limit of {MAX_TABLE_PREFIX_LEN}",
                prefix.len()
            ),
        ));
    }
    if prefix.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(ValidationError::new(FIELD, "must not start with a digit"));
    }
    // SQLite refuses to create tables named sqlite_* (its own): say so before it does.
    if prefix.to_ascii_lowercase().starts_with("sqlite_") {
        return Err(ValidationError::new(
            FIELD,
            format!("{prefix:?} starts with \"sqlite_\", which SQLite reserves for its own tables"),
        ));
    }
    if let Some(bad) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(ValidationError::new(
            FIELD,
            format!("contains {bad:?}; use only ASCII letters, digits and '_'"),
        ));
    }
    Ok(())
}

mod migrations;

pub(super) use migrations::{latest_version, next_migration, script, MIGRATIONS_TABLE};

/// The names the migration files create (tables, indexes, triggers, views): `outbox` and
/// `outbox_*`, the only words [`for_table`] renames.
static CREATED: LazyLock<BTreeSet<&'static str>> = LazyLock::new(|| {
    let mut names = BTreeSet::new();
    for text in migrations::texts() {
        let words: Vec<&str> = pieces(text)
            .filter_map(|(word, piece)| word.then_some(piece))
            .collect();
        let mut rest = words.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            rest = tail;
            if !first.eq_ignore_ascii_case("CREATE") {
                continue;
            }
            // CREATE [UNIQUE] TABLE|INDEX|TRIGGER|VIEW [IF NOT EXISTS] name
            let mut after = tail;
            if after
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("UNIQUE"))
            {
                after = &after[1..];
            }
            after = after.get(1..).unwrap_or_default();
            if after.first().is_some_and(|w| w.eq_ignore_ascii_case("IF")) {
                after = after.get(3..).unwrap_or_default();
            }
            if let Some(name) = after.first() {
                names.insert(*name);
            }
        }
    }
    names
});

/// The pieces of `sql` in order, each with whether it is a word (a run of ASCII letters,
/// digits and `_`) of the SQL itself: string literals, quoted identifiers and `--`
/// comments are pieces of their own that are not words, whatever they hold.
fn pieces(sql: &str) -> impl Iterator<Item = (bool, &str)> {
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = sql.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at;
        let first = *bytes.get(start)?;
        let end = |from: usize, stop: &dyn Fn(u8) -> bool| {
            bytes[from..]
                .iter()
                .position(|b| stop(*b))
                .map_or(bytes.len(), |n| from + n)
        };
        let word = is_word(first);
        at = match first {
            b'\'' | b'"' => (end(start + 1, &|b| b == first) + 1).min(bytes.len()),
            b'-' if bytes.get(start + 1) == Some(&b'-') => end(start, &|b| b == b'\n'),
            _ if word => end(start, &|b| !is_word(b)),
            // Up to the next byte that can start a piece: never inside a UTF-8 character.
            _ => end(start + 1, &|b| {
                is_word(b) || matches!(b, b'\'' | b'"' | b'-')
            }),
        };
        Some((word, &sql[start..at]))
    })
}

/// `sql`, written for the default table `outbox`, for the table `table` (the table prefix,
/// then `outbox`): each word that names an object the migration files create (`outbox`,
/// `outbox_counts`, `outbox_key_live`, …) has its leading `outbox` replaced by `table`.
/// Nothing else changes: not a column such as `outbox_id`, not a string literal, not a
/// comment, not a quoted identifier (so the files name their objects unquoted). The one
/// substitution for the SQL the store reads from files.
pub(super) fn for_table(sql: &str, table: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16 * (table.len() + 1));
    for (word, piece) in pieces(sql) {
        match piece.strip_prefix("outbox") {
            Some(rest) if word && CREATED.contains(piece) => {
                out.push_str(table);
                out.push_str(rest);
            }
            _ => out.push_str(piece),
        }
    }
    out
}

/// The statements whose plan depends on the ordering policy: one text per policy, never a
/// bind parameter, so each gets the plan made for it. Binds: now, lane, target, limit.
#[derive(Debug)]
pub(super) struct PolicyStatements {
    /// Lapsed claims on their last attempt that head their key, earliest lapse first.
    pub(super) claim_doomed: Arc<str>,
    /// Lapsed claims with attempts left that head their key, earliest lapse first.
    pub(super) claim_lapsed: Arc<str>,
    /// Due pending key heads, in (available_at, seq) order.
    pub(super) claim_ready: Arc<str>,
    /// Due pending key heads as `claim_ready` picks them, each followed by its key run
    /// (see `sql/claim_runs_*.sql`) in seq order; the limit counts every row. One more bind: ?5 the
    /// run's length, at least 2 (a run of 1 is `claim_ready`).
    pub(super) claim_runs: Arc<str>,
    /// The earliest of: the next lapse, a lapsed head, the first pending head.
    pub(super) next_due: Arc<str>,
}

/// The fixed statements, with the table name filled in once at open.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) migrations_table: String,
    /// `{table}_counts`: rows per (lane, target, status), kept by triggers.
    pub(super) counts_table: String,
    /// Messages by dedupe slot. Binds: lane, target, dedupe_key.
    pub(super) find_dedupe: Arc<str>,
    pub(super) insert: Arc<str>,
    pub(super) skip: PolicyStatements,
    pub(super) block: PolicyStatements,
    pub(super) dead_letter_lapsed: Arc<str>,
    pub(super) mark_claimed: Arc<str>,
    /// Dead-letters claimed rows that cannot be read (`store/unreadable.rs`), fenced on
    /// their claim tokens.
    pub(super) dead_letter_unreadable: Arc<str>,
    /// `ack` for the rows an ack takes first: rows without a key, and keyed rows without
    /// the head mark (queued behind their key's head). See `write/fenced.rs`, `ack`.
    pub(super) ack_first: Arc<str>,
    pub(super) ack: Arc<str>,
    /// The ack that deletes (`keep_delivered = false`), as `ack_first` and `ack` split it.
    pub(super) ack_delete_first: Arc<str>,
    pub(super) ack_delete: Arc<str>,
    pub(super) nack: Arc<str>,
    pub(super) extend: Arc<str>,
    pub(super) release: Arc<str>,
    /// When the oldest due pending row of a lane was enqueued. Binds: now, lane, target.
    pub(super) oldest_due: Arc<str>,
    pub(super) get: Arc<str>,
    /// A page of the keys a dead head holds. Binds: lane, target, after, limit.
    pub(super) blocked_keys: Arc<str>,
    pub(super) purge_batch: Arc<str>,
    pub(super) purge_count: Arc<str>,
    /// Lane control (`lane_control.rs`): pause, resume, every pause.
    pub(super) pause_lane: Arc<str>,
    pub(super) resume_lane: Arc<str>,
    pub(super) lane_pauses: Arc<str>,
    /// Served lanes (`served.rs`): record one, read the unserved.
    pub(super) record_served: Arc<str>,
    pub(super) unserved: Arc<str>,
    /// Every pair holding pending messages, for the lanes lane patterns match.
    pub(super) pending_lanes: Arc<str>,
}

impl Statements {
    pub(super) fn new(prefix: &str) -> Self {
        let table = format!("{prefix}outbox");
        let t = |sql: &str| -> Arc<str> { for_table(sql, &table).into() };
        /// The text of `sql/{name}.sql`, written for the default table `outbox`.
        macro_rules! file {
            ($name:literal) => {
                t(include_str!(concat!("sql/", $name, ".sql")))
            };
        }
        Self {
            migrations_table: format!("{table}_migrations"),
            counts_table: format!("{table}_counts"),
            find_dedupe: file!("find_dedupe"),
            insert: file!("insert"),
            skip: PolicyStatements {
                claim_doomed: file!("claim_doomed_skip"),
                claim_lapsed: file!("claim_lapsed_skip"),
                claim_ready: file!("claim_ready_skip"),
                claim_runs: file!("claim_runs_skip"),
                next_due: file!("next_due_skip"),
            },
            block: PolicyStatements {
                claim_doomed: file!("claim_doomed_block"),
                claim_lapsed: file!("claim_lapsed_block"),
                claim_ready: file!("claim_ready_block"),
                claim_runs: file!("claim_runs_block"),
                next_due: file!("next_due_block"),
            },
            dead_letter_lapsed: file!("dead_letter_lapsed"),
            mark_claimed: file!("mark_claimed"),
            dead_letter_unreadable: file!("dead_letter_unreadable"),
            ack_first: file!("ack_first"),
            ack: file!("ack"),
            ack_delete_first: file!("ack_delete_first"),
            ack_delete: file!("ack_delete"),
            nack: file!("nack"),
            extend: file!("extend"),
            release: file!("release"),
            oldest_due: file!("oldest_due"),
            get: file!("get"),
            blocked_keys: file!("blocked_keys"),
            purge_batch: file!("purge_batch"),
            purge_count: file!("purge_count"),
            pause_lane: file!("pause_lane"),
            resume_lane: file!("resume_lane"),
            lane_pauses: file!("lane_pauses"),
            record_served: file!("record_served"),
            unserved: file!("unserved"),
            pending_lanes: file!("pending_lanes"),
            table,
        }
    }

    /// The statements for one ordering policy.
    pub(super) fn policy(&self, ordering: OrderingPolicy) -> &PolicyStatements {
        match ordering {
            OrderingPolicy::Skip => &self.skip,
            OrderingPolicy::Block => &self.block,
        }
    }
}

#[cfg(test)]
mod tests;
