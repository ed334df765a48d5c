use super::super::schema::Names;
use super::template::{fill, part, TemplateError};
use super::{Statements, PARAMS};

#[test]
fn the_cycle_function_promotes_heads_inline_locking_each_key_in_sorted_order() {
    let names = Names::new("s", "outbox").unwrap();
    let create = Statements::new(&names, true).unwrap().cycle_create;
    // No nested call of promote_heads: its locks and UPDATE are statements of the body.
    assert!(
        !create.contains("\"s\".\"outbox_promote_heads\""),
        "{create}"
    );
    let lock = create
        .find("PERFORM pg_advisory_xact_lock(")
        .expect("the key locks");
    let sorted = create[lock..].find("ORDER BY 1) s;").expect("in key order");
    let update = create[lock..]
        .find("SET key_head = true")
        .expect("the marking UPDATE");
    // The UPDATE is a statement of its own after the locks, so its snapshot sees what
    // the lock waited for (schema/heads.rs).
    assert!(sorted < update, "{create}");
    assert!(
        create.contains("unnest(v_lanes, v_targets, v_keys)"),
        "{create}"
    );
}

/// The statements of the default names, committing asynchronously or not.
fn statements(async_commit: bool) -> Statements {
    Statements::new(&Names::new("public", "outbox").unwrap(), async_commit).unwrap()
}

/// The body of the cycle function, as `sql/cycle.sql` holds it.
fn cycle_body(create: &str) -> &str {
    let start = create.find("$fn$").expect("a body") + 4;
    &create[start..create.rfind("$fn$").expect("a body")]
}

#[test]
fn the_one_statement_claim_sets_asynchronous_commit_only_when_asked() {
    let (on, off) = (statements(true), statements(false));
    for (on, off) in [
        (&on.claim_fast_skip, &off.claim_fast_skip),
        (&on.claim_fast_block, &off.claim_fast_block),
    ] {
        assert!(on.contains("set_config('synchronous_commit', 'off', true)"));
        assert!(!off.contains("synchronous_commit"), "{off}");
        // It never dead-letters: that needs `promote_heads` in a transaction.
        assert!(!on.contains("SET status = 'dead_letter'"), "{on}");
    }
}

#[test]
fn the_key_run_is_a_bind_parameter_and_the_answer_keeps_each_run_behind_its_head() {
    let s = statements(false);
    for (block, fast, full) in [
        (false, &s.claim_fast_skip, &s.claim_skip),
        (true, &s.claim_fast_block, &s.claim_block),
    ] {
        for sql in [fast, full] {
            assert!(sql.trim_end().ends_with("ORDER BY o.ord"), "{sql}");
        }
        // The full claim reads a run after its head; the fast one reads the head's key
        // from its first pending row, head included, and locks the rest.
        assert!(full.contains("LIMIT $7::int8 - 1"), "{full}");
        assert!(fast.contains("LIMIT $7::int8) AS seqs"), "{fast}");
        assert!(fast.contains("e.seq = ANY (h.seqs[2:])"), "{fast}");
        assert!(full.contains("last_error = $8"), "{full}");
        // Only Block cuts a run at a dead letter.
        let cut = full.contains("x.status = 'dead_letter' AND x.seq > h.seq");
        assert_eq!(cut, block, "{full}");
    }
}

#[test]
fn each_probe_names_one_status_so_that_one_partial_index_serves_it() {
    // "An earlier live row of the key exists", as the statements spell it.
    let exists = include_str!("sweep_clear.sql");
    assert_eq!(
        exists.matches("e.status = 'pending'").count(),
        1,
        "{exists}"
    );
    assert_eq!(
        exists.matches("e.status = 'claimed'").count(),
        1,
        "{exists}"
    );
    assert!(!exists.contains(" IN ("), "{exists}");
    assert!(
        exists.contains("e.ordering_key = m.ordering_key"),
        "{exists}"
    );
    // The lowest live row of a key: the first of each key index, then the lower.
    let s = statements(false);
    let lowest = &s.claim_skip;
    assert_eq!(
        lowest.matches("ORDER BY n.seq LIMIT 1").count(),
        2,
        "{lowest}"
    );
    assert!(lowest.contains("ORDER BY x.seq LIMIT 1"), "{lowest}");
    // A key run stops before the key's first claimed row after its head.
    for full in [&s.claim_skip, &s.claim_block] {
        assert!(
            full.contains("c.status = 'claimed' AND c.seq > h.seq"),
            "{full}"
        );
    }
}

#[test]
fn the_body_holds_one_claim_and_one_next_due_per_policy_and_never_dead_letters() {
    let t = "\"public\".\"outbox_messages\"";
    let s = statements(false);
    let body = cycle_body(&s.cycle_create);
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
    assert!(s.cycle.ends_with("$11, $12)"));
    // The deleting ack keeps the same fencing.
    assert!(
        body.contains(&format!("DELETE FROM {t} m"))
            && body.contains("m.claim_token = i.claim_token"),
        "{body}"
    );
}

#[test]
fn each_placeholder_takes_its_part_as_it_is() {
    let text = "SELECT {{a}} FROM t WHERE {{b}}{{a}}";
    let filled = fill(text, &[("b", "x = {{a}}"), ("a", "1")]);
    assert_eq!(filled.as_deref(), Ok("SELECT 1 FROM t WHERE x = {{a}}1"));
    assert_eq!(fill("SELECT 1", &[]).as_deref(), Ok("SELECT 1"));
    assert_eq!(fill("a{{x}}b", &[("x", "")]).as_deref(), Ok("ab"));
}

#[test]
fn a_placeholder_without_a_part_or_a_part_without_one_is_an_error() {
    assert_eq!(
        fill("SELECT {{a}}, {{c}}", &[("a", "1")]),
        Err(TemplateError::Unknown("c".into()))
    );
    assert_eq!(
        fill("SELECT {{a}}", &[("a", "1"), ("b", "2")]),
        Err(TemplateError::Unused("b".into()))
    );
    assert_eq!(
        fill("SELECT {{a\nFROM t", &[("a", "1")]),
        Err(TemplateError::Unclosed("{{a".into()))
    );
    let unknown = TemplateError::Unknown("gate".into()).to_string();
    assert_eq!(unknown, "the SQL placeholder {{gate}} has no part");
}

#[test]
fn a_part_drops_its_opening_comments_and_its_last_line_end() {
    assert_eq!(
        part("-- what it is\n-- and more\n AND x\n  AND y\n"),
        " AND x\n  AND y"
    );
    assert_eq!(part("x -- not a header\n"), "x -- not a header");
    assert_eq!(part("-- only a comment\n"), "");
}

#[test]
fn every_statement_fills_every_placeholder_of_its_files() {
    // The store's statements are made from the files as they are: a placeholder a
    // file gained or lost without `sql.rs` fails here, naming it, and at load.
    let names = Names::new("public", "outbox").expect("valid names");
    for async_commit in [false, true] {
        let statements = Statements::new(&names, async_commit).expect("the statements assemble");
        let all = format!("{statements:?}");
        assert!(!all.contains("{{"), "{all}");
    }
}
