//! The store conformance suite, for any [`OutboxBackend`](crate::store::OutboxBackend)
//! through an [`Outbox`] (feature `testing`): the same cases
//! the crate runs against its memory, SQLite and PostgreSQL stores, open to a backend
//! written outside the crate (River's `riverdrivertest` is the model).
//!
//! A backend supplies an async fn that builds a fresh, empty, isolated [`Harness`]; the
//! [`conformance!`](crate::conformance) macro turns every case into a `#[tokio::test]`:
//!
//! ```
//! // tests/conformance.rs of a crate with its own backend (here: the in-memory store)
//! use std::sync::Arc;
//! use outbox_relay::time::ManualClock;
//! use outbox_relay::testing::Harness;
//! use outbox_relay::time::UnixMillis;
//! use outbox_relay::{InMemoryOutboxStore, Outbox};
//!
//! async fn harness() -> Harness {
//!     let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
//!     let store = Outbox::new(InMemoryOutboxStore::with_clock(Arc::new(clock.clone())));
//!     let same = store.clone();
//!     Harness {
//!         store,
//!         clock,
//!         // A second handle over the same data; a durable backend opens a new one.
//!         reopen: Arc::new(move || {
//!             let same = same.clone();
//!             Box::pin(async move { same })
//!         }),
//!         cleanup: None,
//!     }
//! }
//!
//! outbox_relay::conformance!(harness);
//! # fn main() {}
//! ```
//!
//! Cases never sleep: time moves only through [`Harness::clock`], so the backend must read
//! "now" from the [`Clock`](crate::time::Clock) it is given. They never depend on a
//! backend detail (row order of an answer that promises none, the text of a database
//! error). A case panics (an `assert!`) when the backend breaks the contract.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::time::ManualClock;
use crate::Outbox;

// The cases are public for the macro to reach, and documented by their names and the
// contract in `store`; they are not an API of their own.
#[doc(hidden)]
pub mod cases;
pub mod simulation;

/// Opens another store handle over the same data.
pub type Opener = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Outbox> + Send>> + Send + Sync>;

