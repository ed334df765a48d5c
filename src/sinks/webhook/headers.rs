//! The webhook sink's configured headers (`headers`, `headers_env`): which names may be
//! configured, their validation, and their values read from the environment.

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::ConfigError;
use crate::sinks::{read_variable, SinkBuildError};

/// Message headers the sink does not forward: the HTTP client sets them.
pub(super) const CLIENT_OWNED: [&str; 5] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
    "upgrade",
];

/// Headers the sink sets itself, which configured headers may not replace.
const SINK_OWNED: [&str; 5] = [
    "content-type",
    "webhook-id",
    "idempotency-key",
    "webhook-timestamp",
    "webhook-signature",
];

/// Checks `headers` and `headers_env` without reading the environment; `field` is where
/// the sink sits in the config. Never shows a value.
pub(super) fn validate(
    headers: &BTreeMap<String, String>,
    headers_env: &BTreeMap<String, String>,
    field: &str,
) -> Result<(), ConfigError> {
    for (name, value) in headers {
        let at = format!("{field}.headers.{name}");
        header_name(name).map_err(|reason| ConfigError::new(&at, reason))?;
        if headers_env.contains_key(name) {
            return Err(ConfigError::new(at, "is set in headers_env too"));
        }
        // Not the value in the message: it may be meant as a secret after all.
        HeaderValue::from_str(value).map_err(|_| {
            ConfigError::new(at, "is not a valid HTTP header value (visible ASCII)")
        })?;
    }
    for (name, variable) in headers_env {
        let at = format!("{field}.headers_env.{name}");
        header_name(name).map_err(|reason| ConfigError::new(&at, reason))?;
        if variable.trim().is_empty() {
            return Err(ConfigError::new(at, "must name an environment variable"));
        }
    }
    Ok(())
}

/// The configured headers, `headers_env` values read from the environment (and marked
/// sensitive, which keeps them out of reqwest's and hyper's debug output); errors name the
/// field and the variable, never the value.
pub(super) fn resolve(
    headers: &BTreeMap<String, String>,
    headers_env: &BTreeMap<String, String>,
    field: &str,
) -> Result<HeaderMap, SinkBuildError> {
    let mut resolved = HeaderMap::with_capacity(headers.len() + headers_env.len());
    for (name, value) in headers {
        let at = format!("{field}.headers.{name}");
        let name = header_name(name).map_err(|reason| SinkBuildError::new(&at, reason))?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            SinkBuildError::new(at, "is not a valid HTTP header value (visible ASCII)")
        })?;
        resolved.insert(name, value);
    }
    for (name, variable) in headers_env {
        let at = format!("{field}.headers_env.{name}");
        let header = header_name(name).map_err(|reason| SinkBuildError::new(&at, reason))?;
        let secret = read_variable(&at, variable)?;
        let mut value = HeaderValue::from_str(&secret).map_err(|_| {
            SinkBuildError::new(
                at,
                format!("the environment variable {variable} is not a valid HTTP header value (visible ASCII)"),
            )
        })?;
        value.set_sensitive(true);
        resolved.insert(header, value);
    }
    Ok(resolved)
}

/// The plain `headers`; an invalid one is left out (`validate` refuses it).
pub(super) fn plain(headers: &BTreeMap<String, String>) -> HeaderMap {
    headers
        .iter()
        .filter_map(|(name, value)| {
            Some((header_name(name).ok()?, HeaderValue::from_str(value).ok()?))
        })
        .collect()
}

/// A configured header's name: valid in HTTP, and neither one the HTTP client sets nor one
/// the sink sets itself.
fn header_name(name: &str) -> Result<HeaderName, String> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a valid HTTP header name"))?;
    if CLIENT_OWNED
        .iter()
        .chain(&SINK_OWNED)
        .any(|owned| header.as_str() == *owned)
    {
        return Err(format!(
            "{name} is set by the sink itself and cannot be configured"
        ));
    }
    Ok(header)
}
