//! The daemon's OTLP trace export: on only when an endpoint is configured, in the config
//! file (`otlp_endpoint`, which wins) or in the environment
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`).
//! Without either, nothing is exported and no exporter is built.
//!
//! OTLP over HTTP with protobuf bodies, batched on the SDK's own thread, to `http://` or
//! `https://` endpoints. The SDK itself reads the standard variables (endpoints,
//! `OTEL_EXPORTER_OTLP_HEADERS` for an API key, compression, timeout); this module does
//! not parse them again. What the SDK does not do for HTTP is TLS trust, so the HTTP client
//! is built here: rustls, trusting the system's roots plus the CA file of `otlp_ca_file`
//! (or `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` / `OTEL_EXPORTER_OTLP_CERTIFICATE`, the
//! standard variables for it). The service name is `outbox-relay` unless
//! `OTEL_SERVICE_NAME` says otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::Failure;

/// The environment variables that turn the export on when the file names no endpoint.
const ENDPOINT_ENV: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The standard variables naming a CA file to trust, the traces one first.
const CA_FILE_ENV: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
];

/// How long one export request may take: OTLP's default timeout. (The SDK bounds an export
/// with its retries by `OTEL_EXPORTER_OTLP_TIMEOUT`, also 10 s unless set.)
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A running export: its tracer (for the tracing layer) and its provider (to flush at
/// exit).
pub(crate) struct OtlpExport {
    provider: SdkTracerProvider,
    /// Where the spans go, for the log.
    pub(crate) endpoint: String,
    /// The CA file trusted besides the system's roots, for the log.
    pub(crate) ca_file: Option<PathBuf>,
}

/// The first of `names` set to something, with its name.
fn first_env(names: &[&'static str]) -> Option<(&'static str, String)> {
    names.iter().find_map(|name| {
        std::env::var(name)
            .ok()
            .filter(|value| !value.trim().is_empty())
            .map(|value| (*name, value))
    })
}

impl OtlpExport {
    /// The export the config and the environment ask for, or None.
    pub(crate) fn from_config(
        file_endpoint: Option<&str>,
        file_ca: Option<&Path>,
    ) -> Result<Option<Self>, Failure> {
        let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
        let endpoint = match (file_endpoint, first_env(&ENDPOINT_ENV)) {
            (Some(base), _) => {
                let url = format!("{}/v1/traces", base.trim_end_matches('/'));
                builder = builder.with_endpoint(url.clone());
                url
            }
            // The exporter reads the variable itself (appending /v1/traces to the generic one).
            (None, Some((name, value))) => format!("{value} (from {name})"),
            (None, None) => return Ok(None),
        };
        let (ca_file, ca_origin) = match (file_ca, first_env(&CA_FILE_ENV)) {
            (Some(path), _) => (Some(path.to_owned()), "otlp_ca_file"),
            (None, Some((name, path))) => (Some(PathBuf::from(path)), name),
            (None, None) => (None, ""),
        };
        let tls = outbox_relay::tls::client_config(ca_file.as_deref())
            .map_err(|error| Failure::input(format!("config error: {ca_origin}: {error}")))?;
        let client = http_client(tls)
            .map_err(|error| Failure::failed(format!("OTLP export to {endpoint}: {error}")))?;
        let exporter = builder.with_http_client(client).build().map_err(|error| {
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
        Ok(Some(Self {
            provider,
            endpoint,
            ca_file,
        }))
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

/// The exporter's blocking HTTP client over `tls`. Built on a thread of its own, as the
/// SDK builds its default one: the blocking client starts (and, on failure, drops) a
/// runtime of its own, which may not happen on a thread of the daemon's runtime.
fn http_client(tls: rustls::ClientConfig) -> Result<reqwest::blocking::Client, String> {
    std::thread::Builder::new()
        .name("otlp-client-build".to_owned())
        .spawn(move || {
            reqwest::blocking::Client::builder()
                .tls_backend_preconfigured(tls)
                .timeout(REQUEST_TIMEOUT)
                .build()
        })
        .map_err(|error| format!("cannot start a thread to build the HTTP client: {error}"))?
        .join()
        .map_err(|_| "building the HTTP client panicked".to_owned())?
        .map_err(|error| format!("cannot build the HTTP client: {error}"))
}
