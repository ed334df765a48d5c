//! `/ui/messages`: search by id, ordering key, status and lane, a page at a time (keyset
//! paging on the enqueue sequence, as `GET /api/v1/messages`); `/ui/messages/{id}`: one
//! message and where its ordering key stands.

use std::fmt::Write as _;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use uuid::Uuid;

use super::super::api::ApiError;
use super::super::messages::DEFAULT_PAGE_SIZE;
use super::html::{self, csrf_field, esc, lane_select, url};
use super::{lane_target, message_reader, with_relay, Form, Routes};
use crate::message::{OutboxMessage, OutboxStatus};
use crate::store::{KeyState, MessageFilter, Page, PageRequest};
use crate::time::UnixMillis;

/// How many messages behind a key's head the message page lists.
const KEY_WAITING_SHOWN: usize = 10;

const STATUSES: [OutboxStatus; 4] = [
    OutboxStatus::Pending,
    OutboxStatus::Claimed,
    OutboxStatus::Delivered,
    OutboxStatus::DeadLetter,
];

/// The lanes this relay runs, for the lane selects.
pub(super) async fn lane_names(routes: &Routes) -> Result<Vec<(String, String)>, Response> {
    with_relay(routes, |running| async move {
        let lanes = running.relay.status().await.map_err(|error| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the relay does not answer: {error}"),
            )
        })?;
        Ok(lanes
            .into_iter()
            .map(|status| (status.lane.name, status.lane.target))
            .collect())
    })
    .await
}

/// A table of messages, each linked to its page.
pub(super) fn message_table(body: &mut String, messages: &[OutboxMessage], select: bool) {
    body.push_str("<table><thead><tr>");
    if select {
        body.push_str("<th scope=\"col\"><label><input type=\"checkbox\" data-select-all hidden aria-label=\"Select all\"></label></th>");
    }
    body.push_str(
        "<th scope=\"col\" class=\"num\">Seq</th><th scope=\"col\">Id</th><th scope=\"col\">Lane</th>\
         <th scope=\"col\">Key</th><th scope=\"col\">Status</th><th scope=\"col\" class=\"num\">Attempts</th>\
         <th scope=\"col\">Due</th><th scope=\"col\">Last error</th></tr></thead><tbody>",
    );
    for message in messages {
        let id = message.outbox_id.to_string();
        let _ = write!(body, "<tr data-id=\"{id}\">");
        if select {
            let _ = write!(
                body,
                "<td><input type=\"checkbox\" name=\"id\" value=\"{id}\" aria-label=\"Select {id}\"></td>"
            );
        }
        let error: String = message
            .last_error
            .as_deref()
            .unwrap_or("")
            .chars()
            .take(120)
            .collect();
        let _ = write!(
            body,
            "<td class=\"num\">{}</td><td><a class=\"mono\" href=\"/ui/messages/{id}\">{id}</a></td>\
             <td>{}/{}</td><td data-field=\"key\">{}</td><td data-field=\"status\">{}</td><td class=\"num\">{}/{}</td>\
             <td>{}</td><td>{}</td></tr>",
            message.seq,
            esc(&message.lane),
            esc(&message.target),
            esc(message.ordering_key.as_deref().unwrap_or("")),
            message.status.as_str(),
            message.attempt_count,
            message.max_attempts,
            esc(&message.available_at.to_string()),
            esc(&error),
        );
    }
    body.push_str("</tbody></table>");
    if messages.is_empty() {
        body.push_str("<p class=\"muted\">No messages match.</p>");
    }
}

