//! The message body, kept as the exact JSON text it was given.
//!
//! A relay delivers the bytes it was given: a payload is never parsed into a
//! `serde_json::Value` and written back, because that rewrites it (integers past `u64`
//! become floats, keys are re-sorted, duplicate keys collapse, whitespace changes). Every
//! store keeps the text as is and hands the same bytes to the handler.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::ValidationError;

/// A message body: one well-formed JSON value, kept byte for byte.
///
/// Whitespace around the value is not part of it and is dropped; everything inside (key
/// order, duplicate keys, number spelling, escapes, whitespace) is kept.
///
/// ```
/// use outbox_relay::message::Payload;
/// let payload = Payload::from_json(r#"{"id": 18446744073709551616, "b": 1, "a": 2}"#)?;
/// assert_eq!(payload.as_str(), r#"{"id": 18446744073709551616, "b": 1, "a": 2}"#);
/// assert!(Payload::from_json("{not json").is_err());
/// # Ok::<(), outbox_relay::message::ValidationError>(())
/// ```
#[derive(Clone)]
pub struct Payload(Box<RawValue>);

impl Payload {
    /// The payload for JSON text, checked to be one well-formed JSON value. The error names
    /// the field `payload` and says where the text stops being JSON.
    pub fn from_json(text: impl Into<String>) -> Result<Self, ValidationError> {
        RawValue::from_string(text.into())
            .map(Self)
            .map_err(|error| ValidationError::new("payload", format!("is not valid JSON: {error}")))
    }

    /// The payload for `value`, serialised once with `serde_json`: the bytes delivered are
    /// exactly what `serde_json::to_string(value)` gives.
    pub fn from_serialize<T: Serialize + ?Sized>(value: &T) -> Result<Self, ValidationError> {
        serde_json::value::to_raw_value(value)
            .map(Self)
            .map_err(|error| {
                ValidationError::new("payload", format!("cannot be serialised as JSON: {error}"))
            })
    }

    /// The payload for a `serde_json::Value`, in its compact form.
    pub fn from_value(value: &serde_json::Value) -> Result<Self, ValidationError> {
        Self::from_serialize(value)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The JSON text as bytes: what a sink sends.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.get().as_bytes()
    }

    /// The payload as `serde_json`'s borrowed raw value, to embed unchanged in other JSON.
    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// The payload parsed into a `serde_json::Value`. This is lossy where `Value` is: an
    /// integer past `u64` becomes a float and duplicate keys collapse to the last one. It
    /// fails on a number past `f64`'s range and on nesting deeper than 128 levels.
    pub fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(self.as_str())
    }

    /// The payload parsed into `T`.
    pub fn deserialize<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.as_str())
    }

    /// Where the payload holds a NUL character, if anywhere: `$.a[1]`, `$ (a key)`, or the
    /// byte offset of the escape when the path cannot be worked out.
    pub(crate) fn nul_at(&self) -> Option<String> {
        let offset = escaped_nul(self.as_str())?;
        // The path is only for the error message, so a payload `Value` cannot hold (a huge
        // number) falls back to the offset rather than hiding the NUL.
        let path = self
            .to_value()
            .ok()
            .and_then(|value| nul_in(&value, &mut String::from("$")));
        Some(path.unwrap_or_else(|| format!("byte {offset}")))
    }
}

/// The byte offset of the first `\u0000` escape in JSON text. In well-formed JSON a NUL can
/// appear only that way: a raw U+0000 is refused inside strings and is not whitespace.
fn escaped_nul(json: &str) -> Option<usize> {
    let bytes = json.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            // Step over the escaped character too, so `\\u0000` (a backslash, then the
            // text `u0000`) is not taken for a NUL.
            if bytes.get(i + 1) == Some(&b'u') && bytes.get(i + 2..i + 6) == Some(b"0000") {
                return Some(i);
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    None
}

/// Where in `value` a string or an object key holds a NUL (`$.a[2]`), if anywhere.
fn nul_in(value: &serde_json::Value, path: &mut String) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(text) if text.contains('\0') => Some(path.clone()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = nul_in(item, path);
            path.truncate(len);
            found
        }),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                return Some(format!("{path} (a key)"));
            }
            let len = path.len();
            path.push_str(&format!(".{key}"));
            let found = nul_in(item, path);
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

impl From<Box<RawValue>> for Payload {
    fn from(raw: Box<RawValue>) -> Self {
        Self(raw)
    }
}

impl TryFrom<serde_json::Value> for Payload {
    type Error = ValidationError;

    fn try_from(value: serde_json::Value) -> Result<Self, Self::Error> {
        Self::from_value(&value)
    }
}

/// Two payloads are equal when their bytes are: `{"a":1}` and `{ "a": 1 }` differ, as they
/// would on the wire.
impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Payload {}

/// A payload equals a `Value` when it parses to it: a convenience for tests and handlers
/// that do not care about the bytes.
impl PartialEq<serde_json::Value> for Payload {
    fn eq(&self, other: &serde_json::Value) -> bool {
        self.to_value().is_ok_and(|value| value == *other)
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Payload").field(&self.as_str()).finish()
    }
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Serialises as the JSON value itself (not a string holding it), byte for byte with
/// `serde_json`.
impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Deserialises from a JSON value, keeping its text; only `serde_json` can do this.
impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_is_kept_byte_for_byte() {
        for text in [
            r#"{"id":18446744073709551616}"#,
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":2}"#,
            "{ \"a\" :\n\t[1 , 2.50, 1e400] }",
            r#""caf\u00e9 ☕ \ud83d\ude00""#,
        ] {
            let payload = Payload::from_json(text).unwrap();
            assert_eq!(payload.as_str(), text);
            assert_eq!(serde_json::to_string(&payload).unwrap(), text);
            let back: Payload = serde_json::from_str(text).unwrap();
            assert_eq!(back, payload);
        }
        assert_eq!(Payload::from_json("  [1] \n").unwrap().as_str(), "[1]");
    }

    #[test]
    fn invalid_json_names_the_payload() {
        for text in ["", "{", "{\"a\":1} x", "{'a':1}", "nul\u{0}"] {
            let err = Payload::from_json(text).unwrap_err();
            assert_eq!(err.field, "payload", "{text:?}");
            assert!(
                err.reason.starts_with("is not valid JSON"),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn values_and_serializable_types_are_serialised_once() {
        let payload = Payload::from_value(&json!({"b": 1, "a": [true, null]})).unwrap();
        assert_eq!(payload, json!({"a": [true, null], "b": 1}));
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Order {
            id: u128,
        }
        let order = Payload::from_serialize(&Order { id: u128::MAX }).unwrap();
        assert_eq!(order.as_str(), format!("{{\"id\":{}}}", u128::MAX));
        assert_eq!(
            order.deserialize::<Order>().unwrap(),
            Order { id: u128::MAX }
        );
    }

    #[test]
    fn an_escaped_nul_is_found_and_an_escaped_backslash_is_not() {
        let at = |text: &str| Payload::from_json(text).unwrap().nul_at();
        assert_eq!(at(r#"{"a":[1,"x\u0000"]}"#).as_deref(), Some("$.a[1]"));
        assert_eq!(at(r#"{"a\u0000":1}"#).as_deref(), Some("$ (a key)"));
        assert_eq!(at(r#"[1e400,"\u0000"]"#).as_deref(), Some("byte 8"));
        assert_eq!(at(r#"["\\u0000", "\u0001"]"#), None);
        assert_eq!(at(r#"["\\\u0000"]"#).as_deref(), Some("$[0]"));
    }
}
