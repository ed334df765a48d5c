//! A MariaDB server of the test's own, which the test may crash and start again: the shared
//! server at 127.0.0.1:3306 must never be restarted under the other tests.
//!
//! [`MariadbServer::start`] makes a data directory with `mariadb-install-db` (root without a
//! password) in a temporary directory and runs `mariadbd` on it, on a free loopback port and
//! a socket of its own. [`MariadbServer::crash`] SIGKILLs it (no shutdown: InnoDB recovers
//! at the next start); [`MariadbServer::start_socket_only`] starts it on the same data
//! directory reachable through its socket alone, so the test reads what the crash left
//! before any client over TCP can change it; [`MariadbServer::restart`] starts it on the
//! same data directory and port. Dropping the guard kills the server and removes the
//! directory, pass or fail.
//!
//! Needs MariaDB's server binaries (`mariadbd` or `mysqld`, `mariadb-install-db` or
//! `mysql_install_db`, under /usr/sbin or /usr/bin: Debian's `mariadb-server`); a missing
//! one fails the test, loudly. As root the server runs as root (`--user=root`).

#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a start (crash recovery included) or a stop may take before the test fails.
const SERVER_DEADLINE: Duration = Duration::from_secs(120);
/// How often a wait on the server looks again.
const SERVER_POLL: Duration = Duration::from_millis(20);
/// What the server writes to its error log when it accepts connections.
const READY: &str = "ready for connections";

/// How the server is reachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listen {
    /// Its TCP port on 127.0.0.1 and its socket.
    Tcp,
    /// Its socket only (`--skip-networking`).
    SocketOnly,
}

/// A `mariadbd` of the test's own; killed, and its directory removed, when dropped.
pub struct MariadbServer {
    dir: tempfile::TempDir,
    mariadbd: PathBuf,
    port: u16,
    root: bool,
    child: Option<Child>,
    /// How many times the server said it was ready, in its error log, before the current
    /// start: the current start is ready when there is one more.
    ready_before: usize,
    /// How many times the server was started.
    starts: u32,
}

impl MariadbServer {
    /// Initialises a data directory and starts the server on a free port, waiting until it
    /// accepts connections.
    pub fn start() -> Self {
        let install_db = binary(&["mariadb-install-db", "mysql_install_db"]);
        let mariadbd = binary(&["mariadbd", "mysqld"]);
        let dir = tempfile::tempdir().expect("a temporary directory for the server");
        let root = is_root();
        let mut install = Command::new(&install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ])
            .args(SIZES);
        if root {
            install.arg("--user=root");
        }
        let out = install
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", install_db.display()));
        assert!(
            out.status.success(),
            "{} failed ({}):\n{}\n{}",
            install_db.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let mut server = Self {
            dir,
            mariadbd,
            port,
            root,
            child: None,
            ready_before: 0,
            starts: 0,
        };
        server.run(Listen::Tcp);
        server
    }

    /// The URL of `database` as root, over TCP.
    pub fn url(&self, database: &str) -> String {
        self.url_as("root", "", database)
    }

    /// The URL of `database` as `user` with `password`, over TCP.
    pub fn url_as(&self, user: &str, password: &str, database: &str) -> String {
        let credentials = match password {
            "" => user.to_owned(),
            password => format!("{user}:{password}"),
        };
        format!("mysql://{credentials}@127.0.0.1:{}/{database}", self.port)
    }