/// `GET /ui/messages?lane_target=&status=&key=&id=&after=`.
pub(super) async fn search(
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
    let status = match query.get("status").map(str::parse::<OutboxStatus>) {
        None => None,
        Some(Ok(status)) => Some(status),
        Some(Err(_)) => {
            return html::error_page(
                StatusCode::BAD_REQUEST,
                "status: pending, claimed, delivered or dead_letter",
            )
        }
    };
    let id = match query.get("id").map(str::parse::<Uuid>) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => return html::error_page(StatusCode::BAD_REQUEST, "id: not a message id"),
    };
    let since = match instant_field(&query, "from") {
        Ok(at) => at,
        Err(refused) => return refused,
    };
    let until = match instant_field(&query, "until") {
        Ok(at) => at,
        Err(refused) => return refused,
    };
    let error = query
        .get("error")
        .filter(|text| !text.is_empty())
        .map(str::to_owned);
    let after = match query.get("after").map(str::parse::<i64>) {
        None => None,
        Some(Ok(after)) => Some(after),
        Some(Err(_)) => {
            return html::error_page(StatusCode::BAD_REQUEST, "after: not a page cursor")
        }
    };

    let mut body = String::from(
        "<form method=\"get\" action=\"/ui/messages\" class=\"search\" role=\"search\">",
    );
    body.push_str(&lane_select(
        &lanes,
        lane.as_ref().map(|(l, t)| (l.as_str(), t.as_str())),
    ));
    body.push_str("<label>Status <select name=\"status\"><option value=\"\">any</option>");
    for option in STATUSES {
        let mark = if status == Some(option) {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            body,
            "<option value=\"{0}\"{mark}>{0}</option>",
            option.as_str()
        );
    }
    let _ = write!(
        body,
        "</select></label><label>Ordering key <input type=\"text\" name=\"key\" value=\"{}\"></label>\
         <label>Enqueued from (UTC) <input type=\"datetime-local\" step=\"1\" name=\"from\" value=\"{}\"></label>\
         <label>until (UTC) <input type=\"datetime-local\" step=\"1\" name=\"until\" value=\"{}\"></label>\
         <label>Last error contains <input type=\"text\" name=\"error\" value=\"{}\"></label>\
         <button type=\"submit\" class=\"primary\">Search</button></form>\
         <form method=\"get\" action=\"/ui/messages\" class=\"search\" role=\"search\">\
         <label>Message id <input type=\"text\" name=\"id\" class=\"mono\" size=\"38\" value=\"{}\"></label>\
         <button type=\"submit\">Find</button></form>",
        esc(key.as_deref().unwrap_or("")),
        esc(query.get("from").unwrap_or("")),
        esc(query.get("until").unwrap_or("")),
        esc(error.as_deref().unwrap_or("")),
        id.map(|id| id.to_string()).unwrap_or_default(),
    );
    // A lane is required unless an id is given: every page reads one lane's index.
    let filter = match (&id, &lane) {
        (Some(id), _) => Some(MessageFilter {
            ids: vec![*id],
            ..Default::default()
        }),
        (None, Some((lane, target))) => Some(MessageFilter {
            lane: Some(lane.clone()),
            target: Some(target.clone()),
            status,
            ordering_key: key.clone(),
            enqueued_after: since.map(Into::into),
            enqueued_before: until.map(Into::into),
            error_contains: error.clone(),
            ..Default::default()
        }),
        (None, None) => None,
    };
    if let Some(filter) = filter {
        let page = PageRequest {
            after,
            limit: DEFAULT_PAGE_SIZE,
        };
        let found: Result<Page, Response> = with_relay(&routes, move |running| async move {
            Ok(running.store.list(&filter, page).await?)
        })
        .await;
        let page = match found {
            Ok(page) => page,
            Err(error) => return error,
        };
        message_table(&mut body, &page.messages, false);
        if let Some(next) = page.next_cursor {
            let mut link = format!("/ui/messages?after={next}");
            if let Some((l, t)) = &lane {
                let _ = write!(link, "&lane_target={}", url(&format!("{l}/{t}")));
            }
            if let Some(status) = status {
                let _ = write!(link, "&status={}", status.as_str());
            }
            if let Some(key) = &key {
                let _ = write!(link, "&key={}", url(key));
            }
            for name in ["from", "until", "error"] {
                if let Some(value) = query.get(name).filter(|v| !v.is_empty()) {
                    let _ = write!(link, "&{name}={}", url(value));
                }
            }
            let _ = write!(
                body,
                "<p class=\"pager\"><a href=\"{}\" rel=\"next\">Next page</a></p>",
                esc(&link)
            );
        }
    } else {
        body.push_str("<p class=\"muted\">Choose a lane, or give a message id.</p>");
    }
    html::page(
        &html::Frame {
            title: "Messages",
            nav: html::Nav::Messages,
            csrf: reader.csrf.as_deref(),
        },
        &body,
    )
}

/// The instant a `datetime-local` field (`2026-12-06T09:00`, seconds optional) or an
/// RFC 3339 value names, read as UTC; `None` when the field is empty or absent.
fn instant_field(query: &Form, name: &str) -> Result<Option<UnixMillis>, Response> {
    let Some(value) = query.get(name).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let rfc3339 = match value.len() {
        16 => format!("{value}:00Z"),
        _ if value.ends_with('Z') => value.to_owned(),
        _ => format!("{value}Z"),
    };
    rfc3339.parse::<UnixMillis>().map(Some).map_err(|_| {
        html::error_page(
            StatusCode::BAD_REQUEST,
            &format!("{name}: {value:?} is not a date and time (2026-12-06T09:00, UTC)"),
        )
    })
}

