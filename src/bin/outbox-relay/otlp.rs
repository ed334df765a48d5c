//! The daemon's OTLP trace export: on only when an endpoint is configured, in the config
//! file (`otlp_endpoint`, which wins) or in the environment
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`).
//! Without either, nothing is exported and no exporter is built.
//!
//! OTLP over HTTP with protobuf bodies, batched on the SDK's own thread; plain HTTP only
//! (a collector beside the relay is the usual endpoint). The service name is
//! `outbox-relay` unless `OTEL_SERVICE_NAME` says otherwise.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::Failure;

/// The environment variables that turn the export on when the file names no endpoint.
const ENDPOINT_ENV: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// A running export: its tracer (for the tracing layer) and its provider (to flush at
/// exit).
pub(crate) struct OtlpExport {
    provider: SdkTracerProvider,
    /// Where the spans go, for the log.
    pub(crate) endpoint: String,
}

impl OtlpExport {
    /// The export the config and the environment ask for, or None.
    pub(crate) fn from_config(file_endpoint: Option<&str>) -> Result<Option<Self>, Failure> {
        let env_endpoint = ENDPOINT_ENV.iter().find_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.trim().is_empty())
                .map(|value| (*name, value))
        });
        let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
        let endpoint = match (file_endpoint, env_endpoint) {
            (Some(base), _) => {
                let url = format!("{}/v1/traces", base.trim_end_matches('/'));
                builder = builder.with_endpoint(url.clone());
                url
            }
            // The exporter reads the variable itself (appending /v1/traces to the generic one).
            (None, Some((name, value))) => format!("{value} (from {name})"),
            (None, None) => return Ok(None),
        };
        let exporter = builder.build().map_err(|error| {
            Failure::input(format!(
                "config error: otlp_endpoint {endpoint}: cannot build the OTLP exporter: {error}"
            ))
        })?;
        let service = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| "outbox-relay".to_owned());
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        Ok(Some(Self { provider, endpoint }))
    }

    /// The tracer the tracing layer writes to.
    pub(crate) fn tracer(&self) -> SdkTracer {
        self.provider.tracer("outbox-relay")
    }

    /// Sends what is still batched and stops the export. Blocks (the SDK's flush is
    /// synchronous), so it runs on a blocking thread.
    pub(crate) async fn shutdown(self) {
        let provider = self.provider;
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "OTLP export: the last spans were not sent"),
            Err(error) => tracing::warn!(%error, "OTLP export: the flush did not finish"),
        }
    }
}
