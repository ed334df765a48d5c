//! `/ui/lanes`: every lane of this relay with its state, gates, counts and last hour, and
//! the fleet-wide pause and resume.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::Extension;

use super::super::api::ApiError;
use super::html::{self, age, csrf_field, esc, url};
use super::throughput::{chart, Minute};
use super::{
    lane_target, reader, redirect, start_sampler, this_minute, with_relay, writer, Routes,
};
use crate::lane::LaneState;
use crate::relay::LaneStatus;
use crate::store::{LanePauseRequest, LaneStats, MessageFilter};

/// Seconds between the script's refreshes of the lanes table.
const REFRESH_SECONDS: u32 = 5;
/// How old a lane's store counts may be before a page view refreshes them. The counts
/// are the store's `stats` of the lane, which count every status (a scan of the lane's
/// delivered history on PostgreSQL); this bounds that to one query per lane and interval
/// however many browsers refresh the page, as `/readyz` bounds its check.
pub(super) const COUNTS_FRESH: Duration = Duration::from_secs(5);

/// The last store counts of each lane, by `lane/target`, with when they were read, and
/// which lanes have a refresh running.
#[derive(Debug, Default)]
pub(crate) struct CountsCache {
    counts: HashMap<String, (Instant, LaneStats)>,
    refreshing: HashSet<String>,
}

impl CountsCache {
    /// The cached counts of `lane` and whether they need a refresh at `now` (absent or
    /// older than [`COUNTS_FRESH`], and no refresh running); marks the refresh as running.
    fn take(&mut self, lane: &str, now: Instant) -> (Option<(Instant, LaneStats)>, bool) {
        let cached = self.counts.get(lane).cloned();
        let stale = cached
            .as_ref()
            .is_none_or(|(read, _)| now.duration_since(*read) >= COUNTS_FRESH);
        let refresh = stale && self.refreshing.insert(lane.to_owned());
        (cached, refresh)
    }

    fn put(&mut self, lane: &str, read: Instant, stats: LaneStats) {
        self.refreshing.remove(lane);
        self.counts.insert(lane.to_owned(), (read, stats));
    }

    fn failed(&mut self, lane: &str) {
        self.refreshing.remove(lane);
    }
}

/// The store's counts of one lane, read now.
async fn read_counts(
    store: &crate::store::Outbox,
    lane: &str,
    target: &str,
) -> Result<LaneStats, crate::store::StoreError> {
    Ok(store
        .stats(&MessageFilter::lane(lane, target))
        .await?
        .into_iter()
        .next()
        .unwrap_or_else(|| LaneStats {
            lane: lane.to_owned(),
            target: target.to_owned(),
            ..LaneStats::default()
        }))
}

/// What a row shows: the relay's view and the store's counts.
struct Row {
    status: LaneStatus,
    stats: LaneStats,
    /// How old `stats` is.
    counts_age: Duration,
    series: Vec<Minute>,
}

fn relay_unavailable(error: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the relay does not answer: {error}"),
    )
}

