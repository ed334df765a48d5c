//! Claimed rows that cannot be read back into a message, and what a claim does with them.
//!
//! A SQL store's row can hold what no [`OutboxMessage`] can: `headers` that are not a JSON
//! object of strings, a count past `u32`, and in SQLite, whose columns take any type, a
//! payload that is not JSON or an id that is not a UUID. Such a row comes from a producer that
//! writes the table by hand, in another language, or from a bug. A claim reads each row on
//! its own: the rows it can read are handed out, and each one it cannot is dead-lettered
//! alone, fenced on the claim token the claim just gave it, with a `last_error` that names
//! the column and what is wrong with it. Failing the whole claim instead would let one row
//! hold every row claimed beside it until their leases lapse, and then dead-letter them
//! without a delivery attempt; rolling the claim back would claim the same row forever.
//!
//! Under [`OrderingPolicy::Block`] a dead letter holds its key, so the messages of its key
//! claimed behind it in the same claim (a key run) are released, not handed out.

// Only the SQL stores hold rows that can fail to decode; the memory store keeps typed
// messages. Without a SQL store feature, all but the error text goes unused.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]

use uuid::Uuid;

use crate::message::{ClaimRef, OutboxMessage};
use crate::store::{OrderingPolicy, UnreadableRow};

/// The start of the `last_error` of a row dead-lettered because it cannot be read; the
/// column and the reason follow. Part of the contract: every SQL store uses these words.
pub const UNREADABLE_ROW_ERROR: &str = "the relay cannot read this row";

/// The `last_error` for a row whose `column` cannot be read, for `reason`.
pub(crate) fn unreadable_error(column: &str, reason: impl std::fmt::Display) -> String {
    format!("{UNREADABLE_ROW_ERROR}: {column}: {reason}")
}

/// A claimed row that did not decode, with what the store needs to dead-letter it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable {
    /// Its enqueue sequence (always readable: the stores' own integer key).
    pub(crate) seq: i64,
    /// Its id, when that much could be read.
    pub(crate) outbox_id: Option<Uuid>,
    /// The token the claim gave it: the dead-lettering is fenced on it.
    pub(crate) claim_token: Uuid,
    /// Its ordering key, when it has one and it could be read.
    pub(crate) ordering_key: Option<String>,
    /// What to write as its `last_error` ([`unreadable_error`]).
    pub(crate) error: String,
}

impl Unreadable {
    /// What the claim's answer says about it once it is dead-lettered.
    pub(crate) fn answer(&self) -> UnreadableRow {
        UnreadableRow {
            outbox_id: self.outbox_id,
            seq: self.seq,
            error: self.error.clone(),
        }
    }
}

/// One row a claim returned, read or not.
#[derive(Debug)]
pub(crate) enum ClaimedRow {
    /// A message to hand out.
    Read(OutboxMessage),
    /// A row to dead-letter.
    Unreadable(Unreadable),
}

/// A claim's rows, sorted into what to hand out, dead-letter and release.
#[derive(Debug, Default)]
pub(crate) struct SortedClaim {
    /// The messages to hand out, in claim order.
    pub(crate) messages: Vec<OutboxMessage>,
    /// The rows to dead-letter, in claim order.
    pub(crate) unreadable: Vec<Unreadable>,
    /// Messages claimed behind an unreadable row of their key under
    /// [`OrderingPolicy::Block`]: released (the attempt not counted), because the dead
    /// letter now holds their key.
    pub(crate) held_back: Vec<ClaimRef>,
}

/// Sorts the rows of one claim, given in claim order, under the claim's ordering policy.
pub(crate) fn sort(rows: Vec<ClaimedRow>, ordering: OrderingPolicy) -> SortedClaim {
    let mut sorted = SortedClaim::default();
    for row in rows {
        match row {
            ClaimedRow::Unreadable(row) => sorted.unreadable.push(row),
            ClaimedRow::Read(message) => {
                let behind_dead = ordering == OrderingPolicy::Block
                    && message.ordering_key.as_ref().is_some_and(|key| {
                        sorted
                            .unreadable
                            .iter()
                            .any(|dead| dead.ordering_key.as_ref() == Some(key))
                    });
                match message.claim() {
                    Some(claim) if behind_dead => sorted.held_back.push(claim),
                    _ => sorted.messages.push(message),
                }
            }
        }
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{OutboxMessageDraft, OutboxStatus};

    fn message(seq: i64, key: Option<&str>) -> OutboxMessage {
        let mut draft = OutboxMessageDraft::new("l", "t", serde_json::json!({ "n": seq }))
            .unwrap_or_else(|e| panic!("{e}"));
        draft.ordering_key = key.map(str::to_owned);
        let mut message =
            OutboxMessage::pending(draft, Uuid::new_v4(), seq, crate::time::UnixMillis::EPOCH);
        message.status = OutboxStatus::Claimed;
        message.claim_token = Some(Uuid::new_v4());
        message
    }

    fn unreadable(seq: i64, key: Option<&str>) -> Unreadable {
        Unreadable {
            seq,
            outbox_id: Some(Uuid::new_v4()),
            claim_token: Uuid::new_v4(),
            ordering_key: key.map(str::to_owned),
            error: unreadable_error("headers", "not an object"),
        }
    }

    fn rows() -> Vec<ClaimedRow> {
        vec![
            ClaimedRow::Read(message(1, Some("a"))),
            ClaimedRow::Unreadable(unreadable(2, Some("a"))),
            ClaimedRow::Read(message(3, Some("a"))),
            ClaimedRow::Read(message(4, Some("b"))),
            ClaimedRow::Read(message(5, None)),
        ]
    }

    #[test]
    fn under_skip_every_readable_row_is_handed_out_in_claim_order() {
        let sorted = sort(rows(), OrderingPolicy::Skip);
        let seqs: Vec<i64> = sorted.messages.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, [1, 3, 4, 5]);
        assert_eq!(sorted.unreadable.len(), 1);
        assert_eq!(sorted.unreadable[0].seq, 2);
        assert!(sorted.held_back.is_empty());
    }

    #[test]
    fn under_block_the_messages_of_its_key_behind_an_unreadable_row_are_held_back() {
        let all = rows();
        let behind = match &all[2] {
            ClaimedRow::Read(m) => m.claim(),
            ClaimedRow::Unreadable(_) => None,
        };
        let sorted = sort(all, OrderingPolicy::Block);
        let seqs: Vec<i64> = sorted.messages.iter().map(|m| m.seq).collect();
        // Seq 1 came before the dead letter of key a: it is delivered first, as ever.
        assert_eq!(seqs, [1, 4, 5]);
        assert_eq!(sorted.held_back, behind.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn the_error_names_the_column_after_the_fixed_words() {
        assert_eq!(
            unreadable_error("max_attempts", "5000000000 is past u32"),
            "the relay cannot read this row: max_attempts: 5000000000 is past u32"
        );
    }
}
