//! The binary on a `mysql://` URL: `migrate --check` before and after `migrate`, then a
//! relay that delivers what a separate `enqueue` process wrote, in key order, and `status`.

use crate::{free_port, lane_status, test_config, Sandbox};

#[path = "../support/mysql.rs"]
mod support;

#[test]
fn mysql_migrate_run_enqueue_deliver_and_status() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(support::TestDatabase::create());
    let sandbox = Sandbox::new();
    sandbox.write("relay.toml", &test_config(&db.url, "", free_port()));
    let cfg = ["--config", "relay.toml"];

    // Nothing yet: `--check` says behind (exit 3) and writes nothing.
    sandbox.fails(3, &["--config", "relay.toml", "migrate", "--check"]);
    sandbox.ok(&["--config", "relay.toml", "migrate"]);
    sandbox.ok(&["--config", "relay.toml", "migrate", "--check"]);

    let mut relay = sandbox.start(&["--config", "relay.toml", "run", "--no-migrate"]);
    let mut ids = Vec::new();
    for n in 1..=3 {
        let payload = format!(r#"{{"n":{n}}}"#);
        ids.push(sandbox.enqueue(
            &cfg,
            "orders",
            "audit",
            &["--payload", &payload, "--ordering-key", "customer-7"],
        ));
    }
    for (n, id) in ids.iter().enumerate() {
        let line = relay.delivery();
        assert_eq!(line["outbox_id"], id.as_str(), "per-key order");
        assert_eq!(line["payload"]["n"], n + 1);
    }
    let (status, _) = relay.terminate();
    assert!(status.success(), "{status:?}");
    let rows = sandbox.status(&cfg);
    let row = lane_status(&rows, "orders", "audit");
    assert_eq!(row["delivered"], 3, "{row}");
    assert_eq!(row["pending"], 0, "{row}");
    runtime.block_on(db.drop_now());
}
