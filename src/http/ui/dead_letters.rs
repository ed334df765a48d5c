//! `/ui/dead-letters`: filter, select, then requeue or discard in bulk, each through a
//! confirmation page that shows how many it will change (the store's dry-run count, as
//! `POST /api/v1/dead-letters/…` with `dry_run`); `/ui/blocked-keys`: the keys a dead head
//! holds, with the actions that free each.

use std::fmt::Write as _;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use uuid::Uuid;

use super::super::messages::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use super::html::{self, csrf_field, esc, lane_select, notice, url};
use super::messages::{dead_letter_actions, lane_names, message_table};
use super::{lane_target, message_reader, with_relay, writer, Form, Routes};
use crate::message::OutboxStatus;
use crate::store::{BlockedKeys, MessageFilter, Page, PageRequest};

/// How many blocked keys one page lists.
const BLOCKED_KEYS_PAGE: usize = 50;

/// `GET /ui/dead-letters?lane_target=&key=&after=`.
pub(super) async fn page(
    State(routes): State<Routes>,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(query): RawQuery,
) -> Response {
    let reader = match message_reader(&routes, &headers, &uri) {
        Ok(reader) => reader,
        Err(refused) => return refused,
    };
    let query = Form::parse(query.unwrap_or_default().as_bytes());
    let lanes = match lane_names(&routes).await {
        Ok(lanes) => lanes,
        Err(error) => return error,
    };
    let lane = lane_target(query.get("lane_target"));
    let key = query.get("key").map(str::to_owned);
    let after = match query.get("after").map(str::parse::<i64>) {
        None => None,
        Some(Ok(after)) => Some(after),
        Some(Err(_)) => {
            return html::error_page(StatusCode::BAD_REQUEST, "after: not a page cursor")
        }
    };
    let mut body = String::from(
        "<form method=\"get\" action=\"/ui/dead-letters\" class=\"search\" role=\"search\">",
    );
    body.push_str(&lane_select(
        &lanes,
        lane.as_ref().map(|(l, t)| (l.as_str(), t.as_str())),
    ));
    let _ = write!(
        body,
        "<label>Ordering key <input type=\"text\" name=\"key\" value=\"{}\"></label>\
         <button type=\"submit\" class=\"primary\">Filter</button></form>",
        esc(key.as_deref().unwrap_or(""))
    );
    let Some((lane_name, target)) = lane else {
        body.push_str("<p class=\"muted\">Choose a lane.</p>");
        return html::page(
            &html::Frame {
                title: "Dead letters",
                nav: html::Nav::DeadLetters,
                csrf: reader.csrf.as_deref(),
            },
            &body,
        );
    };
    let filter = MessageFilter {
        lane: Some(lane_name.clone()),
        target: Some(target.clone()),
        status: Some(OutboxStatus::DeadLetter),
        ordering_key: key.clone(),
        ..Default::default()
    };
    let page = PageRequest {
        after,
        limit: DEFAULT_PAGE_SIZE,
    };
    let found: Result<Page, Response> = with_relay(&routes, move |running| async move {
        Ok(running.store.list(&filter, page).await?)
    })
    .await;
    let found = match found {
        Ok(found) => found,
        Err(error) => return error,
    };
    let name = format!("{lane_name}/{target}");
    if let Some(csrf) = reader.csrf.as_deref() {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"/ui/dead-letters/confirm\">{}\
             <input type=\"hidden\" name=\"lane_target\" value=\"{}\">",
            csrf_field(csrf),
            esc(&name)
        );
        if let Some(key) = &key {
            let _ = write!(
                body,
                "<input type=\"hidden\" name=\"key\" value=\"{}\">",
                esc(key)
            );
        }
        body.push_str(
            "<div class=\"actions\">\
             <button type=\"submit\" name=\"op\" value=\"requeue-selected\">Requeue selected</button>\
             <button type=\"submit\" name=\"op\" value=\"discard-selected\" class=\"danger\">Discard selected</button>\
             <button type=\"submit\" name=\"op\" value=\"requeue-matching\">Requeue all matching…</button>\
             <button type=\"submit\" name=\"op\" value=\"discard-matching\" class=\"danger\">Discard all matching…</button></div>",
        );
        message_table(&mut body, &found.messages, true);
        body.push_str("</form>");
    } else {
        message_table(&mut body, &found.messages, false);
    }
    if let Some(next) = found.next_cursor {
        let mut link = format!("/ui/dead-letters?after={next}&lane_target={}", url(&name));
        if let Some(key) = &key {
            let _ = write!(link, "&key={}", url(key));
        }
        let _ = write!(
            body,
            "<p class=\"pager\"><a href=\"{}\" rel=\"next\">Next page</a></p>",
            esc(&link)
        );
    }
    html::page(
        &html::Frame {
            title: "Dead letters",
            nav: html::Nav::DeadLetters,
            csrf: reader.csrf.as_deref(),
        },
        &body,
    )
}

