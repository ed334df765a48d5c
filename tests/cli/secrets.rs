//! No output of the binary ever holds a database password, whatever shape the URL has and
//! wherever it comes from (flag, environment, config file).

use crate::{free_port, test_config, Sandbox};

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
