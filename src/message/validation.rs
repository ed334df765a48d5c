//! The rules a draft must pass before anything is written: [`ValidationError`] (the crate's
//! one "field + reason" error), the [`DraftLimits`] a store applies, and the checks of each
//! field.

use super::{
    OutboxMessageDraft, DEFAULT_MAX_PAYLOAD_BYTES, MAX_HEADERS, MAX_HEADER_NAME_LEN,
    MAX_HEADER_VALUE_LEN, MAX_KEY_LEN, MAX_NAME_LEN,
};

/// A draft failed validation. `field` names what is wrong; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct ValidationError {
    /// The field at fault, e.g. `lane`, `max_attempts`, `headers.X-Trace`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ValidationError {
    /// A validation error for `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Limits a store applies to every draft it is asked to enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftLimits {
    /// The largest message, in bytes: the payload's JSON text plus every header's name
    /// and value.
    pub max_payload_bytes: usize,
}

impl Default for DraftLimits {
    fn default() -> Self {
        Self {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }
}

impl OutboxMessageDraft {
    /// Checks every field; the error names the first field at fault.
    pub fn validate(&self, limits: &DraftLimits) -> Result<(), ValidationError> {
        validate_name("lane", &self.lane)?;
        validate_name("target", &self.target)?;
        if let Some(key) = &self.ordering_key {
            validate_key("ordering_key", key)?;
        }
        if let Some(key) = &self.dedupe_key {
            validate_key("dedupe_key", key)?;
        }
        if self.max_attempts == 0 {
            return Err(ValidationError::new(
                "max_attempts",
                "must be greater than zero",
            ));
        }
        if i64::try_from(self.delay.as_millis()).is_err() {
            return Err(ValidationError::new("delay", "is too large"));
        }
        if self.headers.len() > MAX_HEADERS {
            return Err(ValidationError::new(
                "headers",
                format!(
                    "are {}, over the limit of {MAX_HEADERS}",
                    self.headers.len()
                ),
            ));
        }
        for (name, value) in &self.headers {
            validate_header(name, value)?;
        }
        if let Some(at) = self.payload.nul_at() {
            return Err(ValidationError::new(
                "payload",
                format!("contains a NUL character (\\u0000) at {at}, which PostgreSQL cannot store; no store accepts it"),
            ));
        }
        let size = self.payload.as_bytes().len();
        if size > limits.max_payload_bytes {
            return Err(ValidationError::new(
                "payload",
                format!(
                    "is {size} bytes, over the limit of {} bytes",
                    limits.max_payload_bytes
                ),
            ));
        }
        // Headers travel and are stored with the payload: they count toward the same limit.
        let header_bytes: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        if size + header_bytes > limits.max_payload_bytes {
            return Err(ValidationError::new(
                "headers",
                format!(
                    "make the message {} bytes (payload {size}, headers {header_bytes}), over the limit of {} bytes",
                    size + header_bytes,
                    limits.max_payload_bytes
                ),
            ));
        }
        Ok(())
    }
}

/// Lane and target names: 1..=64 characters of `A-Z a-z 0-9 _ - . :`.
pub(crate) fn validate_name(field: &str, value: &str) -> Result<(), ValidationError> {
    if value.trim().is_empty() {
        return Err(ValidationError::new(field, "is required"));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(ValidationError::new(
            field,
            format!(
                "is {} characters, over the limit of {MAX_NAME_LEN}",
                value.len()
            ),
        ));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
    {
        return Err(ValidationError::new(
            field,
            format!("contains {bad:?}; use only letters, digits, '_', '-', '.', ':'"),
        ));
    }
    Ok(())
}

fn validate_key(field: &str, value: &str) -> Result<(), ValidationError> {
    if value.trim().is_empty() {
        return Err(ValidationError::new(field, "must not be blank"));
    }
    if value.len() > MAX_KEY_LEN {
        return Err(ValidationError::new(
            field,
            format!("is {} bytes, over the limit of {MAX_KEY_LEN}", value.len()),
        ));
    }
    // Keys are printed in logs and status: a line break in one could forge a log line.
    if let Some(bad) = value.chars().find(|c| c.is_control()) {
        return Err(ValidationError::new(
            field,
            format!("contains the control character {bad:?}"),
        ));
    }
    Ok(())
}

/// Header names are HTTP tokens (RFC 9110), so every sink can pass them on unchanged.
fn validate_header(name: &str, value: &str) -> Result<(), ValidationError> {
    let field = format!("headers.{name}");
    if name.is_empty() {
        return Err(ValidationError::new("headers", "a header name is empty"));
    }
    if name.len() > MAX_HEADER_NAME_LEN {
        return Err(ValidationError::new(
            field,
            format!("name is over the limit of {MAX_HEADER_NAME_LEN} characters"),
        ));
    }
    let is_token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if let Some(bad) = name.chars().find(|c| !is_token(*c)) {
        return Err(ValidationError::new(
            field,
            format!("name contains {bad:?}, which a header name cannot hold"),
        ));
    }
    if value.len() > MAX_HEADER_VALUE_LEN {
        return Err(ValidationError::new(
            field,
            format!(
                "value is {} bytes, over the limit of {MAX_HEADER_VALUE_LEN}",
                value.len()
            ),
        ));
    }
    if value.chars().any(|c| c == '\r' || c == '\n' || c == '\0') {
        return Err(ValidationError::new(
            field,
            "value contains a line break or NUL",
        ));
    }
    Ok(())
}
