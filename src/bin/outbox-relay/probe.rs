//! `outbox-relay probe`: asks the relay's own listener for `/healthz` or `/readyz`, for a
//! container's `HEALTHCHECK`. The image has no shell and no curl, so the binary asks itself:
//! one HTTP/1.1 GET over a plain socket, at the address `run` would listen on (the same
//! config file, variables and `--metrics-listen`), an unspecified address (`0.0.0.0`,
//! `[::]`) asked on loopback.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use outbox_relay::config::file::MetricsListen;

use crate::cli::{Probe, ProbeArgs};
use crate::{Failure, Setup};

/// Exit 0 when the probe answers 200, 1 on any other answer or none in time, 2 when no
/// listener is configured.
pub(crate) fn run(setup: Setup, args: ProbeArgs) -> Result<(), Failure> {
    let address = match args.metrics_listen.unwrap_or(setup.config.listen_address()) {
        MetricsListen::Listen(address) => loopback_if_unspecified(address),
        MetricsListen::Off => {
            return Err(Failure::input(
                "probe: the listener is off (listener.address = false): nothing to ask",
            ))
        }
    };
    let path = match args.probe {
        Probe::Healthz => "/healthz",
        Probe::Readyz => "/readyz",
    };
    let status = get(address, path, args.timeout)
        .map_err(|error| Failure::failed(format!("probe: GET http://{address}{path}: {error}")))?;
    println!("GET http://{address}{path}: {status}");
    if status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200") {
        Ok(())
    } else {
        Err(Failure::failed(format!(
            "probe: GET http://{address}{path} answered {status}"
        )))
    }
}

fn loopback_if_unspecified(address: SocketAddr) -> SocketAddr {
    match address.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), address.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), address.port())
        }
        _ => address,
    }
}

/// The status line of the answer to `GET path`, within `timeout` overall.
fn get(address: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let deadline = std::time::Instant::now() + timeout;
    let left = || {
        deadline
            .saturating_duration_since(std::time::Instant::now())
            .max(Duration::from_millis(1))
    };
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_write_timeout(Some(left()))?;
    // `Host` is the address: the probes answer any host, and an IP is always allowed.
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = Vec::new();
    let mut buffer = [0u8; 512];
    while !head.contains(&b'\n') {
        stream.set_read_timeout(Some(left()))?;
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let head = String::from_utf8_lossy(&head);
    match head.lines().next().map(str::trim) {
        Some(line) if line.starts_with("HTTP/") => Ok(line.to_owned()),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the answer is not HTTP",
        )),
    }
}
