use super::super::schema::Names;
use super::Statements;

#[test]
fn the_cycle_function_promotes_heads_inline_locking_each_key_in_sorted_order() {
    let names = Names::new("s", "outbox").unwrap();
    let create = Statements::new(&names, true).cycle_create;
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
