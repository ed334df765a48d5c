//! The JSON API's messages and dead letters:
//!
//! - `GET /api/v1/messages?lane=L&target=T[&status=S][&key=K][&enqueued_after=T1]
//!   [&enqueued_before=T2][&error=TEXT][&limit=N][&after=SEQ]`: a page of one lane's
//!   messages in enqueue order, `next_cursor` the `after` of the next page (keyset paging
//!   on the enqueue sequence, never an offset). `lane` and `target` are required, so every
//!   page reads the lane's index; `id=…` (repeatable) instead looks messages up by id. The
//!   time range (RFC 3339, `[enqueued_after, enqueued_before)`) and the error text (a
//!   case-sensitive substring of `last_error`) are checked on the rows the index yields,
//!   at most [`LIST_SCAN_PAGES`](crate::store::LIST_SCAN_PAGES) pages' worth per call: such
//!   a page may be short, even empty, with a `next_cursor` to go on from (on SQLite, so
//!   may a page of `claimed` or `delivered` messages, a status its listing indexes do not
//!   hold). An unknown
//!   parameter is refused, naming it.
//! - `GET /api/v1/messages/{id}`: one message, every field.
//! - `POST /api/v1/dead-letters/requeue|discard` with `{"ids": […]}` or
//!   `{"lane": …, "target": …}`, and `"dry_run": true` to count first: answers the count
//!   it changed (or would). A body with neither ids nor a lane is refused: no bulk action
//!   touches every dead letter by accident.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use super::api::ApiError;
use super::Routes;
use crate::message::OutboxStatus;
use crate::store::{MessageFilter, PageRequest};
use crate::time::UnixMillis;

/// The most messages one page may hold.
pub const MAX_PAGE_SIZE: usize = 500;
/// A page's size when `limit` is not given.
pub const DEFAULT_PAGE_SIZE: usize = 50;

/// A `GET /api/v1/messages` request, checked.
#[derive(Debug, Default, PartialEq)]
pub(super) struct ListQuery {
    filter: MessageFilter,
    page: Option<PageRequest>,
}

/// Reads the query string; the error names the parameter at fault.
pub(super) fn parse_list(query: &str) -> Result<ListQuery, ApiError> {
    let bad =
        |field: &str, message: String| ApiError::new(StatusCode::BAD_REQUEST, message).field(field);
    let mut filter = MessageFilter::default();
    let (mut limit, mut after) = (DEFAULT_PAGE_SIZE, None);
    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let value = value.into_owned();
        match name.as_ref() {
            "lane" => filter.lane = Some(value),
            "target" => filter.target = Some(value),
            "key" => filter.ordering_key = Some(value),
            "status" => {
                filter.status = Some(value.parse::<OutboxStatus>().map_err(|_| {
                    bad(
                        "status",
                        format!("{value:?} is not a status: pending, claimed, delivered or dead_letter"),
                    )
                })?)
            }
            "id" => filter.ids.push(
                value
                    .parse::<Uuid>()
                    .map_err(|_| bad("id", format!("{value:?} is not a message id")))?,
            ),
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
                    .ok_or_else(|| {
                        bad("limit", format!("must be 1 to {MAX_PAGE_SIZE}, not {value:?}"))
                    })?
            }
            "enqueued_after" | "enqueued_before" => {
                let at = value.parse::<UnixMillis>().map_err(|e| {
                    bad(
                        &name,
                        format!("{value:?} is not an RFC 3339 instant in UTC (2026-12-06T09:00:00Z): {e}"),
                    )
                })?;
                if name == "enqueued_after" {
                    filter.enqueued_after = Some(at.into());
                } else {
                    filter.enqueued_before = Some(at.into());
                }
            }
            "error" => {
                if value.is_empty() {
                    return Err(bad("error", "must not be empty: it is text to find in last_error".into()));
                }
                filter.error_contains = Some(value);
            }
            "after" => {
                after = Some(value.parse::<i64>().map_err(|_| {
                    bad("after", format!("{value:?} is not a cursor (a previous page's next_cursor)"))
                })?)
            }
            other => {
                return Err(bad(
                    other,
                    format!("unknown filter {other:?}; filters are lane, target, status, key, id, enqueued_after, enqueued_before, error, limit, after"),
                ))
            }
        }
    }
    if let (Some(after), Some(before)) = (filter.enqueued_after, filter.enqueued_before) {
        if after >= before {
            return Err(bad(
                "enqueued_before",
                "must be later than enqueued_after: the range is [enqueued_after, enqueued_before)"
                    .into(),
            ));
        }
    }
    if filter.ids.is_empty() {
        for (field, value) in [("lane", &filter.lane), ("target", &filter.target)] {
            if value.as_deref().is_none_or(str::is_empty) {
                return Err(bad(
                    field,
                    format!("{field} is required (or look messages up by id): a page reads one lane's index"),
                ));
            }
        }
    } else if filter.ids.len() > MAX_PAGE_SIZE {
        return Err(bad("id", format!("at most {MAX_PAGE_SIZE} ids")));
    }
    Ok(ListQuery {
        filter,
        page: Some(PageRequest { after, limit }),
    })
}

/// `GET /api/v1/messages`.
pub(super) async fn list(State(routes): State<Routes>, RawQuery(query): RawQuery) -> Response {
    let query = match parse_list(query.as_deref().unwrap_or("")) {
        Ok(query) => query,
        Err(error) => return error.into_response(),
    };
    let answer = routes
        .run(move |running| async move {
            let page = query.page.unwrap_or(PageRequest {
                after: None,
                limit: DEFAULT_PAGE_SIZE,
            });
            let page = running.store.list(&query.filter, page).await?;
            Ok(json!({ "messages": page.messages, "next_cursor": page.next_cursor }))
        })
        .await;
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(error) => error.into_response(),
    }
}

