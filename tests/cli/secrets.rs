//! No output of the binary ever holds a database password, whatever shape the URL has and
//! wherever it comes from (flag, environment, config file).

use crate::{free_port, test_config, Daemon, Sandbox};

/// The password every shape below carries.
const PASSWORD: &str = "S3cr3t";

/// URL shapes the hostile run found printed with their password, and the usual ones.
const SHAPES: [&str; 7] = [
    "postgres://app:S3cr3t@127.0.0.1:1/db",
    "postgres://app:S3cr3t/Pw@127.0.0.1:1/db",
    "postgres://app:S3cr3t?Pw@127.0.0.1:1/db",
    "postgres://app:S3c@r3t@127.0.0.1:1/db",
    "postgres://app@127.0.0.1:1/db?password=S3cr3t",
    "postgres://app@127.0.0.1:notaport/db?password=S3cr3t",
    "host=127.0.0.1 port=1 user=app password=S3cr3t dbname=db",
];

#[test]
fn no_output_holds_a_database_password() {
    let sandbox = Sandbox::new();
    for url in SHAPES {
        let config = test_config(&url.replace('"', "\\\""), "", free_port())
            .replace("connect_timeout = \"5s\"", "connect_timeout = \"1s\"");
        sandbox.write("relay.toml", &config);
        let runs = [
            (
                "--database-url",
                sandbox.output(&mut sandbox.command(&["--database-url", url, "status"])),
            ),
            (
                "OUTBOX_DATABASE_URL",
                sandbox.output(sandbox.command(&["status"]).env("OUTBOX_DATABASE_URL", url)),
            ),
            (
                "config status",
                sandbox.output(&mut sandbox.command(&["--config", "relay.toml", "status"])),
            ),
            (
                "config run",
                sandbox.output(&mut sandbox.command(&["--config", "relay.toml", "run"])),
            ),
        ];
        for (via, out) in runs {
            assert_eq!(out.code, Some(2), "{url} via {via}: {out:#?}");
            assert!(
                !out.stdout.contains(PASSWORD) && !out.stderr.contains(PASSWORD),
                "{url} via {via} printed the password: {out:#?}"
            );
        }
    }
}

/// The user, password and token every sink URL below carries; no output may show any.
const SINK_SECRETS: [&str; 3] = ["S3cUser", "S3cPass", "S3cTok"];

fn assert_no_sink_secret(what: &str, text: &str) {
    for secret in SINK_SECRETS {
        assert!(!text.contains(secret), "{what} shows {secret}:\n{text}");
    }
}

