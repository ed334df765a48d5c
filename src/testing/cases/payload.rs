//! Payload fidelity: a store hands out the bytes it was given, or refuses them with the
//! same validation error as every other store.

use crate::message::Payload;
use crate::StoreError;

use super::*;

/// JSON texts that a parse into `serde_json::Value` (or PostgreSQL's `jsonb`) would
/// rewrite, each with what it exercises.
const KEPT: &[(&str, &str)] = &[
    ("a big integer", r#"{"id":18446744073709551616}"#),
    (
        "long numbers",
        r#"[12345678901234567890123456789.0000001,-0,1E+2,1.0,1e400]"#,
    ),
    ("key order", r#"{"b":1,"a":2,"c":{"z":0,"y":[3,2,1]}}"#),
    ("duplicate keys", r#"{"a":1,"a":2}"#),
    (
        "whitespace inside",
        "{ \"spaced\" :  [ 1 ,\n\t2 ] ,\r\n  \"end\":\"x\"   }",
    ),
    ("unicode", r#"{"text":"café ☕ 😀 ü","key_ü":"ü"}"#),
    (
        "escapes",
        r#"{"escaped":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \t\n","Ä":"\u00C4"}"#,
    ),
    ("an escaped backslash before u0000", r#"["\\u0000"]"#),
    ("a bare string", r#""only a string""#),
    ("null", "null"),
    ("a lone surrogate escape", r#"["\ud800"]"#),
];

/// Payloads that hold a NUL character, which PostgreSQL cannot store: refused everywhere.
const REFUSED: &[&str] = &[
    r#"{"text":"a\u0000b"}"#,
    r#"{"a\u0000":1}"#,
    r#"[1e400,"\u0000"]"#,
    r#"["\\\u0000"]"#,
];

fn raw(text: &str) -> OutboxMessageDraft {
    OutboxMessageDraft::from_json(LANE, TARGET, text).expect("valid draft")
}

fn assert_kept(what: &str, sent: &str, message: &OutboxMessage, step: &str) {
    assert_eq!(
        message.payload.as_str(),
        sent,
        "{what}: {step} changed the payload"
    );
    assert_eq!(message.payload.as_bytes(), sent.as_bytes());
}

pub async fn payload_bytes_are_kept_through_enqueue_claim_and_list(h: Harness) {
    let mut ids = Vec::new();
    for (what, text) in KEPT {
        let enqueued = put(&h, raw(text)).await;
        assert_kept(what, text, &enqueued, "enqueue");
        ids.push(enqueued.outbox_id);
    }
    // enqueue_many binds the batch differently (one array per column on PostgreSQL).
    let batch = h
        .store
        .enqueue_many(KEPT.iter().map(|(_, text)| raw(text)).collect())
        .await
        .expect("enqueue_many");
    for ((what, text), enqueued) in KEPT.iter().zip(&batch) {
        assert_kept(what, text, &enqueued.message, "enqueue_many");
    }
    let sent: Vec<&(&str, &str)> = KEPT.iter().chain(KEPT).collect();
    let claimed = h
        .store
        .claim(&claim_req(sent.len(), "relay-a"))
        .await
        .expect("claim");
    assert_eq!(claimed.messages.len(), sent.len());
    for ((what, text), message) in sent.iter().zip(&claimed.messages) {
        assert_kept(what, text, message, "claim");
    }
    let reopened = (h.reopen)().await;
    for ((what, text), id) in KEPT.iter().zip(&ids) {
        let stored = reopened.get(*id).await.expect("get").expect("exists");
        assert_kept(what, text, &stored, "a reopened store");
    }
    for ((what, text), message) in sent.iter().zip(all_messages(&h).await) {
        assert_kept(what, text, &message, "list");
    }
}

/// A dedupe retry of the same raw draft is a harmless duplicate on every store: the bytes
/// read back from the store equal the bytes sent.
pub async fn a_raw_payload_retried_with_its_dedupe_key_is_a_duplicate(h: Harness) {
    for (i, (what, text)) in KEPT.iter().enumerate() {
        let key = format!("key-{i}");
        let first = put(&h, raw(text).with_dedupe_key(&key)).await;
        let again = h
            .store
            .enqueue(raw(text).with_dedupe_key(&key))
            .await
            .expect("enqueue");
        assert!(again.duplicate, "{what}");
        assert_eq!(again.message.outbox_id, first.outbox_id, "{what}");
        // The same value, spelled differently, is other content.
        let respelled = Payload::from_value(&first.payload.to_value().unwrap_or_default())
            .expect("a value serialises");
        if respelled != first.payload {
            let conflict = h
                .store
                .enqueue(
                    OutboxMessageDraft::from_payload(LANE, TARGET, respelled)
                        .expect("valid draft")
                        .with_dedupe_key(&key),
                )
                .await;
            assert!(
                matches!(conflict, Err(StoreError::Conflict { .. })),
                "{what}: {conflict:?}"
            );
        }
    }
}

/// `\u0000` in raw JSON is refused by every store with one validation error naming the
/// payload, and nothing is written.
pub async fn an_escaped_nul_in_raw_json_is_refused_by_every_store(h: Harness) {
    for text in REFUSED {
        let draft = raw(text);
        for result in [
            h.store.enqueue(draft.clone()).await.map(|_| ()),
            h.store.enqueue_many(vec![draft]).await.map(|_| ()),
        ] {
            match result {
                Err(StoreError::Validation(error)) => {
                    assert_eq!(error.field, "payload", "{text}: {error}");
                    assert!(error.reason.contains("NUL"), "{text}: {error}");
                }
                other => panic!("{text}: expected a validation error, got {other:?}"),
            }
        }
    }
    assert!(all_messages(&h).await.is_empty());
}
