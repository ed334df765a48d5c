//! `/ui/login` and `/ui/logout`: the login form (its CSRF value one this process issued),
//! the token it checks (wrong ones make their address wait), the session it opens, and
//! its end.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{RawQuery, Request, State};
use axum::http::header::{COOKIE, HOST, ORIGIN};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::html::{self, error_page, esc};
use super::session::{self, LOGIN_COOKIE, SESSION_COOKIE, SESSION_TTL};
use super::{add_cookie, header, may_change, redirect, secure_cookies, Form, Routes};
use crate::http::access::peer_of;

/// Where a login goes next: a path under `/ui` only, never another site.
pub(super) fn next_page(next: Option<&str>) -> &str {
    next.filter(|next| next.starts_with("/ui/") && !next.starts_with("//") && !next.contains('\\'))
        .unwrap_or("/ui/lanes")
}

/// The login form: its double-submit value is one the server chose and remembers
/// ([`Sessions::issue_login`]), in the form and in a cookie.
fn login_form(routes: &Routes, headers: &HeaderMap, next: &str, message: Option<&str>) -> Response {
    let nonce = routes.access.sessions().issue_login(Instant::now());
    let alert = message.map_or(String::new(), |message| {
        format!("<p class=\"error\" role=\"alert\">{}</p>", esc(message))
    });
    let body = format!(
        "{alert}<form method=\"post\" action=\"/ui/login\" class=\"search\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{nonce}\">\
         <input type=\"hidden\" name=\"next\" value=\"{next}\">\
         <label>Control token <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"current-password\" required autofocus></label>\
         <button type=\"submit\" class=\"primary\">Log in</button></form>\
         <p class=\"muted\">The listener's control token (<code>listener.token_env</code> or \
         <code>token_file</code>). It opens a session for this browser; the token itself is not stored.</p>",
        nonce = esc(&nonce),
        next = esc(next),
    );
    let mut response = html::page(
        &html::Frame {
            title: "Log in",
            nav: html::Nav::None,
            csrf: None,
        },
        &body,
    );
    if message.is_some() {
        *response.status_mut() = StatusCode::UNAUTHORIZED;
    }
    add_cookie(
        &mut response,
        LOGIN_COOKIE,
        &nonce,
        Some(session::LOGIN_TTL),
        secure_cookies(routes, headers),
    );
    response
}

pub(super) async fn page(
    State(routes): State<Routes>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if routes.access.tokens.current().is_none() {
        return html::page(
            &html::Frame {
                title: "Log in",
                nav: html::Nav::None,
                csrf: None,
            },
            "<p>This listener has no control token: the lanes page is open, the pages that show \
             messages and every change are off. Set <code>listener.token_env</code> or \
             <code>token_file</code> to use them.</p>\
             <p><a href=\"/ui/lanes\">Go to the lanes</a></p>",
        );
    }
    let form = Form::parse(query.unwrap_or_default().as_bytes());
    login_form(&routes, &headers, next_page(form.get("next")), None)
}

pub(super) async fn submit(State(routes): State<Routes>, request: Request) -> Response {
    let peer = peer_of(&request);
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    if !session::origin_matches(header(&headers, ORIGIN), header(&headers, HOST)) {
        return error_page(
            StatusCode::FORBIDDEN,
            "this form was sent from another site",
        );
    }
    let Some(token) = routes.access.tokens.current() else {
        return error_page(
            StatusCode::FORBIDDEN,
            "this listener has no control token: there is nothing to log in with",
        );
    };
    if let Err(wait) = routes.access.admit(peer) {
        return wait.into_page();
    }
    let Ok(body) = axum::body::to_bytes(body, crate::http::MAX_BODY_BYTES).await else {
        return error_page(StatusCode::PAYLOAD_TOO_LARGE, "the login form is too large");
    };
    let form = Form::parse(&body);
    let next = next_page(form.get("next")).to_owned();
    // Double submit: the nonce in the form is the one in the cookie, and one this process
    // issued (an attacker cannot choose it), used once.
    let cookie =
        header(&headers, COOKIE).and_then(|cookies| session::cookie(cookies, LOGIN_COOKIE));
    let nonce_ok = match (cookie, form.get("csrf")) {
        (Some(cookie), Some(field)) => {
            session::same_secret(cookie, field)
                && routes.access.sessions().take_login(field, Instant::now())
        }
        _ => false,
    };
    if !nonce_ok {
        return error_page(
            StatusCode::FORBIDDEN,
            "the login form's CSRF token is missing or stale: open the login page again",
        );
    }
    let presented = form.get("token").map(|token| format!("Bearer {token}"));
    if !token.authorizes(presented.as_deref()) {
        routes.access.failed(peer, "UI login");
        return login_form(
            &routes,
            &headers,
            &next,
            Some("That is not the listener's token."),
        );
    }
    routes.access.succeeded(peer);
    let id = routes.access.sessions().open(Instant::now());
    let secure = secure_cookies(&routes, &headers);
    let mut response = redirect(&next);
    add_cookie(
        &mut response,
        SESSION_COOKIE,
        &id,
        Some(SESSION_TTL),
        secure,
    );
    add_cookie(&mut response, LOGIN_COOKIE, "", None, secure);
    response
}

/// `POST /ui/logout` (the session checked already, before the form was read).
pub(super) async fn logout(
    State(routes): State<Routes>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (id, session) = match may_change(&routes, &headers, false) {
        Ok(session) => session,
        Err(refused) => return refused,
    };
    let form = Form::parse(&body);
    if !form
        .get("csrf")
        .is_some_and(|csrf| session::same_secret(&session.csrf, csrf))
    {
        return error_page(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale",
        );
    }
    routes.access.sessions().close(&id);
    let mut response = redirect("/ui/login");
    add_cookie(
        &mut response,
        SESSION_COOKIE,
        "",
        None,
        secure_cookies(&routes, &headers),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_only_goes_on_to_a_ui_page() {
        assert_eq!(next_page(Some("/ui/messages?key=a")), "/ui/messages?key=a");
        for next in [
            None,
            Some("https://evil.example/"),
            Some("//evil.example"),
            Some("/ui\\x"),
            Some("/metrics"),
        ] {
            assert_eq!(next_page(next), "/ui/lanes", "{next:?}");
        }
    }
}
