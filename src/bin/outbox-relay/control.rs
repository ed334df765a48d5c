//! `outbox-relay pause|resume LANE[/TARGET]`: asks a running daemon, through the control
//! routes of its metrics listener (`POST /lanes/…/pause`), to pause or resume lanes.
//!
//! The daemon's address is the config's `metrics_listen` (or `--metrics-listen`); a daemon
//! listening on all interfaces is reached on loopback, the only peer it obeys. The request
//! carries the control token the config's `[listener]` names (`control_token_env` or
//! `control_token_file`), read the same way the daemon reads it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use outbox_relay::config::file::MetricsListen;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{ControlArgs, Failure, Setup};

/// How long the command waits for the daemon's answer (a pause answers once the lane
/// relay took it, well within this).
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// Sends `action` (`pause` or `resume`) for the lane in `args` to the running daemon.
pub(crate) async fn run(setup: Setup, action: &str, args: ControlArgs) -> Result<(), Failure> {
    let path = lane_path(&args.lane, action)?;
    let token = setup
        .config
        .listener
        .control_token()
        .map_err(|error| Failure::input(format!("config error: {}: {}", error.field, error.reason)))?
        .ok_or_else(|| {
            Failure::input(
                "no control token: set [listener] control_token_env or control_token_file in the config (the daemon's lane control is off without one)",
            )
        })?;
    let addr = match args.metrics_listen.unwrap_or(setup.config.metrics_listen) {
        MetricsListen::Listen(addr) => loopback(addr),
        MetricsListen::Off => {
            return Err(Failure::input(
                "metrics_listen is off: the daemon serves no control endpoint (set metrics_listen, or pass --metrics-listen ADDR)",
            ))
        }
    };
    let (status, body) = tokio::time::timeout(ANSWER_WAIT, post(addr, &path, token.as_str()))
        .await
        .map_err(|_| {
            Failure::failed(format!(
                "the daemon at {addr} did not answer within {ANSWER_WAIT:?}"
            ))
        })?
        .map_err(|error| {
            Failure::failed(format!(
                "cannot reach a running relay at {addr} ({error}); is `outbox-relay run` running with this metrics_listen?"
            ))
        })?;
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    if status == 200 {
        let lanes: Vec<&str> = answer["lanes"]
            .as_array()
            .map(|lanes| lanes.iter().filter_map(|lane| lane.as_str()).collect())
            .unwrap_or_default();
        let done = if action == "pause" {
            "paused"
        } else {
            "resumed"
        };
        println!("{done} {}", lanes.join(", "));
        return Ok(());
    }
    let reason = answer["error"]
        .as_str()
        .map_or_else(|| body.trim().to_owned(), str::to_owned);
    let message = format!(
        "{action} {}: the daemon at {addr} answered {status}: {reason}",
        args.lane
    );
    Err(if status == 404 {
        Failure::input(message)
    } else {
        Failure::failed(message)
    })
}

/// `/lanes/{lane}[/{target}]/{action}`, the lane checked before anything is sent.
fn lane_path(lane: &str, action: &str) -> Result<String, Failure> {
    let (name, target) = match lane.split_once('/') {
        Some((name, target)) => (name, Some(target)),
        None => (lane, None),
    };
    // The names a lane may have (letters, digits, `_ - . :`) need no escaping in a path.
    for (field, value) in std::iter::once(("LANE", name)).chain(target.map(|t| ("TARGET", t))) {
        let bad = value
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')));
        if value.is_empty() || bad.is_some() {
            return Err(Failure::input(format!(
                "{action} {lane:?}: {field} must be 1 or more of letters, digits, '_', '-', '.', ':' (LANE or LANE/TARGET)"
            )));
        }
    }
    Ok(match target {
        Some(target) => format!("/lanes/{name}/{target}/{action}"),
        None => format!("/lanes/{name}/{action}"),
    })
}

/// A daemon bound to every interface is reached on loopback.
fn loopback(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

/// One HTTP/1.1 POST without a body, with the bearer `token`: the status and the body.
async fn post(addr: SocketAddr, path: &str, token: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