/// A bulk action as a form asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bulk {
    requeue: bool,
    /// The dead letters it acts on (`status` is always dead letter).
    filter: MessageFilter,
    /// In words, for the confirmation and the result.
    scope: String,
}

/// Reads `op` (`requeue|discard` + `-selected|-matching`), the ids or the lane filter.
fn bulk_of(form: &Form) -> Result<Bulk, String> {
    let (requeue, matching) = match form.get("op") {
        Some("requeue-selected") => (true, false),
        Some("discard-selected") => (false, false),
        Some("requeue-matching") => (true, true),
        Some("discard-matching") => (false, true),
        other => {
            return Err(format!(
                "op: requeue or discard, selected or matching, not {other:?}"
            ))
        }
    };
    let filter = if matching {
        let Some((lane, target)) = lane_target(form.get("lane_target")) else {
            return Err("lane_target: a bulk action by filter needs a lane: none would touch every dead letter".to_owned());
        };
        MessageFilter {
            lane: Some(lane),
            target: Some(target),
            ordering_key: form.get("key").map(str::to_owned),
            status: Some(OutboxStatus::DeadLetter),
            ..Default::default()
        }
    } else {
        let ids = form
            .all("id")
            .map(|id| {
                id.parse::<Uuid>()
                    .map_err(|_| format!("id: {id:?} is not a message id"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ids.is_empty() {
            return Err("nothing selected: tick the dead letters to act on".to_owned());
        }
        if ids.len() > MAX_PAGE_SIZE {
            return Err(format!("id: at most {MAX_PAGE_SIZE} at once"));
        }
        MessageFilter {
            ids,
            status: Some(OutboxStatus::DeadLetter),
            ..Default::default()
        }
    };
    let scope = match (&filter.lane, &filter.target, &filter.ordering_key) {
        (Some(lane), Some(target), Some(key)) => format!("of {lane}/{target} with key {key:?}"),
        (Some(lane), Some(target), None) => format!("of {lane}/{target}"),
        _ => "selected".to_owned(),
    };
    Ok(Bulk {
        requeue,
        filter,
        scope,
    })
}

/// The form fields that say the same bulk action again.
fn bulk_fields(form: &Form) -> String {
    let mut fields = String::new();
    for name in ["op", "lane_target", "key"] {
        if let Some(value) = form.get(name) {
            let _ = write!(
                fields,
                "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
                esc(value)
            );
        }
    }
    if form.get("op").is_some_and(|op| op.ends_with("-selected")) {
        for id in form.all("id") {
            let _ = write!(
                fields,
                "<input type=\"hidden\" name=\"id\" value=\"{}\">",
                esc(id)
            );
        }
    }
    fields
}

fn verb(requeue: bool) -> &'static str {
    if requeue {
        "Requeue"
    } else {
        "Discard"
    }
}

/// `POST /ui/dead-letters/confirm`: counts what the action would change and asks.
pub(super) async fn confirm(
    State(routes): State<Routes>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (form, csrf) = match writer(&routes, &headers, &body) {
        Ok(allowed) => allowed,
        Err(refused) => return refused,
    };
    let bulk = match bulk_of(&form) {
        Ok(bulk) => bulk,
        Err(error) => return html::error_page(StatusCode::BAD_REQUEST, &error),
    };
    let filter = bulk.filter.clone();
    let counted = with_relay(&routes, move |running| async move {
        Ok(running.store.count_dead_letters(&filter).await?)
    })
    .await;
    let count = match counted {
        Ok(count) => count,
        Err(error) => return error,
    };
    let verb = verb(bulk.requeue);
    let mut page = String::new();
    if count == 0 {
        let _ = write!(
            page,
            "<p role=\"alert\" class=\"error\">No dead letter {} is left: nothing to {}.</p>\
             <p><a href=\"/ui/dead-letters\">Back to the dead letters</a></p>",
            esc(&bulk.scope),
            verb.to_lowercase()
        );
    } else {
        let effect = if bulk.requeue {
            "They go back to pending, due now, with their attempts reset."
        } else {
            "They are deleted for good."
        };
        let _ = write!(
            page,
            "<p role=\"alert\" id=\"confirm-count\" data-count=\"{count}\">{verb} <strong>{count}</strong> dead letter{s} {}? {effect}</p>\
             <form method=\"post\" action=\"/ui/dead-letters/apply\" class=\"actions\">{}{}\
             <input type=\"hidden\" name=\"expected\" value=\"{count}\">\
             <button type=\"submit\" class=\"{class}\" autofocus>{verb} {count}</button>\
             <a href=\"/ui/dead-letters\">Cancel</a></form>",
            esc(&bulk.scope),
            csrf_field(&csrf),
            bulk_fields(&form),
            s = if count == 1 { "" } else { "s" },
            class = if bulk.requeue { "primary" } else { "danger" },
        );
    }
    html::page(
        &html::Frame {
            title: "Confirm",
            nav: html::Nav::DeadLetters,
            csrf: Some(&csrf),
        },
        &page,
    )
}

/// `POST /ui/dead-letters/apply`: carries the confirmed action out and says how many it
/// changed.
pub(super) async fn apply(
    State(routes): State<Routes>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (form, csrf) = match writer(&routes, &headers, &body) {
        Ok(allowed) => allowed,
        Err(refused) => return refused,
    };
    let bulk = match bulk_of(&form) {
        Ok(bulk) => bulk,
        Err(error) => return html::error_page(StatusCode::BAD_REQUEST, &error),
    };
    let filter = bulk.filter.clone();
    let requeue = bulk.requeue;
    let done = with_relay(&routes, move |running| async move {
        Ok(if requeue {
            running.store.requeue_dead_letters(&filter).await?
        } else {
            running.store.discard_dead_letters(&filter).await?
        })
    })
    .await;
    let count = match done {
        Ok(count) => count,
        Err(error) => return error,
    };
    let done = if requeue { "Requeued" } else { "Discarded" };
    let mut text = format!(
        "{done} {count} dead letter{}",
        if count == 1 { "" } else { "s" }
    );
    if let Some(expected) = form.get("expected").and_then(|e| e.parse::<u64>().ok()) {
        if expected != count {
            let _ = write!(
                text,
                " ({expected} were counted when you confirmed: the rest changed meanwhile)"
            );
        }
    }
    text.push('.');
    let back = match lane_target(form.get("lane_target")) {
        Some((lane, target)) => format!(
            "/ui/dead-letters?lane_target={}",
            url(&format!("{lane}/{target}"))
        ),
        None => "/ui/dead-letters".to_owned(),
    };
    let body = format!(
        "<div id=\"result\" data-count=\"{count}\">{}</div><p><a href=\"{}\">Back to the dead letters</a> · <a href=\"/ui/lanes\">Lanes</a></p>",
        notice(&text),
        esc(&back)
    );
    html::page(
        &html::Frame {
            title: done,
            nav: html::Nav::DeadLetters,
            csrf: Some(&csrf),
        },
        &body,
    )
}

/// `GET /ui/blocked-keys?lane_target=&after=`.
pub(super) async fn blocked_keys(
    State(routes): State<Routes>,
    headers: HeaderMap,
    uri: Uri,
    RawQuery(query): RawQuery,
) -> Response {
    let reader = match message_reader(&routes, &headers, &uri) {
        Ok(reader) => reader,
        Err(refused) => return refused,
    };
    let query = Form::parse(query.unwrap_or_default().as_bytes());
    let lanes = match lane_names(&routes).await {
        Ok(lanes) => lanes,
        Err(error) => return error,
    };
    let chosen = lane_target(query.get("lane_target"));
    let after = query
        .get("after")
        .and_then(|after| after.parse::<i64>().ok());
    let mut body = String::from(
        "<p class=\"muted\">Keys whose earliest dead letter comes before their head. A lane under \
         <code>OrderingPolicy::Block</code> holds each until its dead head is requeued or discarded; \
         a lane under <code>Skip</code> delivers past it.</p>\
         <form method=\"get\" action=\"/ui/blocked-keys\" class=\"search\" role=\"search\">",
    );
    body.push_str(&lane_select(
        &lanes,
        chosen.as_ref().map(|(l, t)| (l.as_str(), t.as_str())),
    ));
    body.push_str("<button type=\"submit\" class=\"primary\">Show</button></form>");
    let Some((lane, target)) = chosen else {
        body.push_str("<p class=\"muted\">Choose a lane.</p>");
        return html::page(
            &html::Frame {
                title: "Blocked keys",
                nav: html::Nav::BlockedKeys,
                csrf: reader.csrf.as_deref(),
            },
            &body,
        );
    };
    let (l, t) = (lane.clone(), target.clone());
    let found: Result<BlockedKeys, Response> = with_relay(&routes, move |running| async move {
        Ok(running
            .store
            .blocked_keys(&l, &t, after, BLOCKED_KEYS_PAGE)
            .await?)
    })
    .await;
    let found = match found {
        Ok(found) => found,
        Err(error) => return error,
    };
    body.push_str(
        "<table id=\"blocked-keys\"><thead><tr><th scope=\"col\">Key</th><th scope=\"col\">Dead head</th>\
         <th scope=\"col\">Its last error</th><th scope=\"col\">Holds back</th><th scope=\"col\">Action</th></tr></thead><tbody>",
    );
    for key in &found.keys {
        let _ = write!(
            body,
            "<tr data-key=\"{k}\"><th scope=\"row\">{k}</th><td><a class=\"mono\" href=\"/ui/messages/{d}\">{d}</a></td>\
             <td>{e}</td><td><a class=\"mono\" href=\"/ui/messages/{h}\">{h}</a> <span class=\"muted\">{s}</span></td><td>",
            k = esc(&key.ordering_key),
            d = key.dead_head.outbox_id,
            e = esc(key.dead_head.last_error.as_deref().unwrap_or("")),
            h = key.held.outbox_id,
            s = key.held.status.as_str(),
        );
        match reader.csrf.as_deref() {
            Some(csrf) => dead_letter_actions(&mut body, csrf, &[key.dead_head.outbox_id]),
            None => body.push_str("<span class=\"muted\">log in to act</span>"),
        }
        body.push_str("</td></tr>");
    }
    body.push_str("</tbody></table>");
    if found.keys.is_empty() {
        body.push_str("<p class=\"muted\">No key of this lane is held by a dead letter.</p>");
    }
    if let Some(next) = found.next_cursor {
        let _ = write!(
            body,
            "<p class=\"pager\"><a href=\"/ui/blocked-keys?lane_target={}&amp;after={next}\" rel=\"next\">Next page</a></p>",
            url(&format!("{lane}/{target}"))
        );
    }
    html::page(
        &html::Frame {
            title: "Blocked keys",
            nav: html::Nav::BlockedKeys,
            csrf: reader.csrf.as_deref(),
        },
        &body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(text: &str) -> Form {
        Form::parse(text.as_bytes())
    }

    #[test]
    fn a_bulk_action_by_filter_needs_a_lane_and_by_selection_an_id() {
        let by_filter = bulk_of(&form(
            "op=discard-matching&lane_target=orders%2Faudit&key=c1",
        ))
        .unwrap();
        assert!(!by_filter.requeue);
        assert_eq!(by_filter.filter.lane.as_deref(), Some("orders"));
        assert_eq!(by_filter.filter.ordering_key.as_deref(), Some("c1"));
        assert_eq!(by_filter.filter.status, Some(OutboxStatus::DeadLetter));
        let id = Uuid::nil();
        let selected = bulk_of(&form(&format!("op=requeue-selected&id={id}&id={id}"))).unwrap();
        assert!(selected.requeue);
        assert_eq!(selected.filter.ids, vec![id, id]);
        assert_eq!(selected.filter.lane, None);
        for (text, says) in [
            ("op=discard-matching", "needs a lane"),
            ("op=requeue-selected", "nothing selected"),
            ("op=requeue-selected&id=nope", "not a message id"),
            ("op=delete-everything", "op:"),
            ("", "op:"),
        ] {
            let error = bulk_of(&form(text)).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn the_confirmation_carries_the_same_action_again() {
        let fields = bulk_fields(&form("op=requeue-selected&id=a&id=b&csrf=x"));
        assert_eq!(fields.matches("name=\"id\"").count(), 2, "{fields}");
        assert!(!fields.contains("csrf"), "{fields}");
        let fields = bulk_fields(&form("op=discard-matching&lane_target=o%2Fa&id=a"));
        assert!(fields.contains("value=\"o/a\""), "{fields}");
        assert!(
            !fields.contains("name=\"id\""),
            "ids do not widen a filter: {fields}"
        );
    }
}
