//! `enqueue --payload` keeps the bytes: the log sink writes the payload exactly as typed,
//! on SQLite and on PostgreSQL, and a payload no store can keep exits 2 naming it.

use crate::{free_port, postgres_url, test_config, Sandbox, Schema};

/// Texts a parse into `serde_json::Value` or `jsonb` would rewrite. One line each: the log
/// sink writes one line per message, and a payload's own line breaks would split it.
const KEPT: &[&str] = &[
    r#"{"id":18446744073709551616}"#,
    r#"{"b":1,"a":2,"a":3}"#,
    "{ \"spaced\" :\t[ 1 , 2.50 ] }",
    r#"{"text":"café ☕ 😀","esc":"\u00e9\ud83d\ude00"}"#,
    r#"["\\u0000"]"#,
];

fn delivers_the_bytes_typed(database_url: &str, extra: &str) {
    let sandbox = Sandbox::new();
    sandbox.write("relay.toml", &test_config(database_url, extra, free_port()));
    let cfg = ["--config", "relay.toml"];
    let mut relay = sandbox.start(&["--config", "relay.toml", "run"]);
    relay.wait_for_log("relay running");
    for text in KEPT {
        let id = sandbox.enqueue(&cfg, "orders", "audit", &["--payload", text]);
        let line = relay.delivery_line();
        assert!(line.contains(&id), "{id} not in {line}");
        // The payload is the log line's last field.
        assert!(
            line.ends_with(&format!("\"payload\":{text}}}")),
            "sent {text}\ndelivered {line}"
        );
    }
    // Whitespace around the value is not part of it.
    sandbox.enqueue(&cfg, "orders", "audit", &["--payload", "  [1, 2]\t "]);
    let line = relay.delivery_line();
    assert!(line.ends_with("\"payload\":[1, 2]}"), "{line}");

    for (payload, needle) in [
        (r#"{"a":1} x"#, "--payload is not valid JSON"),
        (
            r#"{"text":"a\u0000b"}"#,
            "invalid payload: contains a NUL character",
        ),
        (
            r#"{"a\u0000":1}"#,
            "invalid payload: contains a NUL character",
        ),
    ] {
        let mut args = cfg.to_vec();
        args.extend(["enqueue", "--lane", "orders", "--target", "audit"]);
        args.extend(["--payload", payload]);
        let stderr = sandbox.fails(2, &args);
        assert!(
            stderr.contains(needle),
            "{payload}: {needle:?} not in {stderr}"
        );
    }
    let (status, log) = relay.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
}

#[test]
fn sqlite_enqueue_payload_keeps_the_bytes() {
    delivers_the_bytes_typed("sqlite:relay.db", "");
}

#[test]
fn postgres_enqueue_payload_keeps_the_bytes() {
    let schema = Schema {
        name: format!("cli_{}", uuid::Uuid::new_v4().simple()),
    };
    delivers_the_bytes_typed(&postgres_url(), &format!("schema = \"{}\"", schema.name));
}
