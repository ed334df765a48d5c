//! A private PgBouncer in `pool_mode = transaction` in front of the test PostgreSQL: its own
//! port, ini and auth file in a temporary directory, killed when dropped. Debian's
//! `pgbouncer` package provides the binary (`.ci/run` installs it); a missing binary is a
//! failure, never a skip.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's package installs it.
pub const DEFAULT_BINARY: &str = "/usr/sbin/pgbouncer";

/// How long PgBouncer has to start listening (a loaded CI machine).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the PgBouncer binary should be: `$PGBOUNCER`, else [`DEFAULT_BINARY`].
pub fn binary_path() -> PathBuf {
    std::env::var_os("PGBOUNCER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BINARY))
}

/// The PgBouncer binary ([`binary_path`]); panics with how to install it when missing.
pub fn binary() -> PathBuf {
    let path = binary_path();
    assert!(
        path.is_file(),
        "PgBouncer {} is missing, so the relay cannot be checked through a transaction \
         pooler. Install Debian's pgbouncer package (apt-get install -y pgbouncer; .ci/run \
         does), or set PGBOUNCER to the binary.",
        path.display()
    );
    path
}

/// A running PgBouncer. Dropping it kills the process and removes its directory.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PgBouncer {
    /// Starts PgBouncer in transaction mode in front of the PostgreSQL that `database_url`
    /// names (`postgres://user@host:port/db`), with at most `pool_size` server connections
    /// per database and user (fewer server than client connections, as in production, so
    /// clients really do share server connections), and waits until it accepts
    /// connections. Retries on another port when its port was taken meanwhile.
    pub fn start(database_url: &str, pool_size: u32) -> PgBouncer {
        let binary = binary();
        let upstream = Upstream::parse(database_url);
        for _ in 0..5 {
            let mut bouncer = Self::spawn(&binary, &upstream, pool_size);
            match bouncer.wait_listening() {
                Ok(()) => return bouncer,
                Err(log) if log.contains("Address already in use") => {
                    eprintln!("PgBouncer port {} was taken; retrying", bouncer.addr);
                }
                Err(log) => panic!("PgBouncer did not start on {}: {log}", bouncer.addr),
            }
        }
        panic!("no free loopback port for PgBouncer after 5 attempts");
    }

    fn spawn(binary: &PathBuf, upstream: &Upstream, pool_size: u32) -> PgBouncer {
        let dir = tempfile::tempdir().expect("a directory for PgBouncer");
        let port = {
            let probe = TcpListener::bind("127.0.0.1:0").expect("bind a probe socket");
            probe.local_addr().expect("the probe's address").port()
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("an address");
        let auth_file = dir.path().join("users.txt");
        std::fs::write(&auth_file, format!("\"{}\" \"\"\n", upstream.user)).expect("auth file");
        let ini = format!(
            "[databases]\n\
             * = host={host} port={port_up}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {auth}\n\
             pool_mode = transaction\n\
             default_pool_size = {pool_size}\n\
             max_client_conn = 200\n\
             server_reset_query =\n\
             logfile =\n\
             pidfile =\n",
            host = upstream.host,
            port_up = upstream.port,
            auth = auth_file.display(),
        );
        let ini_file = dir.path().join("pgbouncer.ini");
        std::fs::write(&ini_file, ini).expect("pgbouncer.ini");
        // PgBouncer refuses to run as root; it drops to `-u` when started as root.
        let _ = std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        );
        let log_file = std::fs::File::create(dir.path().join("pgbouncer.log")).expect("log file");
        let mut command = Command::new(binary);
        if running_as_root() {
            command.arg("-u").arg("nobody");
        }
        let child = command
            .arg(&ini_file)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone the log handle"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        PgBouncer { child, addr, dir }
    }

    fn wait_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            let exited = matches!(self.child.try_wait(), Ok(Some(_)) | Err(_));
            if exited || Instant::now() > deadline {
                let why = if exited {
                    "it exited"
                } else {
                    "not listening in time"
                };
                return Err(format!("{why}; its log:\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `database_url` (a `postgres://user@host:port/db…` URL) with this PgBouncer's
    /// address in place of the host and port: the same user and database, pooled.
    pub fn url_like(&self, database_url: &str) -> String {
        let (scheme, rest) = database_url
            .split_once("://")
            .unwrap_or_else(|| panic!("{database_url} is not a URL"));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority.rsplit_once('@').map_or("", |(user, _)| user);
        let at = if user.is_empty() { "" } else { "@" };
        format!("{scheme}://{user}{at}{}/{path}", self.addr)
    }

    /// The URL of `database` through this PgBouncer, as `user`.
    pub fn url(&self, user: &str, database: &str) -> String {
        format!("postgres://{user}@{}/{database}", self.addr)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Host, port and user of a `postgres://user@host:port/db` URL (what the test URLs are).
struct Upstream {
    user: String,
    host: String,
    port: u16,
}

impl Upstream {
    fn parse(url: &str) -> Upstream {
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .unwrap_or_else(|| panic!("{url} is not a postgres:// URL"));
        let (authority, _) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, hostport) = authority
            .rsplit_once('@')
            .unwrap_or_else(|| panic!("{url} names no user"));
        let user = user.split(':').next().unwrap_or(user).to_owned();
        let (host, port) = match hostport.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), port.parse().expect("a port number")),
            None => (hostport.to_owned(), 5432),
        };
        Upstream { user, host, port }
    }
}
