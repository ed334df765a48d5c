//! `WebhookSink`: one HTTP request per message (reqwest over rustls), signed the Standard
//! Webhooks way.
//!
//! ```toml
//! sink = { kind = "webhook", url = "https://hooks.example.com/{lane}/{target}", secret_env = "WEBHOOK_SECRET" }
//! ```
//!
//! The request is a `POST` (or `method`) to `url`, a [`Template`] whose substituted values are
//! percent-encoded. Its body is the payload's JSON bytes, with `content-type:
//! application/json`, the message's headers (except the ones the HTTP client owns:
//! `content-length`, `transfer-encoding`, `connection`, `host`, `upgrade`), and:
//!
//! - `webhook-id` and `Idempotency-Key`: the `outbox_id`, the same on every attempt, so the
//!   receiver can drop the duplicates at-least-once delivery allows;
//! - `webhook-timestamp`: Unix seconds at send;
//! - `webhook-signature` (with `secret_env`): `v1,` + base64(HMAC-SHA256(secret,
//!   "{id}.{timestamp}.{body}")) for each secret. The variable holds one or more
//!   `whsec_<base64>` secrets separated by spaces, so a receiver can rotate its secret.
//!
//! | response | outcome |
//! |---|---|
//! | 2xx | ack |
//! | 408, 425, 429, 5xx, connect errors, timeouts | retryable; `Retry-After` (seconds or an HTTP date) is the floor of the backoff, up to the lane's `retry_after_max` |
//! | 401, 403 | retryable (`retry_auth_failures`, default `true`): a rotated credential or a permission granted late heals, and meanwhile the lane's breaker opens instead of the backlog being dead-lettered at full speed; `retry_auth_failures = false` dead-letters them |
//! | 3xx (redirects are not followed unless `max_redirects` says so), 410 and every other 4xx | permanent: dead letter, with the status and the first bytes of the body |
//!
//! Credentials go in headers rather than in the URL: `headers_env` maps a header to the
//! environment variable holding its value, read when the sink is built, and `headers` holds
//! values that are not secret:
//!
//! ```toml
//! sink = { kind = "webhook", url = "https://hooks.example.com/in", headers_env = { Authorization = "WEBHOOK_AUTH" }, headers = { X-Source = "outbox-relay" } }
//! ```
//!
//! They are sent with every request, over the message's headers of the same name. A URL
//! printed anywhere (errors, logs, dead letters) shows `***` for its user info and query
//! values.
//!
//! All the lane's handlers share the sink, so they share one connection pool.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::template::{percent_encode, Template};
use super::{payload_bytes, read_secret, SinkBuildError};
use crate::config::duration::HumanDuration;
use crate::config::ConfigError;
use crate::delivery::{BoxError, DeliveryError, DeliveryHandler};
use crate::message::OutboxMessage;
use crate::redact::redact;

mod headers;

/// How long one request may take, unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many bytes of an error response's body a permanent error keeps.
pub const ERROR_BODY_PREFIX: usize = 256;

// ---- config ----------------------------------------------------------------------------

/// The settings of a webhook sink: `sink = { kind = "webhook", url = "…" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSinkConfig {
    /// Where to send: an `http://` or `https://` URL, a [`Template`] over lane, target and
    /// headers.
    pub url: Template,
    /// The HTTP method. Default `POST`.
    #[serde(default = "default_method")]
    pub method: String,
    /// The environment variable holding the signing secrets (`whsec_…`, space-separated).
    /// Without it requests are not signed.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// How long one request may take, connecting included. Default `10s`.
    #[serde(default = "default_timeout")]
    pub timeout: HumanDuration,
    /// How many redirects to follow. Default 0: a redirect is a permanent failure.
    #[serde(default)]
    pub max_redirects: usize,
    /// Headers sent with every request, values as written: for values that are not secret.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Headers sent with every request, each value read from the environment variable named
    /// here when the sink is built: `{ Authorization = "WEBHOOK_AUTH" }`. For credentials,
    /// which then sit neither in the file nor in the URL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    /// Whether a 401 or a 403 is retried (the default) rather than dead-lettered: the
    /// target refusing the sink's credentials is most often a rotation or a permission not
    /// granted yet, which every message of the backlog would meet.
    #[serde(default = "retry_auth_failures")]
    pub retry_auth_failures: bool,
}

fn retry_auth_failures() -> bool {
    true
}

fn default_method() -> String {
    "POST".to_owned()
}

fn default_timeout() -> HumanDuration {
    HumanDuration(DEFAULT_TIMEOUT)
}

