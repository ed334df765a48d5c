//! What the HTTP surface measures (feature `http`): the API's and the UI's store calls,
//! bounded so they never take the store from the lanes, and the wrong tokens presented to
//! them. Process-wide: no `lane` or `target` label; `reason` and `kind` come from small
//! fixed sets.

use super::*;

/// Gauge: store calls the API and the UI run now; at most the router's bound
/// (`listener.api_store_calls`, default 2).
pub const API_STORE_CALLS_IN_FLIGHT: &str = "outbox_api_store_calls_in_flight";
/// Counter: API and UI requests answered 503 instead of running their store call, by
/// [`LABEL_REASON`]: `busy` (the bound was reached) or `timeout` (the call took longer
/// than `listener.api_store_timeout` and was given up).
pub const API_STORE_CALLS_REFUSED_TOTAL: &str = "outbox_api_store_calls_refused_total";
/// Counter: wrong tokens presented, by [`LABEL_KIND`]: `bearer token` (the API) or
/// `UI login`.
pub const AUTH_FAILURES_TOTAL: &str = "outbox_http_auth_failures_total";

/// Label of [`API_STORE_CALLS_REFUSED_TOTAL`]: why a call was refused.
pub const LABEL_REASON: &str = "reason";

/// Every metric of the HTTP surface, each once.
#[rustfmt::skip] // one metric per line reads as a table
pub const HTTP: &[MetricInfo] = &[
    info(API_STORE_CALLS_IN_FLIGHT, Gauge, Unit::Count, "Store calls the API and the UI run now (bounded by listener.api_store_calls).", &[]),
    info(API_STORE_CALLS_REFUSED_TOTAL, Counter, Unit::Count, "API and UI requests answered 503 instead of running their store call: busy (at the bound) or timeout.", &[LABEL_REASON]),
    info(AUTH_FAILURES_TOTAL, Counter, Unit::Count, "Wrong control tokens presented to the API (bearer token) or the UI (UI login).", &[LABEL_KIND]),
];
