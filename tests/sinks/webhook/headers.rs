//! Configured headers: credentials from the environment (`headers_env`) and plain values
//! (`headers`) reach a real receiver, over a message's header of the same name; a bad
//! setting names its field and never shows a value.

use outbox_relay::config::file::FileConfig;
use outbox_relay::sinks::webhook::WebhookSink;
use outbox_relay::sinks::SinkConfig;

use super::Receiver;
use crate::{build, claimed, draft};

#[tokio::test]
async fn an_env_header_and_a_plain_header_reach_the_receiver() {
    let receiver = Receiver::start(vec![]).await;
    let variable = crate::unique("OUTBOX_TEST_WEBHOOK_AUTH");
    std::env::set_var(&variable, "Bearer hook-token-from-env");
    let sink = build(&format!(
        r#"sink = {{ kind = "webhook", url = "{}/in", headers_env = {{ Authorization = "{variable}" }}, headers = {{ X-Source = "outbox-relay" }} }}"#,
        receiver.url()
    ))
    .await;
    // A producer's header of the same name does not replace the configured credentials.
    let message = claimed(draft().with_header("authorization", "Bearer forged")).await;
    sink.deliver(&message).await.expect("delivered");

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    let authorizations: Vec<&str> = request
        .headers
        .iter()
        .filter(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str())
        .collect();
    assert_eq!(
        authorizations,
        ["Bearer hook-token-from-env"],
        "{:?}",
        request.headers
    );
    assert_eq!(request.header("x-source"), Some("outbox-relay"));
    // The sink's debug output names the header, never its value.
    let config = crate::sink_from_toml(&format!(
        r#"sink = {{ kind = "webhook", url = "{}/in", headers_env = {{ Authorization = "{variable}" }} }}"#,
        receiver.url()
    ));
    let SinkConfig::Webhook(config) = config else {
        panic!("not a webhook sink: {config:?}");
    };
    let shown = format!("{:?}", WebhookSink::build(&config, "s").expect("built"));
    assert!(
        shown.contains("authorization") && !shown.contains("hook-token"),
        "{shown}"
    );
}

#[tokio::test]
async fn bad_header_settings_name_their_field() {
    let unset = crate::unique("OUTBOX_TEST_UNSET_AUTH");
    let error = crate::sink_from_toml(&format!(
        r#"sink = {{ kind = "webhook", url = "http://127.0.0.1:1/in", headers_env = {{ Authorization = "{unset}" }} }}"#
    ))
    .build("lanes[orders/billing].sink")
    .await
    .err()
    .expect("a missing variable fails the build");
    assert_eq!(
        error.field(),
        "lanes[orders/billing].sink.headers_env.Authorization"
    );
    assert_eq!(error.missing_variable_name(), Some(unset.as_str()));

    let invalid = crate::unique("OUTBOX_TEST_BAD_AUTH");
    std::env::set_var(&invalid, "Bearer S3cret\nInjected: yes");
    let error = crate::sink_from_toml(&format!(
        r#"sink = {{ kind = "webhook", url = "http://127.0.0.1:1/in", headers_env = {{ Authorization = "{invalid}" }} }}"#
    ))
    .build("s")
    .await
    .err()
    .expect("a value that is no header value fails the build");
    assert_eq!(error.field(), "s.headers_env.Authorization");
    assert!(!error.to_string().contains("S3cret"), "{error}");

    for (table, field) in [
        (r#"headers = { "bad name" = "x" }"#, "headers.bad name"),
        (r#"headers = { webhook-id = "x" }"#, "headers.webhook-id"),
        (r#"headers_env = { Host = "H" }"#, "headers_env.Host"),
        (r#"headers_env = { X-Key = " " }"#, "headers_env.X-Key"),
        (
            r#"headers = { X-Key = "a" }, headers_env = { X-Key = "B" }"#,
            "headers.X-Key",
        ),
    ] {
        let text = format!(
            "database_url = \"sqlite:never-opened.db\"\n[[lanes]]\nlane = \"orders\"\ntarget = \"billing\"\nsink = {{ kind = \"webhook\", url = \"http://127.0.0.1:1/in\", {table} }}\n"
        );
        let error = FileConfig::from_toml_str("test", &text).expect_err(table);
        assert_eq!(
            error.field(),
            Some(format!("lanes[orders/billing].sink.{field}").as_str()),
            "{table}: {error}"
        );
    }
}