/// The trace id of a W3C `traceparent` header.
fn trace_id(message: &OutboxMessage) -> Option<&str> {
    let parent = message.headers.get("traceparent")?;
    parent.split('-').nth(1).filter(|id| id.len() == 32)
}

fn field(body: &mut String, name: &str, value: &str) {
    let _ = write!(body, "<dt>{name}</dt><dd>{value}</dd>");
}

fn opt(value: Option<String>) -> String {
    value.map_or("<span class=\"muted\">–</span>".to_owned(), |v| esc(&v))
}

fn link(message: &OutboxMessage) -> String {
    format!(
        "<a class=\"mono\" href=\"/ui/messages/{0}\">{0}</a> <span class=\"muted\">seq {1}, {2}</span>",
        message.outbox_id,
        message.seq,
        message.status.as_str()
    )
}

/// The dead letter actions of one message (requeue, discard), through the confirmation.
pub(super) fn dead_letter_actions(body: &mut String, csrf: &str, ids: &[Uuid]) {
    let _ = write!(
        body,
        "<form method=\"post\" action=\"/ui/dead-letters/confirm\" class=\"inline\">{}",
        csrf_field(csrf)
    );
    for id in ids {
        let _ = write!(body, "<input type=\"hidden\" name=\"id\" value=\"{id}\">");
    }
    body.push_str(
        "<button type=\"submit\" name=\"op\" value=\"requeue-selected\">Requeue</button>\
         <button type=\"submit\" name=\"op\" value=\"discard-selected\" class=\"danger\">Discard</button></form>",
    );
}

/// `GET /ui/messages/{id}[?raw=1]`.
pub(super) async fn one(
    State(routes): State<Routes>,
    headers: HeaderMap,
    uri: Uri,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let reader = match message_reader(&routes, &headers, &uri) {
        Ok(reader) => reader,
        Err(refused) => return refused,
    };
    let Ok(id) = id.parse::<Uuid>() else {
        return html::error_page(StatusCode::BAD_REQUEST, "not a message id");
    };
    let raw = Form::parse(query.unwrap_or_default().as_bytes()).get("raw") == Some("1");
    let found = with_relay(&routes, move |running| async move {
        let Some(message) = running.store.get(id).await? else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no message {id}"),
            ));
        };
        let key = match &message.ordering_key {
            Some(key) => Some(
                running
                    .store
                    .key_state(&message.lane, &message.target, key, KEY_WAITING_SHOWN)
                    .await?,
            ),
            None => None,
        };
        Ok((message, key))
    })
    .await;
    let (message, key) = match found {
        Ok(found) => found,
        Err(error) => return error,
    };
    // Two columns: the message's fields; its payload, error, actions and key beside them.
    let mut body = String::from("<div class=\"columns\"><div><dl class=\"fields\">");
    field(
        &mut body,
        "Id",
        &format!("<span class=\"mono\">{}</span>", message.outbox_id),
    );
    field(
        &mut body,
        "Lane",
        &format!(
            "<a href=\"/ui/messages?lane_target={}\">{}/{}</a>",
            url(&format!("{}/{}", message.lane, message.target)),
            esc(&message.lane),
            esc(&message.target)
        ),
    );
    field(
        &mut body,
        "Status",
        &format!(
            "<span data-field=\"status\">{}</span>",
            message.status.as_str()
        ),
    );
    field(&mut body, "Seq", &message.seq.to_string());
    field(
        &mut body,
        "Ordering key",
        &opt(message.ordering_key.clone()),
    );
    field(&mut body, "Dedupe key", &opt(message.dedupe_key.clone()));
    field(
        &mut body,
        "Attempts",
        &format!("{} of {}", message.attempt_count, message.max_attempts),
    );
    field(&mut body, "Due", &esc(&message.available_at.to_string()));
    field(&mut body, "Claimed by", &opt(message.claimed_by.clone()));
    field(
        &mut body,
        "Lease until",
        &opt(message.lease_expires_at.map(|t| t.to_string())),
    );
    field(
        &mut body,
        "Trace id",
        &opt(trace_id(&message).map(str::to_owned)),
    );
    field(&mut body, "Enqueued", &esc(&message.created_at.to_string()));
    field(
        &mut body,
        "Last changed",
        &esc(&message.updated_at.to_string()),
    );
    field(
        &mut body,
        "Delivered",
        &opt(message.delivered_at.map(|t| t.to_string())),
    );
    body.push_str("</dl></div><div>");
    let bytes = message.payload.as_bytes().len();
    if raw {
        let _ = write!(
            body,
            "<h2>Payload, as stored ({bytes} bytes)</h2><p><a href=\"/ui/messages/{}\">Pretty-printed</a></p><pre data-field=\"raw-payload\">{}</pre>",
            message.outbox_id,
            esc(message.payload.as_str())
        );
    } else {
        let pretty = serde_json::from_str::<serde_json::Value>(message.payload.as_str())
            .and_then(|value| serde_json::to_string_pretty(&value))
            .unwrap_or_else(|_| message.payload.as_str().to_owned());
        let _ = write!(
            body,
            "<h2>Payload</h2><p><a href=\"/ui/messages/{}?raw=1\">Show the raw bytes ({bytes})</a></p><pre data-field=\"payload\">{}</pre>",
            message.outbox_id,
            esc(&pretty)
        );
    }
    if let Some(error) = &message.last_error {
        let _ = write!(
            body,
            "<h2>Last error</h2><pre data-field=\"last-error\">{}</pre>",
            esc(error)
        );
    }
    if let (Some(csrf), OutboxStatus::DeadLetter) = (reader.csrf.as_deref(), message.status) {
        body.push_str("<h2>Dead letter</h2><div class=\"actions\">");
        dead_letter_actions(&mut body, csrf, &[message.outbox_id]);
        body.push_str("</div>");
    }
    if let (Some(key), Some(state)) = (&message.ordering_key, &key) {
        key_section(&mut body, &message, key, state);
    }
    body.push_str("</div></div><h2>Headers</h2>");
    if message.headers.is_empty() {
        body.push_str("<p class=\"muted\">None.</p>");
    } else {
        body.push_str("<table><thead><tr><th scope=\"col\">Name</th><th scope=\"col\">Value</th></tr></thead><tbody>");
        for (name, value) in &message.headers {
            let _ = write!(
                body,
                "<tr><td class=\"mono\">{}</td><td class=\"mono\">{}</td></tr>",
                esc(name),
                esc(value)
            );
        }
        body.push_str("</tbody></table>");
    }
    html::page(
        &html::Frame {
            title: "Message",
            nav: html::Nav::Messages,
            csrf: reader.csrf.as_deref(),
        },
        &body,
    )
}

