use super::*;

#[test]
fn the_body_holds_one_claim_and_one_next_due_per_policy_and_never_dead_letters() {
    let t = "\"public\".\"outbox_messages\"";
    let ack = include_str!("../ack.sql");
    let ack_delete = include_str!("../ack_delete.sql");
    let body = body(t, "PERFORM 1;", "m.outbox_id", ack, ack_delete);
    assert_eq!(body.matches("RETURN QUERY WITH").count(), 2, "{body}");
    assert!(!body.contains("'dead_letter', last_error"), "{body}");
    // The claim's text as the store runs it: its parameters keep their numbers.
    assert!(body.contains("claimed_by = $6"), "{body}");
    assert_eq!(
        body.matches("unnest($7::uuid[], $8::uuid[])").count(),
        2,
        "{body}"
    );
    // The key run is the function's last parameter.
    assert_eq!(
        body.matches("LIMIT $11::int8) AS seqs").count(),
        2,
        "{body}"
    );
    assert!(PARAMS.ends_with("p_run int8, p_delete boolean"), "{PARAMS}");
    assert!(call("f").ends_with("$11, $12)"));
    // The deleting ack keeps the same fencing.
    assert!(
        body.contains(&format!("DELETE FROM {t} m"))
            && body.contains("m.claim_token = i.claim_token"),
        "{body}"
    );
}
