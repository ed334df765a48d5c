//! `Template`: a sink's destination (a URL, a subject, an exchange, a stream key, a Kafka
//! topic or record key) written over the message: `{lane}`, `{target}` and `{header.NAME}`
//! are replaced by the message's lane, target and the value of its header `NAME`;
//! `{payload.FIELD}` by a field of the JSON payload (`{payload.customer.id}` walks into
//! objects; a string goes in as it is, a number or a boolean as its JSON text, the number
//! as written); `{{` and `}}` are literal braces. Only the objects on a field's path are read:
//! the rest of the payload (a number beyond `f64`, say) is never parsed.
//!
//! ```
//! use outbox_relay::sinks::Template;
//! let template: Template = "orders.{lane}.{header.tenant}".parse().unwrap();
//! assert!(!template.is_literal());
//! assert!("orders.{nope}".parse::<Template>().is_err());
//! let topic: Template = "outbox.event.{payload.aggregatetype}".parse().unwrap();
//! assert!(topic.uses_payload());
//! ```

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::message::OutboxMessage;

/// A string with `{lane}`, `{target}`, `{header.NAME}` and `{payload.FIELD}` placeholders,
/// parsed once. The default is the empty string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Template {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Lane,
    Target,
    Header(String),
    /// The path into the payload's JSON objects.
    PayloadField(Vec<String>),
}

/// A template that does not parse: an unknown or unclosed placeholder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0} (placeholders: {{lane}}, {{target}}, {{header.NAME}}, {{payload.FIELD}}; write {{{{ and }}}} for braces)"
)]
pub struct TemplateError(String);

/// A message lacks a value its template names: a header, or a payload field that is
/// missing or is not a string, a number or a boolean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the template {template:?} needs {placeholder}, which the message lacks")]
pub struct MissingValue {
    /// The template.
    pub template: String,
    /// What it names: `the header "region"`, `the payload field "customer.id" as a string,
    /// number or boolean`.
    pub placeholder: String,
}

impl Template {
    /// Whether the template has no placeholders (it renders the same for every message).
    pub fn is_literal(&self) -> bool {
        self.parts
            .iter()
            .all(|part| matches!(part, Part::Literal(_)))
    }

    /// What the template renders to for every message, when it has no placeholders.
    pub fn as_literal(&self) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                _ => return None,
            }
        }
        Some(out)
    }

    /// Whether the template reads fields of the payload (rendering it parses the payload).
    pub fn uses_payload(&self) -> bool {
        self.parts
            .iter()
            .any(|part| matches!(part, Part::PayloadField(_)))
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The template filled in for `message`, each substituted value passed through `encode`
    /// (a URL percent-encodes it; a subject takes it as it is).
    pub fn render_with(
        &self,
        message: &OutboxMessage,
        encode: impl Fn(&str) -> String,
    ) -> Result<String, MissingValue> {
        let mut out = String::with_capacity(self.text.len() + 16);
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Lane => out.push_str(&encode(&message.lane)),
                Part::Target => out.push_str(&encode(&message.target)),
                Part::Header(name) => {
                    let value = message.headers.get(name).ok_or_else(|| MissingValue {
                        template: self.text.clone(),
                        placeholder: format!("the header {name:?}"),
                    })?;
                    out.push_str(&encode(value));
                }
                Part::PayloadField(path) => {
                    let missing = || MissingValue {
                        template: self.text.clone(),
                        placeholder: format!(
                            "the payload field {:?} as a string, number or boolean",
                            path.join(".")
                        ),
                    };
                    let text = payload_field(message.payload.as_raw(), path).ok_or_else(missing)?;
                    out.push_str(&encode(&text));
                }
            }
        }
        Ok(out)
    }

    /// The template filled in for `message`, values as they are.
    pub fn render(&self, message: &OutboxMessage) -> Result<String, MissingValue> {
        self.render_with(message, str::to_owned)
    }
}

/// The field at `path` in a JSON payload, as a template fills it in: a string's text, a
/// number as written, `true` or `false`; `None` when it is missing or anything else.
///
/// Only the objects on the path are read, each as raw members: nothing else is parsed into
/// a value, so a payload holding a number beyond `f64` (`1e400`, valid JSON that every sink
/// delivers byte for byte) still routes by its other fields.
fn payload_field(payload: &RawValue, path: &[String]) -> Option<String> {
    let mut value = payload;
    for name in path {
        // A duplicate key counts as its last occurrence, as everywhere in serde_json.
        let members: HashMap<String, &RawValue> = serde_json::from_str(value.get()).ok()?;
        value = members.get(name.as_str())?;
    }
    let text = value.get();
    match text.as_bytes().first()? {
        b'"' => serde_json::from_str::<String>(text).ok(),
        b't' | b'f' | b'-' | b'0'..=b'9' => Some(text.to_owned()),
        _ => None,
    }
}

impl FromStr for Template {
    type Err = TemplateError;

