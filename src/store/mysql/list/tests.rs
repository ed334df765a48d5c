use std::time::{Duration, SystemTime};

use super::*;

#[test]
fn the_scanned_terms_are_checked_on_a_bounded_read_in_sequence_order() {
    let after = SystemTime::UNIX_EPOCH + Duration::from_millis(5_000);
    let filter = MessageFilter::lane("orders", "billing")
        .enqueued_between(Some(after), None)
        .with_error_containing("timeout");
    let page = PageRequest {
        after: Some(7),
        limit: 10,
    };
    let sql = scanning_sql("`outbox_messages`", &filter, page);
    // Ten pages' worth of rows read at most, eleven answered at most.
    assert!(
        sql.clause.contains("ORDER BY seq LIMIT 110) scanned"),
        "{}",
        sql.clause
    );
    assert!(sql.clause.ends_with("LIMIT 11"), "{}", sql.clause);
    assert!(
        sql.clause
            .contains("(1 = 1 AND created_at >= ? AND INSTR(last_error, ?) > 0) IS TRUE"),
        "{}",
        sql.clause
    );
    assert!(!sql
        .clause
        .contains("lane = ? AND target = ? AND created_at"));
    // The scanned terms' values, then the indexed ones, then the cursor.
    assert_eq!(
        sql.values,
        vec![
            Value::Int(5_000),
            Value::Text("timeout".into()),
            Value::Text("orders".into()),
            Value::Text("billing".into()),
            Value::Int(7),
        ]
    );
}
