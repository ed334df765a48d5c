//! Who may use the UI: the sessions a login opens, the CSRF token of each, and the login
//! form's own. Pure: no I/O, no clock of its own (callers pass `Instant`s), unit-tested.
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
//! - **The login form** has no session yet: its CSRF value is double-submitted (a cookie
//!   and a form field that must agree), and it must be one this process issued and has not
//!   seen used ([`Sessions::issue_login`]), so an attacker who can set a cookie (a sibling
//!   subdomain) still cannot choose it.
//! - The `Host` check is the router's, for the API and the UI alike (`http::access`).

use std::collections::HashMap;
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
/// How long a login form's CSRF value stays good.
pub(crate) const LOGIN_TTL: Duration = Duration::from_secs(60 * 60);
/// The most login forms' values kept at once; past it the oldest is forgotten (anyone may
/// open the login page, so this bounds what they can make the process hold).
pub(crate) const MAX_LOGINS: usize = 1024;

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

/// The open sessions, by id, and the login forms' values, with when each was issued.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    open: HashMap<String, Session>,
    logins: HashMap<String, Instant>,
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

    /// A login form's CSRF value, issued at `now`, good once within [`LOGIN_TTL`].
    pub(crate) fn issue_login(&mut self, now: Instant) -> String {
        self.logins
            .retain(|_, issued| now.duration_since(*issued) < LOGIN_TTL);
        while self.logins.len() >= MAX_LOGINS {
            let Some(oldest) = self
                .logins
                .iter()
                .min_by_key(|(_, issued)| **issued)
                .map(|(value, _)| value.clone())
            else {
                break;
            };
            self.logins.remove(&oldest);
        }
        let value = secret();
        self.logins.insert(value.clone(), now);
        value
    }

    /// Whether `value` is a login form's value this process issued, within [`LOGIN_TTL`]
    /// of `now` and not used before; it is used up either way.
    pub(crate) fn take_login(&mut self, value: &str, now: Instant) -> bool {
        self.logins
            .remove(value)
            .is_some_and(|issued| now.duration_since(issued) < LOGIN_TTL)
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

/// A `Set-Cookie` value: `HttpOnly`, `SameSite=Strict`, scoped to `/ui`, `Secure` when
/// `secure` (the UI is served over TLS); `max_age` `None` deletes it.
pub(crate) fn set_cookie(
    name: &str,
    value: &str,
    max_age: Option<Duration>,
    secure: bool,
) -> String {
    let age = max_age.map_or(0, |age| age.as_secs());
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={age}{secure}")
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
        let set = set_cookie(SESSION_COOKIE, "xyz", Some(SESSION_TTL), false);
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict") && !set.contains("Secure"),
            "{set}"
        );
        assert!(set_cookie(SESSION_COOKIE, "", None, false).contains("Max-Age=0"));
        assert!(set_cookie(SESSION_COOKIE, "xyz", Some(SESSION_TTL), true).ends_with("; Secure"));
    }

    #[test]
    fn a_login_value_is_one_this_process_issued_used_once() {
        let start = Instant::now();
        let mut sessions = Sessions::default();
        let issued = sessions.issue_login(start);
        assert!(!sessions.take_login("attacker-chosen-value", start));
        assert!(sessions.take_login(&issued, start));
        assert!(!sessions.take_login(&issued, start), "used once");
        let stale = sessions.issue_login(start);
        assert!(!sessions.take_login(&stale, start + LOGIN_TTL));
        let first = sessions.issue_login(start);
        for i in 1..=MAX_LOGINS {
            sessions.issue_login(start + Duration::from_millis(i as u64));
        }
        assert!(sessions.logins.len() <= MAX_LOGINS);
        assert!(
            !sessions.take_login(&first, start),
            "the oldest was forgotten"
        );
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
