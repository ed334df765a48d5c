//! The HTTP listener's limits ([`ListenerConfig`]), the token its API and UI require
//! ([`ControlToken`]) and the bounds of the API's store calls. The listener itself is
//! `http::listener` (feature `http`); these are plain settings, so a config file parses
//! them with or without it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::ConfigError;

/// How long a client may take to send a request's headers (from the connection's start,
/// or from the end of its previous answer) before the connection is closed. A scraper
/// sends its request at once; one that sends a request line and a header and then nothing
/// would otherwise hold a connection for ever.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may go without a byte read or written before it is closed: a
/// client that stops reading an answer, or a keep-alive connection left open.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request may take once its headers are in: its body read, its answer made.
/// A client that sends a body a byte at a time is answered `408` and closed at this
/// deadline, however steadily it drips, so no client holds a connection for longer than
/// `header_read_timeout + request_timeout` per request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How many store calls the API and the UI run at once; a request past it is answered
/// `503` at once (with `Retry-After: 1`). Small, so API reads never take the store
/// connections a lane's claims, acks and lease extensions use (SQLite reads from a pool
/// of 4, PostgreSQL's pool defaults to 10).
pub const DEFAULT_API_STORE_CALLS: usize = 2;
/// The most `api_store_calls` may be: each takes a store connection the lanes may need.
pub const MAX_API_STORE_CALLS: usize = 64;
/// How long one API or UI request's store work may take before it is given up and
/// answered `503`. (PostgreSQL also cancels any statement past the store's own
/// `statement_timeout`, 30 s by default.)
pub const DEFAULT_API_STORE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many connections the listener serves at once; past it a connection is answered
/// `503` and closed at once. Prometheus holds one connection per target; a few probes and
/// the CLI add a handful.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// The most `max_connections` may be: each connection is a task and a socket.
pub const MAX_MAX_CONNECTIONS: usize = 10_000;

/// The HTTP listener's limits (`/metrics`, `/healthz`, `/readyz`, the API, the UI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerConfig {
    /// See [`DEFAULT_HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// See [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// See [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ListenerConfig {
    /// Sets how long a client may take to send its request headers
    /// ([`DEFAULT_HEADER_READ_TIMEOUT`]).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets how long a request may take once its headers are in
    /// ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets how long an idle connection stays open ([`DEFAULT_IDLE_TIMEOUT`]).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets the most connections served at once ([`DEFAULT_MAX_CONNECTIONS`]).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Checks the limits; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.header_read_timeout.is_zero() {
            return Err(ConfigError::new(
                "header_read_timeout",
                "must be greater than zero",
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(ConfigError::new(
                "request_timeout",
                "must be greater than zero",
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(ConfigError::new(
                "idle_timeout",
                "must be greater than zero",
            ));
        }
        if self.max_connections == 0 || self.max_connections > MAX_MAX_CONNECTIONS {
            return Err(ConfigError::new(
                "max_connections",
                format!("must be between 1 and {MAX_MAX_CONNECTIONS}"),
            ));
        }
        Ok(())
    }
}

/// The bearer token the API and the UI require (`Authorization: Bearer <token>`): every
/// mutation and every read of messages, and lane reads unless they are opened.
/// Its `Debug` never shows it; it is compared in time independent of where it differs.
#[derive(Clone, PartialEq, Eq)]
pub struct ControlToken(Arc<str>);

/// The fewest characters a control token may have: a guessable token is no token.
pub const MIN_CONTROL_TOKEN_LEN: usize = 16;

impl ControlToken {
    /// A token from its text (surrounding whitespace, such as a file's last newline, is
    /// dropped). The error says what is wrong, never the token.
    pub fn new(text: &str) -> Result<Self, String> {
        let token = text.trim();
        if token.chars().count() < MIN_CONTROL_TOKEN_LEN {
            return Err(format!(
                "the token must have at least {MIN_CONTROL_TOKEN_LEN} characters"
            ));
        }
        if !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err("the token must be visible ASCII without spaces".to_owned());
        }
        Ok(Self(token.into()))
    }

    /// The token, to send it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether an `Authorization` header's value is `Bearer <this token>`.
    pub fn authorizes(&self, authorization: Option<&str>) -> bool {
        let Some(presented) = authorization
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
        else {
            return false;
        };
        let (expected, presented) = (self.0.as_bytes(), presented.as_bytes());
        // Every byte is compared, so the time taken does not say how much of a guess was
        // right (the length is not secret: it only bounds the search).
        let differences = expected
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        differences == 0 && expected.len() == presented.len()
    }
}

impl fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ControlToken(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_authorizes_only_its_own_bearer_header() {
        let token = ControlToken::new("  0123456789abcdef-token\n").expect("a token");
        assert!(token.authorizes(Some("Bearer 0123456789abcdef-token")));
        assert!(token.authorizes(Some("bearer 0123456789abcdef-token")));
        for wrong in [
            None,
            Some(""),
            Some("0123456789abcdef-token"),
            Some("Basic 0123456789abcdef-token"),
            Some("Bearer 0123456789abcdef-toke"),
            Some("Bearer 0123456789abcdef-tokenX"),
            Some("Bearer 0123456789abcdef-tokeN"),
        ] {
            assert!(!token.authorizes(wrong), "{wrong:?}");
        }
        assert_eq!(format!("{token:?}"), "ControlToken(***)");
        assert!(ControlToken::new("short").is_err());
        assert!(ControlToken::new("0123456789 abcdef").is_err());
    }

    #[test]
    fn limits_name_the_bad_field() {
        assert!(ListenerConfig::default().validate().is_ok());
        let zero = ListenerConfig {
            max_connections: 0,
            ..ListenerConfig::default()
        };
        assert_eq!(zero.validate().unwrap_err().field, "max_connections");
        let no_header_time = ListenerConfig {
            header_read_timeout: Duration::ZERO,
            ..ListenerConfig::default()
        };
        assert_eq!(
            no_header_time.validate().unwrap_err().field,
            "header_read_timeout"
        );
    }
}
