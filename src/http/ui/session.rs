//! Who may use the UI: the sessions a login opens, the CSRF token of each, and the Host
//! check. Pure: no I/O, no clock of its own (callers pass `Instant`s), unit-tested.
//!
//! - **Login.** The operator types the listener's control token once; the answer sets a
//!   random session id in an `HttpOnly`, `SameSite=Strict` cookie ([`SESSION_COOKIE`]).
//!   The token itself never goes into a cookie, so a cookie that leaks (a browser profile,
//!   a proxy log) is worth a session, which expires ([`SESSION_TTL`]) and is forgotten
//!   when the process restarts, not the token.
//! - **CSRF.** Each session has its own random CSRF token, written into every form; a
//!   POST whose `csrf` field differs is refused. `SameSite=Strict` alone already keeps the
//!   cookie off cross-site requests; the token also covers browsers that ignore it and
//!   same-site pages (another port on the host).
//! - **Host.** A page on an attacker's domain that resolves to the relay's address (DNS
//!   rebinding) reaches the listener with its own name in `Host`: only IP literals,
//!   `localhost` and the names the listener was given are served.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "outbox_ui_session";
/// The cookie of the login form's CSRF token (double submit: there is no session yet).
pub(crate) const LOGIN_COOKIE: &str = "outbox_ui_login";
/// How long a session lasts after its login.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// The most sessions kept at once; a new login past it forgets the oldest. Bounds what a
/// caller with the token can make the process hold.
pub(crate) const MAX_SESSIONS: usize = 256;

/// A random secret: 244 bits from two UUID v4s, as 64 hex digits.
pub(crate) fn secret() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

/// Compares two secrets in time independent of where they differ.
pub(crate) fn same_secret(expected: &str, presented: &str) -> bool {
    let (expected, presented) = (expected.as_bytes(), presented.as_bytes());
    let differences = expected
        .iter()
        .zip(presented)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    differences == 0 && expected.len() == presented.len()
}

/// One logged-in browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    /// What its forms carry.
    pub(crate) csrf: String,
    opened: Instant,
}

/// The open sessions, by id.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    open: HashMap<String, Session>,
}

impl Sessions {
    /// Opens a session at `now`: its id (the cookie's value).
    pub(crate) fn open(&mut self, now: Instant) -> String {
        self.open
            .retain(|_, session| now.duration_since(session.opened) < SESSION_TTL);
        while self.open.len() >= MAX_SESSIONS {
            let Some(oldest) = self
                .open
                .iter()
                .min_by_key(|(_, session)| session.opened)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            self.open.remove(&oldest);
        }
        let id = secret();
        self.open.insert(
            id.clone(),
            Session {
                csrf: secret(),
                opened: now,
            },
        );
        id
    }

    /// The session `id` names, if open and not expired at `now`.
    pub(crate) fn get(&self, id: &str, now: Instant) -> Option<Session> {
        self.open
            .get(id)
            .filter(|session| now.duration_since(session.opened) < SESSION_TTL)
            .cloned()
    }

    /// Ends the session `id`.
    pub(crate) fn close(&mut self, id: &str) {
        self.open.remove(id);
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub(crate) fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, scoped to `/ui`; `max_age`
/// `None` deletes it.
pub(crate) fn set_cookie(name: &str, value: &str, max_age: Option<Duration>) -> String {
    let age = max_age.map_or(0, |age| age.as_secs());
    format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={age}")
}

/// Whether a request's `Host` header is one the UI serves: an IP literal, `localhost`, or
/// one of `allowed` (names compared without case, the port ignored).
pub(crate) fn host_allowed(host: Option<&str>, allowed: &[String]) -> bool {
    let Some(host) = host.map(str::trim).filter(|host| !host.is_empty()) else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        match rest.split_once(']') {
            Some((v6, _)) => return v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => return false,
        }
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(host, |(name, _)| name)
    };
    name.parse::<IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// Whether an `Origin` header (browsers send it with every POST) is the page's own host:
/// `http(s)://<host>`. A missing one passes: old browsers and non-browser clients omit it,
/// and the CSRF token still holds.
pub(crate) fn origin_matches(origin: Option<&str>, host: Option<&str>) -> bool {
    let Some(origin) = origin else { return true };
    let Some(host) = host else { return false };
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_has_its_own_csrf_token_and_expires() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        let a = sessions.open(start);
        let b = sessions.open(start);
        assert_ne!(a, b);
        let (sa, sb) = (
            sessions.get(&a, start).unwrap(),
            sessions.get(&b, start).unwrap(),
        );
        assert_ne!(sa.csrf, sb.csrf);
        assert_eq!(sa.csrf.len(), 64);
        assert!(sessions.get("nope", start).is_none());
        assert!(sessions.get(&a, start + SESSION_TTL).is_none());
        sessions.close(&b);
        assert!(sessions.get(&b, start).is_none());
    }

    #[test]
    fn sessions_past_the_cap_forget_the_oldest() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        let first = sessions.open(start);
        for i in 1..=MAX_SESSIONS {
            sessions.open(start + Duration::from_millis(i as u64));
        }
        assert_eq!(sessions.open.len(), MAX_SESSIONS);
        assert!(sessions.get(&first, start).is_none());
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("abc", ""));
    }

    #[test]
    fn cookies_are_read_by_name() {
        let header = "a=1; outbox_ui_session=xyz; b=2";
        assert_eq!(cookie(header, SESSION_COOKIE), Some("xyz"));
        assert_eq!(cookie(header, "c"), None);
        let set = set_cookie(SESSION_COOKIE, "xyz", Some(SESSION_TTL));
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(set_cookie(SESSION_COOKIE, "", None).contains("Max-Age=0"));
    }

    #[test]
    fn only_ip_literals_localhost_and_named_hosts_are_served() {
        let named = vec!["relay.internal".to_owned()];
        for host in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "[::1]:9464",
            "localhost:9464",
            "LOCALHOST",
            "10.0.0.7",
            "relay.internal:9464",
        ] {
            assert!(host_allowed(Some(host), &named), "{host}");
        }
        for host in [
            "evil.example:9464",
            "evil.example",
            "",
            "[zz]:1",
            "127.0.0.1.evil.example",
        ] {
            assert!(!host_allowed(Some(host), &named), "{host}");
        }
        assert!(!host_allowed(None, &named));
    }

    #[test]
    fn an_origin_must_be_the_pages_host() {
        let host = Some("127.0.0.1:9464");
        assert!(origin_matches(None, host));
        assert!(origin_matches(Some("http://127.0.0.1:9464"), host));
        assert!(!origin_matches(Some("http://evil.example"), host));
        assert!(!origin_matches(Some("null"), host));
    }
}