/// What a case gets: a fresh store on a manual clock.
pub struct Harness {
    /// The store under test, empty.
    pub store: Outbox,
    /// The store's clock; it moves only when a case advances it.
    pub clock: ManualClock,
    /// Opens a second store handle over the same data (same file, same schema) and the same
    /// clock. A backend whose data lives in the handle returns the same store.
    pub reopen: Opener,
    /// Removes what the case left behind (a PostgreSQL schema), once it passed. A failed
    /// case keeps its data for a look.
    pub cleanup: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Generates one `#[tokio::test]` per conformance case for a backend, in the module where
/// it is called. `$make` is an async fn returning a fresh [`testing::Harness`](crate::testing::Harness).
/// The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
/// Add every new case to the list below.
#[macro_export]
macro_rules! conformance {
    ($make:path) => {
        $crate::conformance!(@cases $make;
            // cases/lifecycle.rs
            enqueue_then_claim_and_ack,
            nack_requeues_then_dead_letters_at_max_attempts,
            permanent_nack_dead_letters_with_attempts_left,
            crashed_claimers_lease_lapses_and_another_claims,
            late_ack_after_reclaim_is_lost_and_changes_nothing,
            ack_after_lapse_but_before_reclaim_still_applies,
            lanes_and_targets_are_isolated,
            retry_delay_is_respected,
            draft_delay_is_respected,
            lease_lapsing_max_attempts_times_dead_letters,
            release_returns_claim_without_spending_an_attempt,
            release_after_a_retry_keeps_last_error_and_earlier_attempts,
            wrong_token_or_unclaimed_row_is_a_lost_claim,
            extend_lease_moves_the_lapse,
            ack_batch_answers_each_claim_in_order,
            a_claim_of_many_requests_answers_each_with_its_own_lanes_messages,
            // cases/ordering.rs
            claim_order_is_due_time_then_enqueue_sequence,
            claim_takes_at_most_limit_oldest_first,
            seq_is_strict_within_one_millisecond,
            one_message_per_key_in_flight_in_enqueue_order,
            skip_policy_moves_past_a_dead_head,
            skip_policy_moves_past_a_head_dead_lettered_by_lapse,
            block_policy_holds_key_until_requeue_or_discard,
            block_policy_holds_key_behind_a_head_dead_lettered_by_lapse,
            concurrent_claimers_keep_per_key_order,
            concurrent_claimers_claim_each_message_once,
            next_due_ignores_messages_held_behind_their_key,
            requeued_dead_head_waits_for_its_keys_message_in_flight,
            next_due_under_block_skips_keys_behind_a_dead_head,
            // cases/enqueue.rs
            dedupe_returns_the_first_message,
            dedupe_key_with_other_content_is_a_conflict,
            dedupe_keys_are_per_lane_and_target,
            concurrent_enqueues_of_one_dedupe_key_write_one_row,
            enqueue_many_answers_in_order_with_duplicates,
            enqueue_many_is_atomic,
            invalid_drafts_are_refused_and_nothing_is_written,
            a_nul_in_the_payload_is_refused_by_every_store,
            // cases/admin.rs
            list_pages_in_enqueue_order_with_filters,
            list_filters_by_enqueue_time_and_error_text,
            a_rare_match_is_found_across_short_pages,
            stats_count_every_status_per_lane,
            lanes_stats_answer_for_many_lanes_at_once,
            requeue_dead_letters_by_ids_and_by_lane,
            discard_deletes_only_dead_letters,
            purge_deletes_old_finished_rows_in_batches,
            purge_ages_each_status_apart_and_narrows_to_a_lane,
            // cases/retention.rs
            retention_keeps_a_dead_head_that_blocks_its_key,
            retention_deletes_an_old_dead_head_on_a_skip_lane,
            a_purge_of_many_lanes_deletes_and_counts_each_named_lane,
            next_due_tracks_the_next_claimable_moment,
            enqueue_and_requeue_wake_subscribers,
            // cases/backlog.rs
            lapsed_claims_come_before_older_pending_rows,
            a_hot_key_among_cold_keys_yields_one_head_per_key,
            a_lapsed_head_is_reclaimed_before_its_pending_successors,
            // cases/idle.rs
            a_short_claim_answers_next_due_as_of_its_end,
            a_short_claims_next_due_skips_rows_held_behind_their_key,
            lanes_next_due_answers_each_lane_as_next_due_does,
            // cases/runs.rs
            key_run_follows_its_head_in_order,
            key_run_counts_towards_the_limit,
            key_run_stops_at_a_message_not_yet_due,
            key_run_under_block_stops_at_a_dead_letter,
            a_lapsed_run_comes_back_one_message_at_a_time,
            a_failed_run_head_releases_the_rest,
            a_run_acked_tail_first_holds_its_key_until_its_head_is_acked,
            concurrent_claimers_with_key_runs_keep_per_key_order,
            // cases/keys.rs
            key_state_and_blocked_keys_name_the_dead_head_and_what_it_holds,
            blocked_keys_page_by_their_earliest_dead_letter,
            // cases/payload.rs
            payload_bytes_are_kept_through_enqueue_claim_and_list,
            a_raw_payload_retried_with_its_dedupe_key_is_a_duplicate,
            an_escaped_nul_in_raw_json_is_refused_by_every_store,
            // cases/delete_on_ack.rs
            an_ack_that_deletes_removes_only_rows_still_held_under_their_token,
            an_ack_that_deletes_frees_the_keys_next_message_and_keeps_dead_letters,
            ack_and_claim_that_deletes_deletes_then_claims_what_the_deletes_freed,
            a_dedupe_key_is_forgotten_once_an_ack_deleted_its_row,
            // cases/served.rs
            unserved_lanes_are_those_with_pending_messages_no_record_covers,
            pending_lanes_are_the_pending_pairs_a_prefix_matches,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let mut harness = $make().await;
                let cleanup = harness.cleanup.take();
                $crate::testing::cases::$case(harness).await;
                if let Some(cleanup) = cleanup {
                    cleanup.await;
                }
            }
        )*
    };
}
