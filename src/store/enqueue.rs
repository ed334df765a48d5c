//! What every enqueue does before a backend writes, done once here: validate the drafts,
//! resolve repeats of a dedupe key within the batch, capture the trace context. A backend
//! is then handed distinct drafts ([`DraftBatch`]) and only checks their keys against the
//! messages it already holds; the plan turns its answers back into one per draft asked.

use std::collections::HashMap;
use std::time::Duration;

use uuid::Uuid;

use crate::message::{DraftLimits, OutboxMessageDraft};
use crate::store::StoreOp;
use crate::store::{Enqueued, StoreError};

/// Drafts ready for a backend to write (see [`OutboxBackend::write_drafts`]): each one
/// valid under the backend's [`DraftLimits`], carrying the caller's trace context, and no
/// two with the same dedupe key in one (lane, target).
///
/// Only the crate makes one, in [`Outbox::enqueue_many`] and the transactions a caller
/// holds, so a backend's write is reached only through a path that also reports it to the
/// outbox's hooks.
///
/// [`OutboxBackend::write_drafts`]: crate::store::OutboxBackend::write_drafts
/// [`Outbox::enqueue_many`]: crate::store::Outbox::enqueue_many
#[derive(Debug, Clone, PartialEq)]
pub struct DraftBatch {
    drafts: Vec<OutboxMessageDraft>,
    /// Per draft, the claim to write it with; empty when none is.
    pre_claims: Vec<Option<PreClaim>>,
}

/// A claim a draft is written with, so it goes in `claimed` rather than `pending`: the
/// hand-off of a draft to an idle lane of this process (`store::hand_off`). Only a backend
/// that says [`Capabilities::pre_claim`](crate::store::Capabilities::pre_claim) is given
/// one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreClaim {
    /// Written to `claimed_by`.
    pub consumer_id: String,
    /// The lease, from the write's own clock.
    pub lease: Duration,
    /// The fresh claim token. A draft that went in fresh answers it as its
    /// `claim_token`; a duplicate answers what it holds.
    pub claim_token: Uuid,
}

impl DraftBatch {
    /// The drafts, in the order they were asked for (repeats left out).
    pub fn drafts(&self) -> &[OutboxMessageDraft] {
        &self.drafts
    }

    /// The drafts, owned.
    pub fn into_drafts(self) -> Vec<OutboxMessageDraft> {
        self.drafts
    }

    /// The claim draft `index` is to be written with, if any (see [`PreClaim`]).
    pub fn pre_claim(&self, index: usize) -> Option<&PreClaim> {
        self.pre_claims.get(index).and_then(Option::as_ref)
    }

    /// Sets the claims, one per draft.
    pub(crate) fn set_pre_claims(&mut self, pre_claims: Vec<Option<PreClaim>>) {
        debug_assert_eq!(pre_claims.len(), self.drafts.len());
        self.pre_claims = pre_claims;
    }

    /// How many drafts there are to write.
    pub fn len(&self) -> usize {
        self.drafts.len()
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.drafts.is_empty()
    }
}

/// Where each draft of an enqueue went: to the [`DraftBatch`] (at some index), or onto an
/// earlier draft of the batch with the same dedupe key and content.
#[derive(Debug)]
pub(crate) struct EnqueuePlan {
    /// Per draft asked: its index in the batch, and whether it repeats an earlier draft.
    slots: Vec<(usize, bool)>,
}

/// Validates `drafts` against `limits` and resolves repeats of a dedupe key within the
/// batch: the same draft again is answered with the first one's message, the same key with
/// other content is a [`StoreError::Conflict`] (with a nil `existing`: nothing holds the
/// key yet). Nothing is written on an error.
///
/// The drafts are compared before the trace context is captured: capturing gives each
/// draft a span of its own, which would make two equal drafts differ.
pub(crate) fn plan(
    drafts: Vec<OutboxMessageDraft>,
    limits: &DraftLimits,
) -> Result<(DraftBatch, EnqueuePlan), StoreError> {
    for draft in &drafts {
        draft.validate(limits)?;
    }
    let mut batch: Vec<OutboxMessageDraft> = Vec::with_capacity(drafts.len());
    let mut slots = Vec::with_capacity(drafts.len());
    let mut seen: HashMap<(String, String, String), usize> = HashMap::new();
    for draft in drafts {
        if let Some(key) = &draft.dedupe_key {
            let slot = (draft.lane.clone(), draft.target.clone(), key.clone());
            if let Some(&first) = seen.get(&slot) {
                if batch[first] != draft {
                    return Err(StoreError::Conflict {
                        lane: draft.lane,
                        target: draft.target,
                        dedupe_key: key.clone(),
                        existing: Uuid::nil(),
                    });
                }
                slots.push((first, true));
                continue;
            }
            seen.insert(slot, batch.len());
        }
        slots.push((batch.len(), false));
        batch.push(draft);
    }
    crate::trace_context::capture(&mut batch);
    Ok((
        DraftBatch {
            drafts: batch,
            pre_claims: Vec::new(),
        },
        EnqueuePlan { slots },
    ))
}