/// `GET /ui/lanes`.
pub(super) async fn page(State(routes): State<Routes>, headers: HeaderMap, uri: Uri) -> Response {
    let reader = match reader(&routes, &headers, &uri) {
        Ok(reader) => reader,
        Err(refused) => return refused,
    };
    let ui_routes = routes.clone();
    let lanes = with_relay(&routes, move |running| async move {
        start_sampler(&ui_routes, &running);
        let statuses = running.relay.status().await.map_err(relay_unavailable)?;
        // The store's pauses, not only the relay's view of them: a pause just made shows
        // at once, before this relay's next lane-control poll applies it. A store without
        // lane control answers an error: the relay's view is all there is.
        let pauses = running.store.lane_pauses().await.ok();
        let minute = this_minute();
        let mut rows = Vec::with_capacity(statuses.len());
        for mut status in statuses {
            if let Some(pauses) = &pauses {
                status.fleet_pause = pauses
                    .iter()
                    .find(|p| p.lane == status.lane.name && p.target == status.lane.target)
                    .cloned();
            }
            let (lane, target) = (status.lane.name.clone(), status.lane.target.clone());
            let name = status.lane.to_string();
            // Fresh counts from the cache; stale ones are shown while a refresh runs
            // (stale-while-revalidate); none yet: read now.
            let (cached, refresh) = ui_routes.ui.counts().take(&name, Instant::now());
            let (read_at, stats) = match (cached, refresh) {
                (Some(cached), false) => cached,
                (Some(cached), true) => {
                    let (ui, store, name) = (ui_routes.ui.clone(), running.store.clone(), name.clone());
                    tokio::spawn(async move {
                        let read = Instant::now();
                        match read_counts(&store, &lane, &target).await {
                            Ok(stats) => ui.counts().put(&name, read, stats),
                            Err(error) => {
                                tracing::warn!(%error, lane = %name, "the UI could not refresh a lane's counts");
                                ui.counts().failed(&name);
                            }
                        }
                    });
                    cached
                }
                (None, _) => {
                    let read = Instant::now();
                    match read_counts(&running.store, &lane, &target).await {
                        Ok(stats) => {
                            ui_routes.ui.counts().put(&name, read, stats.clone());
                            (read, stats)
                        }
                        Err(error) => {
                            ui_routes.ui.counts().failed(&name);
                            return Err(error.into());
                        }
                    }
                }
            };
            let series = {
                let mut history = ui_routes.ui.throughput();
                history.observe(&name, minute, status.delivered, status.failed);
                history.series(&name, minute)
            };
            rows.push(Row {
                status,
                stats,
                counts_age: read_at.elapsed(),
                series,
            });
        }
        Ok(rows)
    })
    .await;
    let rows = match lanes {
        Ok(rows) => rows,
        Err(error) => return error,
    };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p class=\"muted\">This relay's lanes, refreshed every {REFRESH_SECONDS} s \
         (<a href=\"/ui/lanes\">reload</a>). Counts are the store's, at most {COUNTS_FRESH:?} old; \
         the last hour is this process's deliveries since the UI was first opened.</p>\
         <section id=\"lanes\" data-refresh=\"{REFRESH_SECONDS}\" aria-live=\"off\">\
         <table><caption class=\"muted\">{} lane{}</caption><thead><tr>\
         <th scope=\"col\">Lane</th><th scope=\"col\">State</th><th scope=\"col\">Gates</th>\
         <th scope=\"col\" class=\"num\">Pending</th><th scope=\"col\" class=\"num\">Oldest due</th>\
         <th scope=\"col\" class=\"num\">In flight</th><th scope=\"col\" class=\"num\">Dead letters</th>\
         <th scope=\"col\" class=\"num\">Blocked keys</th>\
         <th scope=\"col\">Last hour <span class=\"muted\">(delivered ▲ failed ▼)</span></th><th scope=\"col\">Action</th></tr></thead><tbody>",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    for row in &rows {
        lane_row(&mut body, row, reader.csrf.as_deref());
    }
    body.push_str("</tbody></table></section>");
    html::page(
        &html::Frame {
            title: "Lanes",
            nav: html::Nav::Lanes,
            csrf: reader.csrf.as_deref(),
        },
        &body,
    )
}

fn lane_row(body: &mut String, row: &Row, csrf: Option<&str>) {
    let status = &row.status;
    let name = status.lane.to_string();
    let state = status.state.as_str();
    let _ = write!(
        body,
        "<tr data-lane=\"{n}\"><th scope=\"row\"><a href=\"/ui/messages?lane_target={u}\">{n}</a></th>\
         <td><span class=\"state state-{state}\" data-field=\"state\">{state}</span>",
        n = esc(&name),
        u = url(&name),
    );
    if let Some(pause) = &status.fleet_pause {
        let _ = write!(
            body,
            "<br><span data-field=\"paused-by\">by {}</span>, <span class=\"muted\">{}</span>",
            esc(&pause.paused_by),
            esc(&pause.paused_at.to_string())
        );
        if let Some(reason) = &pause.reason {
            let _ = write!(body, "<br><q data-field=\"reason\">{}</q>", esc(reason));
        }
    }
    if status.paused_here {
        body.push_str("<br><span class=\"muted\">paused in this process</span>");
    }
    if let Some(error) = status
        .last_error
        .as_deref()
        .filter(|_| status.state != LaneState::Running)
    {
        let _ = write!(body, "<br><span class=\"muted\">{}</span>", esc(error));
    }
    body.push_str("</td><td>");
    let gates = &status.gates;
    let mut any = false;
    if let Some(breaker) = &gates.breaker {
        let _ = write!(body, "breaker {}<br>", breaker.as_str());
        any = true;
    }
    if let Some(rate) = &gates.rate_limit {
        let _ = write!(body, "rate {}<br>", esc(rate));
        any = true;
    }
    if gates.retry_after_holds_lane {
        body.push_str("Retry-After holds the lane<br>");
        any = true;
    }
    if !gates.throttled.is_zero() {
        let _ = write!(body, "throttled {}", age(gates.throttled));
        any = true;
    }
    if !any {
        body.push_str("<span class=\"muted\">none</span>");
    }
    let stats = &row.stats;
    let oldest = stats.oldest_pending_age.map_or("–".to_owned(), age);
    let _ = write!(
        body,
        "</td><td class=\"num\" data-field=\"pending\" title=\"read {} ago\">{}</td><td class=\"num\" data-field=\"oldest-due\">{oldest}</td>\
         <td class=\"num\" data-field=\"in-flight\">{}</td>\
         <td class=\"num\" data-field=\"dead-letters\"><a href=\"/ui/dead-letters?lane_target={u}\">{}</a></td>\
         <td class=\"num\" data-field=\"blocked-keys\"><a href=\"/ui/blocked-keys?lane_target={u}\">{}</a></td><td>{}</td><td>",
        age(row.counts_age),
        stats.pending,
        status.in_flight,
        stats.dead_letter,
        stats.blocked_keys,
        chart(&row.series),
        u = url(&name),
    );
    if let Some(csrf) = csrf {
        let value = esc(&name);
        if status.fleet_pause.is_some() {
            let _ = write!(
                body,
                "<form method=\"post\" action=\"/ui/lanes/action\" class=\"inline\">{}\
                 <input type=\"hidden\" name=\"lane_target\" value=\"{value}\">\
                 <button type=\"submit\" name=\"action\" value=\"resume\">Resume</button></form>",
                csrf_field(csrf)
            );
        } else {
            let _ = write!(
                body,
                "<form method=\"post\" action=\"/ui/lanes/action\" class=\"inline\">{}\
                 <input type=\"hidden\" name=\"lane_target\" value=\"{value}\">\
                 <label>Reason <input type=\"text\" name=\"reason\" maxlength=\"1000\" aria-label=\"Reason to pause {value}\"></label>\
                 <button type=\"submit\" name=\"action\" value=\"pause\">Pause</button></form>",
                csrf_field(csrf)
            );
        }
    } else {
        body.push_str("<span class=\"muted\">log in to act</span>");
    }
    body.push_str("</td></tr>");
}