impl WebhookSinkConfig {
    /// A config posting to `url`, other settings at their defaults.
    pub fn new(url: Template) -> Self {
        Self {
            url,
            method: default_method(),
            secret_env: None,
            timeout: default_timeout(),
            max_redirects: 0,
            headers: BTreeMap::new(),
            headers_env: BTreeMap::new(),
            retry_auth_failures: true,
        }
    }

    /// Checks the settings; `field` is where the sink sits in the config.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        let url = self.url.as_str();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ConfigError::new(
                format!("{field}.url"),
                format!("{:?} is not an http:// or https:// URL", redact(url)),
            ));
        }
        if let Some(url) = self.url.as_literal() {
            reqwest::Url::parse(&url).map_err(|error| {
                ConfigError::new(
                    format!("{field}.url"),
                    format!("{:?}: {error}", redact(&url)),
                )
            })?;
        }
        self.method()
            .map_err(|reason| ConfigError::new(format!("{field}.method"), reason))?;
        if self.timeout.0.is_zero() {
            return Err(ConfigError::new(
                format!("{field}.timeout"),
                "must be greater than zero",
            ));
        }
        if let Some(variable) = &self.secret_env {
            if variable.trim().is_empty() {
                return Err(ConfigError::new(
                    format!("{field}.secret_env"),
                    "must name an environment variable",
                ));
            }
        }
        headers::validate(&self.headers, &self.headers_env, field)?;
        Ok(())
    }

    /// The HTTP method, parsed.
    fn method(&self) -> Result<Method, String> {
        Method::from_bytes(self.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("{:?} is not an HTTP method", self.method))
    }
}

/// The signing keys of a webhook sink: one or more `whsec_<base64>` secrets.
#[derive(Clone)]
pub struct WebhookSigner {
    keys: Vec<Vec<u8>>,
}

impl fmt::Debug for WebhookSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the keys themselves.
        f.debug_struct("WebhookSigner")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl WebhookSigner {
    /// Parses space-separated `whsec_<base64>` secrets (the prefix is optional). The error
    /// says which one (by position) is wrong, never its value.
    pub fn parse(secrets: &str) -> Result<Self, String> {
        let keys = secrets
            .split_whitespace()
            .enumerate()
            .map(|(i, secret)| {
                let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
                match BASE64.decode(encoded) {
                    Ok(key) if !key.is_empty() => Ok(key),
                    _ => Err(format!("secret {} is not whsec_ followed by base64", i + 1)),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err("no secret given".to_owned());
        }
        Ok(Self { keys })
    }

    /// The `webhook-signature` value: `v1,<base64 signature>` per key, space-separated.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut signatures = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
                continue;
            };
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            signatures.push(format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())));
        }
        signatures.join(" ")
    }
}

// ---- build -----------------------------------------------------------------------------

/// Delivers a message as an HTTP request.
pub struct WebhookSink {
    client: reqwest::Client,
    url: Template,
    method: Method,
    signer: Option<WebhookSigner>,
    /// `headers` and `headers_env`, values resolved.
    configured: HeaderMap,
    retry_auth_failures: bool,
}