impl EnqueuePlan {
    /// One answer per draft asked, from the backend's one answer per draft of the batch: a
    /// repeat gets its first draft's message, as a duplicate.
    pub(crate) fn answers(&self, written: Vec<Enqueued>) -> Result<Vec<Enqueued>, StoreError> {
        let expected = self.slots.iter().filter(|(_, repeat)| !repeat).count();
        if written.len() != expected {
            return Err(StoreError::database(
                StoreOp::Enqueue,
                format!("the store answered {} of {expected} drafts", written.len()),
            ));
        }
        Ok(self
            .slots
            .iter()
            .map(|&(index, repeat)| {
                let answer = &written[index];
                Enqueued {
                    message: answer.message.clone(),
                    duplicate: answer.duplicate || repeat,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::OutboxMessage;
    use crate::time::UnixMillis;

    fn draft(value: i64) -> OutboxMessageDraft {
        OutboxMessageDraft::new("orders", "billing", json!({ "value": value })).unwrap()
    }

    fn deduped(value: i64, key: &str) -> OutboxMessageDraft {
        draft(value).with_dedupe_key(key)
    }

    /// What a backend answers for `batch`: every draft written, as message `seq` 1, 2, ….
    fn written(batch: &DraftBatch) -> Vec<Enqueued> {
        batch
            .drafts()
            .iter()
            .zip(1..)
            .map(|(draft, seq)| Enqueued {
                message: OutboxMessage::pending(
                    draft.clone(),
                    Uuid::now_v7(),
                    seq,
                    UnixMillis::EPOCH,
                ),
                duplicate: false,
            })
            .collect()
    }

    #[test]
    fn a_repeated_draft_is_written_once_and_answered_as_a_duplicate() {
        let drafts = vec![
            draft(1),
            deduped(2, "a"),
            deduped(2, "a"),
            deduped(3, "b"),
            draft(1),
        ];
        let (batch, plan) = plan(drafts, &DraftLimits::default()).unwrap();
        // A draft without a dedupe key is never a repeat, however alike.
        assert_eq!(
            batch.drafts(),
            [draft(1), deduped(2, "a"), deduped(3, "b"), draft(1)]
        );
        let written = written(&batch);
        let answers = plan.answers(written.clone()).unwrap();
        let duplicate: Vec<bool> = answers.iter().map(|a| a.duplicate).collect();
        assert_eq!(duplicate, [false, false, true, false, false]);
        let seqs: Vec<i64> = answers.iter().map(|a| a.message.seq).collect();
        assert_eq!(seqs, [1, 2, 2, 3, 4]);
    }

    #[test]
    fn a_stored_duplicate_stays_a_duplicate_for_its_repeats() {
        let (batch, plan) = plan(
            vec![deduped(1, "a"), deduped(1, "a")],
            &DraftLimits::default(),
        )
        .unwrap();
        let mut written = written(&batch);
        written[0].duplicate = true;
        let answers = plan.answers(written).unwrap();
        assert!(answers.iter().all(|a| a.duplicate && a.message.seq == 1));
    }

    #[test]
    fn the_same_key_with_other_content_in_one_batch_is_a_conflict() {
        let result = plan(
            vec![deduped(1, "a"), draft(2), deduped(3, "a")],
            &DraftLimits::default(),
        );
        match result {
            Err(StoreError::Conflict {
                lane,
                target,
                dedupe_key,
                existing,
            }) => {
                assert_eq!((lane.as_str(), target.as_str()), ("orders", "billing"));
                assert_eq!(dedupe_key, "a");
                assert!(existing.is_nil());
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn the_same_key_in_another_lane_or_target_is_no_repeat() {
        let mut other_lane = deduped(1, "a");
        other_lane.lane = "billing".into();
        let mut other_target = deduped(1, "a");
        other_target.target = "ledger".into();
        let drafts = vec![deduped(1, "a"), other_lane, other_target];
        let (batch, _) = plan(drafts.clone(), &DraftLimits::default()).unwrap();
        assert_eq!(batch.drafts(), drafts);
    }

    #[test]
    fn an_invalid_draft_refuses_the_batch_before_dedupe() {
        let mut invalid = deduped(2, "a");
        invalid.max_attempts = 0;
        let result = plan(vec![deduped(1, "a"), invalid], &DraftLimits::default());
        match result {
            Err(StoreError::Validation(error)) => assert_eq!(error.field, "max_attempts"),
            other => panic!("expected a validation error, got {other:?}"),
        }
        let tiny = DraftLimits {
            max_payload_bytes: 4,
        };
        assert!(matches!(
            plan(vec![draft(1)], &tiny),
            Err(StoreError::Validation(_))
        ));
    }

    #[test]
    fn an_empty_enqueue_plans_nothing() {
        let (batch, plan) = plan(Vec::new(), &DraftLimits::default()).unwrap();
        assert!(batch.is_empty());
        assert!(plan.answers(Vec::new()).unwrap().is_empty());
    }

    #[test]
    fn a_backend_answering_the_wrong_number_of_drafts_is_an_error() {
        let (batch, plan) = plan(vec![draft(1), draft(2)], &DraftLimits::default()).unwrap();
        let mut written = written(&batch);
        written.pop();
        assert!(matches!(
            plan.answers(written),
            Err(StoreError::Database { .. })
        ));
    }
}