    fn from_str(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, c)| c) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, c)| c) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => {
                    return Err(TemplateError(format!(
                        "a lone '}}' at byte {at} of {text:?}"
                    )))
                }
                '{' => {
                    let rest = &text[at + 1..];
                    let end = rest.find('}').ok_or_else(|| {
                        TemplateError(format!("an unclosed '{{' at byte {at} of {text:?}"))
                    })?;
                    let name = &rest[..end];
                    let part = match name {
                        "lane" => Part::Lane,
                        "target" => Part::Target,
                        _ => match name.strip_prefix("header.") {
                            Some(header) if !header.is_empty() => Part::Header(header.to_owned()),
                            _ => match name.strip_prefix("payload.") {
                                Some(path)
                                    if !path.is_empty() && !path.split('.').any(str::is_empty) =>
                                {
                                    Part::PayloadField(path.split('.').map(str::to_owned).collect())
                                }
                                _ => {
                                    return Err(TemplateError(format!(
                                        "unknown placeholder {{{name}}} in {text:?}"
                                    )))
                                }
                            },
                        },
                    };
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                    // Skip the name and its closing brace.
                    for _ in 0..name.chars().count() + 1 {
                        chars.next();
                    }
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Self {
            text: text.to_owned(),
            parts,
        })
    }
}

impl TryFrom<String> for Template {
    type Error = TemplateError;

    fn try_from(text: String) -> Result<Self, TemplateError> {
        text.parse()
    }
}

impl From<Template> for String {
    fn from(template: Template) -> String {
        template.text
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `value` with every byte outside RFC 3986's unreserved set percent-encoded, so a header
/// value put in a URL cannot change its path, query or host.
pub(crate) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> OutboxMessage {
        let draft = crate::OutboxMessageDraft::new("orders", "billing", serde_json::json!({}))
            .unwrap()
            .with_header("tenant", "acme/eu 1");
        crate::message::OutboxMessage::pending(
            draft,
            uuid::Uuid::now_v7(),
            1,
            crate::time::UnixMillis::EPOCH,
        )
    }

    #[test]
    fn placeholders_are_filled_from_the_message() {
        let template: Template = "a.{lane}.{target}.{header.tenant}.{{x}}".parse().unwrap();
        assert_eq!(
            template.render(&message()).unwrap(),
            "a.orders.billing.acme/eu 1.{x}"
        );
        assert_eq!(
            template.render_with(&message(), percent_encode).unwrap(),
            "a.orders.billing.acme%2Feu%201.{x}"
        );
        assert!(!template.is_literal());
        let literal: Template = "plain.{{subject}}".parse().unwrap();
        assert_eq!(literal.as_literal().as_deref(), Some("plain.{subject}"));
        assert_eq!(template.as_literal(), None);
    }

    #[test]
    fn a_missing_header_is_named() {
        let template: Template = "x.{header.region}".parse().unwrap();
        let error = template.render(&message()).unwrap_err();
        assert_eq!(error.placeholder, "the header \"region\"");
    }

    #[test]
    fn payload_fields_are_filled_from_the_json() {
        let draft = crate::OutboxMessageDraft::new(
            "orders",
            "billing",
            serde_json::json!({"aggregatetype": "Order", "customer": {"id": 7, "vip": true}, "tags": []}),
        )
        .unwrap();
        let message = crate::message::OutboxMessage::pending(
            draft,
            uuid::Uuid::now_v7(),
            1,
            crate::time::UnixMillis::EPOCH,
        );
        let template: Template =
            "outbox.event.{payload.aggregatetype}.{payload.customer.id}.{payload.customer.vip}"
                .parse()
                .unwrap();
        assert!(template.uses_payload());
        assert_eq!(
            template.render(&message).unwrap(),
            "outbox.event.Order.7.true"
        );
        for (text, field) in [
            ("{payload.nope}", "nope"),
            ("{payload.tags}", "tags"),
            ("{payload.customer}", "customer"),
            ("{payload.customer.id.x}", "customer.id.x"),
        ] {
            let template: Template = text.parse().unwrap();
            let error = template.render(&message).unwrap_err();
            assert!(
                error.placeholder.contains(&format!("{field:?}")),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn a_payload_field_is_read_without_parsing_unrelated_numbers() {
        let payload = r#"{"big": 1e400, "aggregatetype": "Order", "n": {"huge": 123456789012345678901234567890, "exact": 1.50}, "e": "a\u00e9\"b"}"#;
        let draft = crate::OutboxMessageDraft::from_payload(
            "orders",
            "billing",
            crate::message::Payload::from_json(payload).unwrap(),
        )
        .unwrap();
        let message = crate::message::OutboxMessage::pending(
            draft,
            uuid::Uuid::now_v7(),
            1,
            crate::time::UnixMillis::EPOCH,
        );
        assert!(message.payload.to_value().is_err(), "1e400 is beyond f64");
        let template: Template =
            "outbox.event.{payload.aggregatetype}.{payload.n.huge}.{payload.n.exact}.{payload.e}"
                .parse()
                .unwrap();
        assert_eq!(
            template.render(&message).unwrap(),
            "outbox.event.Order.123456789012345678901234567890.1.50.a\u{e9}\"b"
        );
        // The number itself goes in as written.
        let big: Template = "{payload.big}".parse().unwrap();
        assert_eq!(big.render(&message).unwrap(), "1e400");
        assert_eq!(
            message.payload.as_str(),
            payload,
            "the payload is untouched"
        );
    }

    #[test]
    fn bad_templates_are_refused_naming_the_problem() {
        for (text, needle) in [
            ("x.{lane", "unclosed"),
            ("x.}", "lone"),
            ("x.{laen}", "unknown placeholder {laen}"),
            ("x.{header.}", "unknown placeholder {header.}"),
            ("x.{payload.}", "unknown placeholder {payload.}"),
            ("x.{payload.a..b}", "unknown placeholder {payload.a..b}"),
        ] {
            let error = text.parse::<Template>().unwrap_err().to_string();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