/// A broker sink whose URL holds a user, a password and a token, on a loopback port with
/// nothing listening: the relay cannot start, and says why without the credentials.
#[test]
fn a_broker_sink_that_cannot_connect_shows_no_credentials() {
    let sandbox = Sandbox::new();
    for (kind, sink) in [
        (
            "redis",
            r#"{ kind = "redis", url = "redis://S3cUser:S3cPass@127.0.0.1:PORT/0?token=S3cTok", stream = "s", connect_timeout = "2s" }"#,
        ),
        (
            "rabbitmq",
            r#"{ kind = "rabbitmq", url = "amqp://S3cUser:S3cPass@127.0.0.1:PORT/%2f?token=S3cTok", routing_key = "k", connect_timeout = "2s" }"#,
        ),
        (
            "nats",
            r#"{ kind = "nats", url = "nats://S3cUser:S3cPass@127.0.0.1:PORT?token=S3cTok", subject = "s", stream = "S" }"#,
        ),
    ] {
        let sink = sink.replace("PORT", &free_port().to_string());
        let config = test_config("sqlite:relay.db", "", free_port())
            .replace(r#"sink = { kind = "log" }"#, &format!("sink = {sink}"));
        sandbox.write("relay.toml", &config);
        let out = sandbox.output(
            sandbox
                .command(&["--config", "relay.toml", "run"])
                .env("RUST_LOG", "debug"),
        );
        assert_eq!(out.code, Some(2), "{kind}: {out:#?}");
        assert!(
            out.stderr.contains("cannot connect") && out.stderr.contains("***"),
            "{kind}: no connect error naming the hidden URL: {out:#?}"
        );
        assert_no_sink_secret(&format!("{kind}: stdout"), &out.stdout);
        assert_no_sink_secret(&format!("{kind}: stderr"), &out.stderr);
    }
    // URLs the config check refuses: the error names the field, not the credentials.
    for sink in [
        r#"{ kind = "webhook", url = "ftp://S3cUser:S3cPass@127.0.0.1/x?token=S3cTok" }"#,
        r#"{ kind = "rabbitmq", url = "http://S3cUser:S3cPass@127.0.0.1/x?token=S3cTok", routing_key = "k" }"#,
        r#"{ kind = "redis", url = "redis://S3cUser:S3cPass@127.0.0.1:notaport?token=S3cTok", stream = "s" }"#,
    ] {
        let config = test_config("sqlite:relay.db", "", free_port())
            .replace(r#"sink = { kind = "log" }"#, &format!("sink = {sink}"));
        sandbox.write("relay.toml", &config);
        let out = sandbox.run(&["--config", "relay.toml", "run"]);
        assert_eq!(out.code, Some(2), "{sink}: {out:#?}");
        assert!(out.stderr.contains(".sink.url"), "{sink}: {out:#?}");
        assert_no_sink_secret(&format!("{sink}: stdout"), &out.stdout);
        assert_no_sink_secret(&format!("{sink}: stderr"), &out.stderr);
    }
}

/// A webhook sink whose URL holds a user, a password and a token, on a loopback port with
/// nothing listening: the delivery fails, the message becomes a dead letter, and neither the
/// relay's log nor the dead letter (listed, shown) nor the status shows the credentials.
#[test]
fn a_webhook_that_cannot_be_reached_shows_no_credentials() {
    let sandbox = Sandbox::new();
    let url = format!(
        "http://S3cUser:S3cPass@127.0.0.1:{}/hook?token=S3cTok",
        free_port()
    );
    let config = test_config("sqlite:relay.db", "", free_port()).replace(
        r#"sink = { kind = "log" }"#,
        &format!(r#"sink = {{ kind = "webhook", url = "{url}", timeout = "2s" }}"#),
    );
    sandbox.write("relay.toml", &config);
    let cfg = ["--config", "relay.toml"];
    let mut command = sandbox.command(&["--config", "relay.toml", "run"]);
    // Every line the relay and its HTTP client log.
    command.env("RUST_LOG", "debug");
    let mut daemon = Daemon::start(command);
    daemon.wait_for_log("relay running");
    let id = sandbox.enqueue(
        &cfg,
        "orders",
        "audit",
        &["--payload", "1", "--max-attempts", "1"],
    );
    daemon.wait_for_log("message dead-lettered");
    let shown = sandbox.ok(&["--config", "relay.toml", "dead-letters", "show", &id]);
    let shown_json: serde_json::Value = serde_json::from_str(&shown).expect("show prints JSON");
    let last_error = shown_json["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("http://***:***@127.0.0.1") && last_error.contains("token=***"),
        "the error should name the target with its credentials hidden: {shown}"
    );
    assert_no_sink_secret("dead-letters show", &shown);
    let listed = sandbox.ok(&["--config", "relay.toml", "dead-letters", "list", "--json"]);
    assert!(listed.contains(&id), "{listed}");
    assert_no_sink_secret("dead-letters list", &listed);
    let table = sandbox.ok(&["--config", "relay.toml", "dead-letters", "list"]);
    assert_no_sink_secret("dead-letters list (table)", &table);
    let (status, log) = daemon.terminate();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(log.contains("http://***:***@127.0.0.1"), "{log}");
    assert_no_sink_secret("the relay's log", &log);
}