impl fmt::Debug for WebhookSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Neither credentials in the URL nor header values.
        f.debug_struct("WebhookSink")
            .field("url", &redact(self.url.as_str()))
            .field("method", &self.method)
            .field("signer", &self.signer)
            .field("headers", &self.configured.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl WebhookSink {
    /// The sink `config` describes, its secrets read from the environment. `field` is where
    /// the sink sits in the config, for errors.
    pub fn build(config: &WebhookSinkConfig, field: &str) -> Result<Self, SinkBuildError> {
        config.validate(field)?;
        let signer = match &config.secret_env {
            Some(variable) => {
                let secrets = read_secret(field, variable)?;
                let signer = WebhookSigner::parse(&secrets).map_err(|reason| {
                    SinkBuildError::new(
                        format!("{field}.secret_env"),
                        format!("the environment variable {variable}: {reason}"),
                    )
                })?;
                Some(signer)
            }
            None => None,
        };
        let configured = headers::resolve(&config.headers, &config.headers_env, field)?;
        let mut sink = Self::new(config, signer).map_err(|error| {
            SinkBuildError::new(field.to_owned(), "cannot build the HTTP client").with_source(error)
        })?;
        sink.configured = configured;
        Ok(sink)
    }

    /// The sink `config` describes, signing with `signer` (a library user's own secret,
    /// rather than one from the environment); `config.secret_env` and `config.headers_env`
    /// are ignored (`config.headers` are sent; an invalid one is left out, as `validate`
    /// would have refused it). https trusts the system's certificate store
    /// ([`crate::tls::client_config`]).
    pub fn new(
        config: &WebhookSinkConfig,
        signer: Option<WebhookSigner>,
    ) -> Result<Self, BoxError> {
        let redirects = match config.max_redirects {
            0 => reqwest::redirect::Policy::none(),
            n => reqwest::redirect::Policy::limited(n),
        };
        let client = reqwest::Client::builder()
            .timeout(config.timeout.0)
            .redirect(redirects)
            .tls_backend_preconfigured(crate::tls::client_config(None)?)
            .build()?;
        Ok(Self {
            client,
            url: config.url.clone(),
            // `validate` has checked it; POST is the documented default.
            method: config.method().unwrap_or(Method::POST),
            signer,
            configured: headers::plain(&config.headers),
            retry_auth_failures: config.retry_auth_failures,
        })
    }

    fn headers(
        &self,
        message: &OutboxMessage,
        body: &[u8],
        timestamp: u64,
    ) -> Result<HeaderMap, DeliveryError> {
        let mut headers = HeaderMap::with_capacity(message.headers.len() + 5);
        for (name, value) in &message.headers {
            // Framing and connection headers belong to the HTTP client: a message's
            // `content-length` beside the real one would corrupt the request.
            if headers::CLIENT_OWNED
                .iter()
                .any(|owned| name.eq_ignore_ascii_case(owned))
            {
                continue;
            }
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                DeliveryError::permanent(format!("the header name {name:?} is not valid in HTTP"))
            })?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                DeliveryError::permanent(format!("the value of header {name} is not valid in HTTP"))
            })?;
            headers.insert(name, value);
        }
        // The configured ones replace a message's header of the same name: a producer
        // cannot swap the credentials.
        for (name, value) in &self.configured {
            headers.insert(name, value.clone());
        }
        // Ours come last, so a message header cannot override the id or the signature.
        let id = message.outbox_id.to_string();
        let text = |value: &str| {
            HeaderValue::from_str(value).map_err(|_| {
                DeliveryError::permanent(format!("{value:?} is not a valid header value"))
            })
        };
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert("webhook-id", text(&id)?);
        headers.insert("idempotency-key", text(&id)?);
        headers.insert("webhook-timestamp", HeaderValue::from(timestamp));
        if let Some(signer) = &self.signer {
            headers.insert(
                "webhook-signature",
                text(&signer.sign(&id, timestamp, body))?,
            );
        }
        Ok(headers)
    }
}

// ---- handler ---------------------------------------------------------------------------

#[async_trait]
impl DeliveryHandler for WebhookSink {
    async fn deliver(&self, message: &OutboxMessage) -> Result<(), DeliveryError> {
        let url = self
            .url
            .render_with(message, percent_encode)
            .map_err(DeliveryError::permanent)?;
        let url = reqwest::Url::parse(&url).map_err(|error| {
            DeliveryError::permanent(format!("the URL {:?} is not valid: {error}", redact(&url)))
        })?;
        let body = payload_bytes(message);
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let headers = self.headers(message, &body, timestamp)?;
        let response = self
            .client
            .request(self.method.clone(), url.clone())
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|error| request_failed(&self.method, &url, error))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, SystemTime::now()));
        let body = body_prefix(response).await;
        let error = WebhookError::Status {
            method: self.method.clone(),
            url: redact(url.as_str()),
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        Err(classify(
            status,
            retry_after,
            self.retry_auth_failures,
            error,
        ))
    }
}

/// The first [`ERROR_BODY_PREFIX`] bytes of an error response's body, read chunk by chunk
/// and no further: a target that answers an error with a huge or endless body must not
/// hold the delivery (and the handler) until the request timeout, nor fill memory. The
/// rest is never read; dropping the response closes its connection. The body is read only
/// to explain the failure: a failure to read it changes nothing.
async fn body_prefix(mut response: reqwest::Response) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(ERROR_BODY_PREFIX);
    while prefix.len() < ERROR_BODY_PREFIX {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = ERROR_BODY_PREFIX - prefix.len();
                prefix.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    prefix
}

// ---- errors ----------------------------------------------------------------------------

/// Why a webhook delivery failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The receiver answered with a status other than 2xx.
    #[error("{method} {url} answered {status}: {body:?}")]
    Status {
        /// The request's method.
        method: Method,
        /// The request's URL, its user info and query values hidden.
        url: String,
        /// The status.
        status: StatusCode,
        /// The first bytes of the response body.
        body: String,
    },
    /// The request did not get an answer (connect error, timeout, reset).
    #[error("{method} {url}: {source}")]
    Request {
        /// The request's method.
        method: Method,
        /// The request's URL, its user info and query values hidden.
        url: String,
        /// What reqwest said (without the URL, which may hold credentials).
        #[source]
        source: reqwest::Error,
    },
}

