use super::*;

#[test]
fn the_one_statement_claim_sets_asynchronous_commit_only_when_asked() {
    for policy in [OrderingPolicy::Skip, OrderingPolicy::Block] {
        let on = claim_fast("t", "m.outbox_id", policy, true);
        let off = claim_fast("t", "m.outbox_id", policy, false);
        assert!(on.contains("set_config('synchronous_commit', 'off', true)"));
        assert!(!off.contains("synchronous_commit"), "{off}");
        // It never dead-letters: that needs `promote_heads` in a transaction.
        assert!(!on.contains("SET status = 'dead_letter'"), "{on}");
    }
}

#[test]
fn the_key_run_is_a_bind_parameter_and_the_answer_keeps_each_run_behind_its_head() {
    for policy in [OrderingPolicy::Skip, OrderingPolicy::Block] {
        let fast = claim_fast("t", "m.outbox_id", policy, false);
        let full = claim("t", "m.outbox_id", policy);
        for sql in [&fast, &full] {
            assert!(sql.ends_with("ORDER BY o.ord"), "{sql}");
        }
        // The full claim reads a run after its head; the fast one reads the head's key
        // from its first pending row, head included, and locks the rest.
        assert!(full.contains("LIMIT $7::int8 - 1"), "{full}");
        assert!(fast.contains("LIMIT $7::int8) AS seqs"), "{fast}");
        assert!(fast.contains("e.seq = ANY (h.seqs[2:])"), "{fast}");
        assert!(full.contains("last_error = $8"), "{full}");
        // Only Block cuts a run at a dead letter.
        let cut = full.contains("x.status = 'dead_letter' AND x.seq > h.seq");
        assert_eq!(cut, policy == OrderingPolicy::Block, "{full}");
    }
}
