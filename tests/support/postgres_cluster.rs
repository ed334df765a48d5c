//! A PostgreSQL cluster of a test's own (`initdb`, `pg_ctl`), for a test that crashes and
//! restarts its server (the shared server at `OUTBOX_TEST_DATABASE_URL` must not go down
//! under the other tests) or needs settings of its own (TLS). Trust authentication, a port
//! of its own on 127.0.0.1, its socket in its own directory. Stopped (`immediate`) and
//! removed when dropped, pass or fail.
//!
//! Needs PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`); a missing one fails
//! the test, naming the package. As root, the cluster runs as the `postgres` user (initdb
//! refuses root).

// Each test target that includes this file uses part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding initdb and pg_ctl: the newest installed.
fn postgres_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| {
            dirs.filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
                .filter(|bin| bin.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "PostgreSQL's server binaries (initdb, pg_ctl) are not under \
             /usr/lib/postgresql/*/bin: apt-get install postgresql (or `.ci/run postgres`)"
        )
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `program`, run as the `postgres` user when we are root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// A cluster of the test's own.
pub struct Cluster {
    _dir: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    bin: PathBuf,
    port: u16,
    starts: usize,
}

impl Cluster {
    /// Makes a cluster with `conf` appended to its `postgresql.conf`, and starts it.
    pub fn start(conf: &str) -> Self {
        Self::start_with(|_| (conf.to_owned(), None))
    }

    /// Makes a cluster: `prepare` puts its files in the cluster's directory (certificates)
    /// and answers the lines to append to `postgresql.conf` (paths relative to the data
    /// directory, `../` for the cluster's) and, if not the default, all of `pg_hba.conf`.
    /// Then starts it.
    pub fn start_with(prepare: impl FnOnce(&Path) -> (String, Option<String>)) -> Self {
        let bin = postgres_bin();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().to_owned();
        let (conf, hba) = prepare(&root);
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&root)
                .status()
                .expect("chown");
            assert!(status.success(), "chown the cluster's directory");
        }
        let data = root.join("data");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut cluster = Self {
            _dir: dir,
            root,
            data,
            bin,
            port,
            starts: 0,
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                cluster.data_arg(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        );
        let conf_path = cluster.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).expect("postgresql.conf");
        text.push_str(&format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n{conf}\n",
            cluster.root.display()
        ));
        std::fs::write(&conf_path, text).expect("write postgresql.conf");
        if let Some(hba) = hba {
            std::fs::write(cluster.data.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
        }
        cluster.restart();
        cluster
    }

    fn data_arg(&self) -> &str {
        self.data.to_str().expect("a UTF-8 path")
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = as_postgres(&self.bin.join(tool))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    fn pg_ctl_start(&mut self, options: &str) {
        let log = self.root.join("server.log");
        let mut args = vec![
            "-D",
            self.data_arg(),
            "-l",
            log.to_str().expect("a UTF-8 path"),
            "-w",
            "-t",
            "120",
        ];
        if !options.is_empty() {
            args.extend(["-o", options]);
        }
        args.push("start");
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run("pg_ctl", &args);
        self.starts += 1;
    }

    /// Starts the server on its port (after [`crash`](Self::crash) or [`stop`](Self::stop)).
    pub fn restart(&mut self) {
        self.pg_ctl_start("");
    }

    /// Starts the server reachable through its socket alone: nothing on its TCP port can
    /// reach it (or change a row) while the test reads what a crash left.
    pub fn start_socket_only(&mut self) {
        self.pg_ctl_start("-c listen_addresses=''");
    }

    /// Crashes the server: `pg_ctl -m immediate stop` ends every process at once, without a
    /// checkpoint; what the WAL holds on disk is what recovery finds.
    pub fn crash(&mut self) {
        self.run(
            "pg_ctl",
            &["-D", self.data_arg(), "-m", "immediate", "stop"],
        );
    }

    /// Stops the server cleanly.
    pub fn stop(&mut self) {
        self.run("pg_ctl", &["-D", self.data_arg(), "-m", "fast", "stop"]);
    }

    /// A URL of `database` over TCP.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// A URL of `database` through the server's socket.
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@localhost/{database}?host={}&port={}",
            self.root.display(),
            self.port
        )
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How many times the server was started.
    pub fn starts(&self) -> usize {
        self.starts
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Pass or fail, the test's server must not outlive it.
        let _ = as_postgres(&self.bin.join("pg_ctl"))
            .args(["-D", self.data_arg(), "-m", "immediate", "stop"])
            .output();
    }
}
