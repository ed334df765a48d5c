//! The Prometheus recorder's configuration (feature `prometheus`); serving it is
//! `http`'s (`http::install_prometheus_exporter`).

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use super::*;

/// The exporter's configuration, without an address: histogram buckets per metric. A
/// service that installs its own recorder builds it from here, so its histograms have the
/// buckets the dashboard expects.
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    let full = |name: &str| Matcher::Full(name.to_owned());
    PrometheusBuilder::new()
        .set_buckets_for_metric(full(DELIVERY_DURATION_SECONDS), DELIVERY_DURATION_BUCKETS)?
        .set_buckets_for_metric(full(END_TO_END_LATENCY_SECONDS), END_TO_END_LATENCY_BUCKETS)?
        .set_buckets_for_metric(full(CLAIM_BATCH_SIZE), CLAIM_BATCH_SIZE_BUCKETS)?
        .set_buckets_for_metric(
            full(STORE_CALL_DURATION_SECONDS),
            STORE_CALL_DURATION_BUCKETS,
        )?
        .set_buckets_for_metric(full(THROTTLED_SECONDS), THROTTLED_BUCKETS)
}