fn key_section(body: &mut String, message: &OutboxMessage, key: &str, state: &KeyState) {
    let _ = write!(
        body,
        "<h2>Ordering key <q>{}</q></h2><dl class=\"fields\" id=\"key-state\">",
        esc(key)
    );
    let head = match &state.head {
        Some(head) if head.outbox_id == message.outbox_id => "this message".to_owned(),
        Some(head) => link(head),
        None => "<span class=\"muted\">nothing of the key is pending or claimed</span>".to_owned(),
    };
    field(
        body,
        "Head",
        &format!("<span data-field=\"key-head\">{head}</span>"),
    );
    if !state.dead_before_head.is_empty() {
        let dead: Vec<String> = state.dead_before_head.iter().map(link).collect();
        let note = if state.is_blocked() {
            "<br><span class=\"muted\">under OrderingPolicy::Block the first of these holds the key</span>"
        } else {
            ""
        };
        field(
            body,
            "Dead letters before it",
            &format!("{}{note}", dead.join("<br>")),
        );
    }
    let waiting = if state.waiting.is_empty() {
        "<span class=\"muted\">nothing</span>".to_owned()
    } else {
        let mut list: Vec<String> = state.waiting.iter().map(link).collect();
        if state.more_waiting {
            list.push(format!(
                "<a href=\"/ui/messages?lane_target={}&amp;key={}&amp;status=pending\">and more…</a>",
                url(&format!("{}/{}", message.lane, message.target)),
                url(key)
            ));
        }
        list.join("<br>")
    };
    field(
        body,
        "Waiting behind the head",
        &format!("<span data-field=\"key-waiting\">{waiting}</span>"),
    );
    body.push_str("</dl>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> UnixMillis {
        text.parse().expect("an RFC 3339 instant")
    }

    #[test]
    fn a_search_time_reads_a_browsers_datetime_local_value_as_utc() {
        let form = Form::parse(b"from=2026-12-06T09:00&until=2026-12-06T09:30:15&error=");
        assert_eq!(
            instant_field(&form, "from").ok().flatten(),
            Some(at("2026-12-06T09:00:00Z"))
        );
        assert_eq!(
            instant_field(&form, "until").ok().flatten(),
            Some(at("2026-12-06T09:30:15Z"))
        );
        assert_eq!(instant_field(&form, "error").ok().flatten(), None);
        assert_eq!(instant_field(&form, "absent").ok().flatten(), None);
        let refused =
            instant_field(&Form::parse(b"from=yesterday"), "from").expect_err("not a time");
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }
}