    /// The URL of `database` as root, over the server's socket (the one way in after
    /// [`Self::start_socket_only`]).
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "mysql://root@localhost/{database}?socket={}",
            self.socket().display()
        )
    }

    /// How many times the server was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// SIGKILL, as a crash: no shutdown, nothing flushed that was not already written.
    pub fn crash(&mut self) {
        let mut child = self.child.take().expect("a running server to crash");
        child.kill().expect("SIGKILL mariadbd");
        child.wait().expect("reap mariadbd");
    }

    /// Shuts the server down (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) {
        let mut child = self.child.take().expect("a running server to stop");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM mariadbd failed");
        let deadline = Instant::now() + SERVER_DEADLINE;
        loop {
            if let Some(status) = child.try_wait().expect("poll mariadbd") {
                assert!(
                    status.success(),
                    "mariadbd shut down with {status}\n{}",
                    self.log()
                );
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "mariadbd did not shut down within {SERVER_DEADLINE:?}\n{}",
                    self.log()
                );
            }
            thread::sleep(SERVER_POLL);
        }
    }

    /// Starts the stopped (or crashed) server on its data directory, reachable through its
    /// socket only; waits until it accepts connections (after crash recovery).
    pub fn start_socket_only(&mut self) {
        self.run(Listen::SocketOnly);
    }

    /// Starts the stopped (or crashed) server on its data directory and port; waits until it
    /// accepts connections (after crash recovery).
    pub fn restart(&mut self) {
        self.run(Listen::Tcp);
    }

    /// The server's error log (every start's), for a failure message.
    pub fn log(&self) -> String {
        format!(
            "--- mariadbd error log ---\n{}",
            std::fs::read_to_string(self.log_path()).unwrap_or_default()
        )
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("mysqld.sock")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("error.log")
    }

    fn run(&mut self, listen: Listen) {
        assert!(self.child.is_none(), "mariadbd is already running");
        self.ready_before = self.log().matches(READY).count();
        let mut command = Command::new(&self.mariadbd);
        // --no-defaults first: the machine's /etc/mysql must not shape the test's server.
        command
            .arg("--no-defaults")
            .arg(format!(
                "--datadir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("mysqld.pid").display()
            ))
            .arg(format!("--log-error={}", self.log_path().display()))
            // Every commit is written and flushed before it returns: a crash keeps every
            // commit a client saw (the server's default, stated because the test relies on
            // it).
            .arg("--innodb-flush-log-at-trx-commit=1")
            .arg("--skip-name-resolve")
            .args(SIZES);
        match listen {
            Listen::Tcp => command
                .arg(format!("--port={}", self.port))
                .arg("--bind-address=127.0.0.1"),
            Listen::SocketOnly => command.arg("--skip-networking"),
        };
        if self.root {
            command.arg("--user=root");
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.mariadbd.display()));
        self.child = Some(child);
        self.starts += 1;
        self.wait_ready();
    }

    /// Waits for the current start's "ready for connections" in the error log; fails if
    /// the server exits first.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + SERVER_DEADLINE;
        loop {
            if self.log().matches(READY).count() > self.ready_before {
                return;
            }
            let exited: Option<ExitStatus> = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().expect("poll mariadbd"));
            if let Some(status) = exited {
                self.child = None;
                panic!("mariadbd exited ({status}) while starting\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd not ready after {SERVER_DEADLINE:?}\n{}",
                self.log()
            );
            thread::sleep(SERVER_POLL);
        }
    }
}

impl Drop for MariadbServer {
    fn drop(&mut self) {
        // Pass or fail, the test's server must not outlive it (the directory goes with the
        // TempDir).
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Small files and buffers: the server starts in a fraction of a second and its directory
/// stays near 30 MB (the defaults make a 100 MB redo log).
const SIZES: [&str; 2] = [
    "--innodb-log-file-size=16M",
    "--innodb-buffer-pool-size=64M",
];

/// The first of `names` found under /usr/sbin or /usr/bin; fails the test naming them all
/// when none is there.
fn binary(names: &[&str]) -> PathBuf {
    names
        .iter()
        .flat_map(|name| {
            [
                Path::new("/usr/sbin").join(name),
                Path::new("/usr/bin").join(name),
            ]
        })
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "none of {names:?} under /usr/sbin or /usr/bin: the test starts a MariaDB \
                 server of its own; install Debian's mariadb-server (.ci/run does)"
            )
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}