/// `POST /ui/lanes/action`: `action=pause` (with `reason`) or `resume`, for every relay
/// on the store.
pub(super) async fn action(
    State(routes): State<Routes>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = match writer(&routes, &headers, &body) {
        Ok((form, _)) => form,
        Err(refused) => return refused,
    };
    let Some((lane, target)) = lane_target(form.get("lane_target")) else {
        return html::error_page(
            StatusCode::BAD_REQUEST,
            "lane_target: which lane (lane/target)?",
        );
    };
    let pause = match form.get("action") {
        Some("pause") => true,
        Some("resume") => false,
        other => {
            return html::error_page(
                StatusCode::BAD_REQUEST,
                &format!("action: pause or resume, not {other:?}"),
            )
        }
    };
    let reason = form.get("reason").map(str::to_owned);
    // Who paused it, as the JSON API says it: the interface and the peer's address.
    let by = match peer {
        Some(Extension(ConnectInfo(addr))) => format!("ui:{}", addr.ip()),
        None => "ui".to_owned(),
    };
    let done = with_relay(&routes, move |running| async move {
        let lanes = running.relay.status().await.map_err(relay_unavailable)?;
        if !lanes
            .iter()
            .any(|status| status.lane.name == lane && status.lane.target == target)
        {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("this relay runs no lane {lane}/{target}"),
            ));
        }
        if pause {
            let mut request = LanePauseRequest::new(&lane, &target, by);
            if let Some(reason) = reason {
                request = request.reason(reason);
            }
            running.store.pause_lane(&request).await?;
        } else {
            running.store.resume_lane(&lane, &target).await?;
        }
        Ok(())
    })
    .await;
    match done {
        Ok(()) => redirect("/ui/lanes"),
        Err(error) => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_once_per_interval_and_served_stale_while_one_refresh_runs() {
        let start = Instant::now();
        let mut cache = CountsCache::default();
        // Nothing cached: the caller reads, and is the only one to.
        assert_eq!(cache.take("l/t", start), (None, true));
        assert_eq!(cache.take("l/t", start), (None, false));
        let stats = LaneStats {
            pending: 3,
            ..LaneStats::default()
        };
        cache.put("l/t", start, stats.clone());
        // Fresh: served as is.
        let fresh = cache.take("l/t", start + COUNTS_FRESH / 2);
        assert_eq!(fresh, (Some((start, stats.clone())), false));
        // Stale: served, and one refresh asked for, not two.
        let later = start + COUNTS_FRESH;
        assert_eq!(
            cache.take("l/t", later),
            (Some((start, stats.clone())), true)
        );
        assert_eq!(
            cache.take("l/t", later),
            (Some((start, stats.clone())), false)
        );
        // A failed refresh lets the next view try again.
        cache.failed("l/t");
        assert!(cache.take("l/t", later).1);
    }
}