/// `GET /api/v1/messages/{id}`.
pub(super) async fn one(State(routes): State<Routes>, Path(id): Path<String>) -> Response {
    let Ok(id) = id.parse::<Uuid>() else {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{id:?} is not a message id"),
        )
        .field("id")
        .into_response();
    };
    let answer = routes
        .run(move |running| async move {
            running.store.get(id).await?.ok_or_else(|| {
                ApiError::new(StatusCode::NOT_FOUND, format!("no message {id}")).field("id")
            })
        })
        .await;
    match answer {
        Ok(message) => Json(message).into_response(),
        Err(error) => error.into_response(),
    }
}

/// The body of a bulk dead-letter action.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    #[serde(default)]
    ids: Vec<Uuid>,
    lane: Option<String>,
    target: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /api/v1/dead-letters/{requeue|discard}` (the token checked already).
pub(super) async fn dead_letters(
    State(routes): State<Routes>,
    Path(action): Path<String>,
    body: Bytes,
) -> Response {
    match bulk(&routes, &action, &body).await {
        Ok(answer) => Json(answer).into_response(),
        Err(error) => error.into_response(),
    }
}

async fn bulk(routes: &Routes, action: &str, body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let requeue = match action {
        "requeue" => true,
        "discard" => false,
        _ => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no action {action:?}: dead-letters/requeue or dead-letters/discard"),
            )
            .field("action"))
        }
    };
    let body: BulkBody = serde_json::from_slice(body).map_err(|error| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not a dead-letter action: {error}"),
        )
        .field("body")
    })?;
    let by_lane = body.lane.is_some() || body.target.is_some();
    if body.ids.is_empty() && !by_lane {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "a bulk action needs ids, or a lane and target: none would touch every dead letter",
        )
        .field("filter"));
    }
    if !body.ids.is_empty() && by_lane {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "give ids or a lane and target, not both",
        )
        .field("filter"));
    }
    if body.ids.len() > MAX_PAGE_SIZE {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("at most {MAX_PAGE_SIZE} ids"),
        )
        .field("ids"));
    }
    let filter = if by_lane {
        let (Some(lane), Some(target)) = (body.lane, body.target) else {
            return Err(
                ApiError::new(StatusCode::BAD_REQUEST, "lane and target go together")
                    .field("target"),
            );
        };
        MessageFilter::lane(lane, target)
    } else {
        MessageFilter {
            ids: body.ids,
            ..MessageFilter::default()
        }
    };
    let dry_run = body.dry_run;
    let count = routes
        .run(move |running| async move {
            let store = running.store;
            let count = if dry_run {
                let dead = MessageFilter {
                    status: Some(OutboxStatus::DeadLetter),
                    ..filter
                };
                store
                    .stats(&dead)
                    .await?
                    .iter()
                    .map(|lane| lane.dead_letter)
                    .sum()
            } else if requeue {
                store.requeue_dead_letters(&filter).await?
            } else {
                store.discard_dead_letters(&filter).await?
            };
            Ok(count)
        })
        .await?;
    Ok(json!({
        "action": if requeue { "requeue" } else { "discard" },
        "dry_run": dry_run,
        "count": count,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_query_names_the_parameter_at_fault() {
        let field = |query: &str| match parse_list(query) {
            Err(error) => format!("{error:?}"),
            Ok(parsed) => panic!("{query} parsed: {parsed:?}"),
        };
        let ok = parse_list("lane=orders&target=audit&status=dead_letter&key=c1&limit=10&after=42")
            .expect("a good query");
        assert_eq!(ok.filter.status, Some(OutboxStatus::DeadLetter));
        assert_eq!(
            ok.page,
            Some(PageRequest {
                after: Some(42),
                limit: 10
            })
        );
        assert!(parse_list(&format!("id={}", Uuid::nil())).is_ok());
        let ranged = parse_list(
            "lane=orders&target=audit&enqueued_after=2026-12-06T09:00:00Z\
             &enqueued_before=2026-12-06T10:00:00.5Z&error=connection%20refused",
        )
        .expect("a time range and an error text");
        assert_eq!(
            ranged.filter.enqueued_after.map(UnixMillis::from),
            Some(UnixMillis::from_millis(1_796_547_600_000))
        );
        assert_eq!(
            ranged.filter.enqueued_before.map(UnixMillis::from),
            Some(UnixMillis::from_millis(1_796_551_200_500))
        );
        assert_eq!(
            ranged.filter.error_contains.as_deref(),
            Some("connection refused")
        );
        for (query, named) in [
            ("target=audit", "\"lane\""),
            ("lane=orders", "\"target\""),
            ("lane=orders&target=audit&color=red", "\"color\""),
            ("lane=orders&target=audit&limit=501", "\"limit\""),
            ("lane=orders&target=audit&limit=0", "\"limit\""),
            ("lane=orders&target=audit&status=lost", "\"status\""),
            ("lane=orders&target=audit&after=x", "\"after\""),
            ("id=nope", "\"id\""),
            (
                "lane=orders&target=audit&enqueued_after=yesterday",
                "\"enqueued_after\"",
            ),
            (
                "lane=orders&target=audit&enqueued_before=2026-12-06T09:00:00%2B01:00",
                "\"enqueued_before\"",
            ),
            (
                "lane=orders&target=audit&enqueued_after=2026-12-06T10:00:00Z\
                 &enqueued_before=2026-12-06T09:00:00Z",
                "\"enqueued_before\"",
            ),
            ("lane=orders&target=audit&error=", "\"error\""),
        ] {
            let error = field(query);
            assert!(
                error.contains(&format!("field: Some({named})")),
                "{query}: {error}"
            );
        }
    }
}
