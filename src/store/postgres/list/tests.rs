use super::*;

#[test]
fn a_lane_is_read_by_status_and_only_set_fields_become_terms() {
    let page = PageRequest {
        after: Some(7),
        limit: 10,
    };
    let sql = list_sql("t", &MessageFilter::lane("orders", "billing"), page);
    assert_eq!(sql.text.matches(" UNION ALL ").count(), 3, "{}", sql.text);
    assert!(
        sql.text
            .contains("m.status >= 'dead_letter' AND m.status <= 'dead_letter'"),
        "{}",
        sql.text
    );
    assert!(!sql.text.contains("IS NULL"), "{}", sql.text);
    assert_eq!(
        sql.values,
        [
            Value::Int(7),
            Value::Text("orders".into()),
            Value::Text("billing".into()),
            Value::Int(11),
            Value::Int(11),
        ]
    );

    let scanning = MessageFilter::lane("orders", "billing")
        .with_status(OutboxStatus::DeadLetter)
        .with_error_containing("timeout");
    let sql = list_sql(
        "t",
        &scanning,
        PageRequest {
            after: None,
            limit: 10,
        },
    );
    assert!(!sql.text.contains(" UNION ALL "), "{}", sql.text);
    assert!(
        sql.text.contains("strpos(m.last_error, $1) > 0"),
        "{}",
        sql.text
    );
    // Ten pages' worth of rows read at most, eleven matches answered at most.
    assert_eq!(sql.values.last(), Some(&Value::Int(11)));
    assert_eq!(sql.values[sql.values.len() - 2], Value::Int(110));
}