/// The outcome of a non-2xx status: retry (no sooner than `Retry-After`) or dead-letter;
/// 401 and 403 as `retry_auth_failures` says.
fn classify(
    status: StatusCode,
    retry_after: Option<Duration>,
    retry_auth_failures: bool,
    error: WebhookError,
) -> DeliveryError {
    let retryable = status.is_server_error()
        || matches!(status.as_u16(), 408 | 425 | 429)
        || (retry_auth_failures && matches!(status.as_u16(), 401 | 403));
    match (retryable, retry_after) {
        (true, Some(after)) => DeliveryError::retry_after(after, error),
        (true, None) => DeliveryError::retryable(error),
        (false, _) => DeliveryError::permanent(error),
    }
}

fn request_failed(method: &Method, url: &reqwest::Url, source: reqwest::Error) -> DeliveryError {
    // A request that could not even be built will not build next time either; anything on
    // the wire (connect, timeout, reset, a redirect loop) may go better later.
    let permanent = source.is_builder();
    let error = WebhookError::Request {
        method: method.clone(),
        url: redact(url.as_str()),
        // reqwest's message names the URL as given, credentials and all.
        source: source.without_url(),
    };
    if permanent {
        DeliveryError::permanent(error)
    } else {
        DeliveryError::retryable(error)
    }
}

/// `Retry-After` as a delay from `now`: delay-seconds or an HTTP date (a past date is zero).
fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's test vector: an implementation independent of
    /// ours computed this signature.
    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        let signer = WebhookSigner::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            signer.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn several_secrets_sign_once_each_for_rotation() {
        let signer =
            WebhookSigner::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw  whsec_c2Vjb25k").unwrap();
        let header = signer.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2, "{header}");
        assert_eq!(parts[0], "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(
            parts[1].starts_with("v1,") && parts[1] != parts[0],
            "{header}"
        );
    }

    #[test]
    fn bad_secrets_are_refused_without_showing_them() {
        let error =
            WebhookSigner::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_!!!").unwrap_err();
        assert_eq!(error, "secret 2 is not whsec_ followed by base64");
        assert!(WebhookSigner::parse("  ").is_err());
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn statuses_map_to_outcomes() {
        let error = |status: u16| WebhookError::Status {
            method: Method::POST,
            url: "http://x".into(),
            status: StatusCode::from_u16(status).unwrap(),
            body: String::new(),
        };
        let status = |code: u16| StatusCode::from_u16(code).unwrap();
        for code in [408, 425, 429, 500, 502, 503] {
            for retry_auth_failures in [true, false] {
                let outcome = classify(status(code), None, retry_auth_failures, error(code));
                assert!(
                    matches!(outcome, DeliveryError::Retryable(_)),
                    "{code}: {outcome:?}"
                );
            }
        }
        for code in [301, 400, 404, 410, 422] {
            let outcome = classify(status(code), None, true, error(code));
            assert!(outcome.is_permanent(), "{code}: {outcome:?}");
        }
        let outcome = classify(
            StatusCode::TOO_MANY_REQUESTS,
            Some(Duration::from_secs(2)),
            true,
            error(429),
        );
        assert_eq!(outcome.retry_after_hint(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn an_authorization_failure_is_retried_unless_the_sink_says_otherwise() {
        let error = |code: u16| WebhookError::Status {
            method: Method::POST,
            url: "http://x".into(),
            status: StatusCode::from_u16(code).unwrap(),
            body: String::new(),
        };
        for code in [401, 403] {
            let status = StatusCode::from_u16(code).unwrap();
            let retried = classify(status, None, true, error(code));
            assert!(
                matches!(retried, DeliveryError::Retryable(_)),
                "{code}: {retried:?}"
            );
            let dead = classify(status, None, false, error(code));
            assert!(dead.is_permanent(), "{code}: {dead:?}");
        }
        let config: WebhookSinkConfig =
            serde_json::from_str(r#"{"url": "http://x/in"}"#).expect("a config");
        assert!(config.retry_auth_failures, "retried by default");
    }

    #[test]
    fn the_config_names_the_bad_field() {
        let config = |url: &str| WebhookSinkConfig::new(url.parse().unwrap());
        let error = config("ftp://x").validate("lanes[a/b].sink").unwrap_err();
        assert_eq!(error.field, "lanes[a/b].sink.url");
        let mut bad_method = config("http://x/{lane}");
        bad_method.method = "PO ST".into();
        assert_eq!(bad_method.validate("s").unwrap_err().field, "s.method");
        assert!(config("http://127.0.0.1:1/{lane}").validate("s").is_ok());
    }
}
