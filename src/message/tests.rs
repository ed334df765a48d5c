//! Unit tests of drafts: each rule names its field, and a status round-trips.

use super::*;
use serde_json::json;

fn draft() -> OutboxMessageDraft {
    OutboxMessageDraft::new("orders", "billing", json!({"a": 1})).unwrap()
}

#[test]
fn each_invalid_field_is_named() {
    let limits = DraftLimits::default();
    let cases: Vec<(OutboxMessageDraft, &str)> = vec![
        (draft().with_max_attempts(0), "max_attempts"),
        (draft().with_ordering_key("  "), "ordering_key"),
        (draft().with_dedupe_key(""), "dedupe_key"),
        (draft().with_header("bad name", "x"), "headers.bad name"),
        (draft().with_header("x-ok", "a\nb"), "headers.x-ok"),
        (
            draft().with_dedupe_key("k".repeat(MAX_KEY_LEN + 1)),
            "dedupe_key",
        ),
    ];
    for (draft, field) in cases {
        assert_eq!(draft.validate(&limits).unwrap_err().field, field);
    }
    let mut blank_lane = draft();
    blank_lane.lane = " ".into();
    assert_eq!(blank_lane.validate(&limits).unwrap_err().field, "lane");
    let big = OutboxMessageDraft::new("l", "t", json!("x".repeat(100))).unwrap();
    let err = big
        .validate(&DraftLimits {
            max_payload_bytes: 50,
        })
        .unwrap_err();
    assert_eq!(err.field, "payload");
    assert!(err.to_string().contains("over the limit of 50 bytes"));
}

#[test]
fn headers_are_bounded_and_count_toward_the_size_limit() {
    let limits = DraftLimits::default();
    let long_value = draft().with_header("x-big", "v".repeat(MAX_HEADER_VALUE_LEN + 1));
    let err = long_value.validate(&limits).unwrap_err();
    assert_eq!(err.field, "headers.x-big", "{err}");
    // A 2 MB message made of headers under the value limit each.
    let mut many = draft();
    for i in 0..MAX_HEADERS + 1 {
        many = many.with_header(format!("x-{i}"), "v");
    }
    assert_eq!(many.validate(&limits).unwrap_err().field, "headers");
    let mut heavy = OutboxMessageDraft::new("l", "t", json!("x".repeat(40))).unwrap();
    for i in 0..4 {
        heavy = heavy.with_header(format!("x-{i}"), "v".repeat(10));
    }
    let err = heavy
        .validate(&DraftLimits {
            max_payload_bytes: 60,
        })
        .unwrap_err();
    assert_eq!(err.field, "headers");
    assert!(err.reason.contains("over the limit of 60 bytes"), "{err}");
}

#[test]
fn a_nul_anywhere_in_the_payload_is_named() {
    let limits = DraftLimits::default();
    for (payload, at) in [
        (json!("a\u{0}b"), "$"),
        (json!({"a": [1, "x\u{0}"]}), "$.a[1]"),
        (json!({"a\u{0}": 1}), "$ (a key)"),
    ] {
        let err = OutboxMessageDraft::new("l", "t", payload.clone())
            .unwrap()
            .validate(&limits)
            .unwrap_err();
        assert_eq!(err.field, "payload", "{payload}");
        assert!(err.reason.contains(&format!("at {at}")), "{payload}: {err}");
    }
}

#[test]
fn keys_hold_no_line_breaks() {
    let limits = DraftLimits::default();
    for key in ["a\r\nb", "a\nb", "a\u{0}b", "tab\there"] {
        let err = draft()
            .with_ordering_key(key)
            .validate(&limits)
            .unwrap_err();
        assert_eq!(err.field, "ordering_key", "{key:?}");
        let err = draft().with_dedupe_key(key).validate(&limits).unwrap_err();
        assert_eq!(err.field, "dedupe_key", "{key:?}");
    }
    assert!(draft()
        .with_ordering_key("customer:42/ü")
        .validate(&limits)
        .is_ok());
}

#[test]
fn names_are_label_safe() {
    assert!(OutboxMessageDraft::new("", "t", json!(null)).is_err());
    assert!(OutboxMessageDraft::new("l", "a b", json!(null)).is_err());
    assert!(OutboxMessageDraft::new("x".repeat(65), "t", json!(null)).is_err());
    assert!(OutboxMessageDraft::new("orders.v2", "billing:eu-1", json!(null)).is_ok());
}

#[test]
fn status_round_trips() {
    for status in OutboxStatus::ALL {
        assert_eq!(status.as_str().parse::<OutboxStatus>().unwrap(), status);
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            json!(status.as_str())
        );
    }
    assert!("done".parse::<OutboxStatus>().is_err());
}
