//! HTML helpers: escaping, the page frame (navigation, the logout form, the theme), and
//! the small pieces several pages share. Pages are built as strings: a few hundred lines
//! of markup do not need a template engine, and every value goes through [`esc`].

use std::fmt::Write as _;
use std::time::Duration;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Escapes text for HTML element content and quoted attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a query-string or path component.
pub(crate) fn url(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A duration as an operator reads it: `950 ms`, `42 s`, `7 min`, `3 h`, `2 d`.
pub(crate) fn age(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0 => format!("{} ms", duration.as_millis()),
        1..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        7200..=172_799 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// The pages, for the navigation's current marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Lanes,
    Messages,
    DeadLetters,
    BlockedKeys,
    None,
}

/// What the frame needs besides the body.
#[derive(Debug)]
pub(crate) struct Frame<'a> {
    pub(crate) title: &'a str,
    pub(crate) nav: Nav,
    /// The session's CSRF token, for the logout form; `None` without a session.
    pub(crate) csrf: Option<&'a str>,
}

/// A whole page: the frame around `body`.
pub(crate) fn page(frame: &Frame<'_>, body: &str) -> Response {
    let mut html = String::with_capacity(body.len() + 2048);
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\">\
         <title>{} · outbox-relay</title>\
         <link rel=\"stylesheet\" href=\"/ui/assets/ui.css\">\
         <script src=\"/ui/assets/ui.js\" defer></script></head><body>\
         <a class=\"skip\" href=\"#main\">Skip to content</a><header><nav aria-label=\"Pages\"><ul>",
        esc(frame.title)
    );
    for (nav, href, label) in [
        (Nav::Lanes, "/ui/lanes", "Lanes"),
        (Nav::Messages, "/ui/messages", "Messages"),
        (Nav::DeadLetters, "/ui/dead-letters", "Dead letters"),
        (Nav::BlockedKeys, "/ui/blocked-keys", "Blocked keys"),
    ] {
        let current = if nav == frame.nav {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(html, "<li><a href=\"{href}\"{current}>{label}</a></li>");
    }
    html.push_str("</ul></nav>");
    if let Some(csrf) = frame.csrf {
        let _ = write!(
            html,
            "<form method=\"post\" action=\"/ui/logout\" class=\"logout\">{}<button type=\"submit\">Log out</button></form>",
            csrf_field(csrf)
        );
    }
    let _ = write!(
        html,
        "</header><main id=\"main\" tabindex=\"-1\"><h1>{}</h1>{body}</main></body></html>",
        esc(frame.title)
    );
    html_response(StatusCode::OK, html)
}

/// An HTML answer that no cache keeps (the pages show live state and the CSRF token).
pub(crate) fn html_response(status: StatusCode, html: String) -> Response {
    let mut response = (status, html).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Nothing of the UI is meant to be framed (clickjacking of the forms).
    headers.insert(
        axum::http::header::X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    );
    headers.insert(
        axum::http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    response
}

/// A short page that says what went wrong, with `status`.
pub(crate) fn error_page(status: StatusCode, message: &str) -> Response {
    html_response(
        status,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"color-scheme\" content=\"light dark\">\
             <title>{} · outbox-relay</title><link rel=\"stylesheet\" href=\"/ui/assets/ui.css\"></head>\
             <body><main id=\"main\"><h1>{}</h1><p class=\"error\" role=\"alert\">{}</p>\
             <p><a href=\"/ui/lanes\">Back to the lanes</a></p></main></body></html>",
            status.as_u16(),
            status,
            esc(message)
        ),
    )
}

/// The hidden CSRF field every form carries.
pub(crate) fn csrf_field(csrf: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    )
}

/// A notice at the top of a page (`role=status`, read out by screen readers).
pub(crate) fn notice(text: &str) -> String {
    format!("<p class=\"notice\" role=\"status\">{}</p>", esc(text))
}

/// A `<select>` of the lanes (`lane/target`), `selected` marked.
pub(crate) fn lane_select(lanes: &[(String, String)], selected: Option<(&str, &str)>) -> String {
    let mut html = String::from(
        "<label>Lane <select name=\"lane_target\" required><option value=\"\">choose…</option>",
    );
    for (lane, target) in lanes {
        let value = format!("{lane}/{target}");
        let mark = if selected == Some((lane.as_str(), target.as_str())) {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            html,
            "<option value=\"{}\"{mark}>{}</option>",
            esc(&value),
            esc(&value)
        );
    }
    html.push_str("</select></label>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_content_and_attributes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(url("a b&c/d"), "a+b%26c%2Fd");
    }

    #[test]
    fn ages_read_in_the_largest_sensible_unit() {
        assert_eq!(age(Duration::from_millis(950)), "950 ms");
        assert_eq!(age(Duration::from_secs(42)), "42 s");
        assert_eq!(age(Duration::from_secs(7 * 60)), "7 min");
        assert_eq!(age(Duration::from_secs(3 * 3600)), "3 h");
        assert_eq!(age(Duration::from_secs(3 * 86_400)), "3 d");
    }
}
