use super::*;
use crate::message::OutboxStatus;

const ANONYMOUS: Dialect = Dialect {
    numbered: false,
    instant: |p| p.to_owned(),
    contains: "INSTR",
    ids: IdList::Marks,
    status_literal: true,
    indexed_text: |p| format!("({p} || '')"),
};

const NUMBERED: Dialect = Dialect {
    numbered: true,
    instant: |p| format!("instant({p})"),
    contains: "strpos",
    ids: IdList::Array,
    status_literal: false,
    indexed_text: |p| p.to_owned(),
};

#[test]
fn only_set_fields_become_terms() {
    let all = Where::of(&ANONYMOUS, &MessageFilter::all(), "", Terms::All, 0);
    assert_eq!(all.clause, "1 = 1");
    assert!(all.values.is_empty());

    let id = Uuid::nil();
    let some = Where::of(
        &ANONYMOUS,
        &MessageFilter::lane("orders", "billing")
            .with_status(OutboxStatus::DeadLetter)
            .with_ids([id, id]),
        "d.",
        Terms::All,
        0,
    );
    assert_eq!(
        some.clause,
        "1 = 1 AND d.lane = ? AND d.target = ? AND d.status = 'dead_letter' \
             AND d.outbox_id IN (?, ?)"
    );
    assert_eq!(
        some.values,
        [
            Value::Text("orders".into()),
            Value::Text("billing".into()),
            Value::Id(id),
            Value::Id(id),
        ]
    );
}

#[test]
fn indexed_and_scanned_terms_part_and_numbers_go_on_from_the_bound_values() {
    let after = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(5);
    let filter = MessageFilter::lane("orders", "billing")
        .with_status(OutboxStatus::Pending)
        .enqueued_between(Some(after), None)
        .with_error_containing("timeout");
    let indexed = Where::of(&ANONYMOUS, &filter, "", Terms::Indexed, 0);
    assert_eq!(
        indexed.clause,
        "1 = 1 AND lane = (? || '') AND target = (? || '') AND status = 'pending'"
    );
    let scanned = Where::of(&NUMBERED, &filter, "m.", Terms::Scanned, 2);
    assert_eq!(
        scanned.clause,
        "1 = 1 AND m.created_at >= instant($3) AND strpos(m.last_error, $4) > 0"
    );
    assert_eq!(
        scanned.values,
        [Value::Int(5), Value::Text("timeout".into())]
    );
    let numbered = Where::of(&NUMBERED, &filter, "", Terms::Indexed, 0);
    assert_eq!(
        numbered.clause,
        "1 = 1 AND lane = $1 AND target = $2 AND status = $3"
    );
}
