//! [`FileConfigError`]: a config file that could not be used, named by file, position and
//! field, and how toml's parse errors become one.

use std::fmt;

/// A config file that could not be used. It names the file, and the field and position when
/// known; the binary prints it and exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileConfigError {
    origin: String,
    line: Option<usize>,
    column: Option<usize>,
    field: Option<String>,
    message: String,
}

impl FileConfigError {
    pub(super) fn new(origin: &str, field: Option<String>, message: impl Into<String>) -> Self {
        Self {
            origin: origin.to_owned(),
            line: None,
            column: None,
            field,
            message: message.into(),
        }
    }

    /// The file (or `embedded default`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The field at fault, when known (e.g. `lease`, `lanes[orders/billing].concurrency`).
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The 1-based line and column, when the TOML parser gave a position.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.line.zip(self.column)
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for FileConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some((line, column)) = self.position() {
            write!(f, ", line {line}, column {column}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ", field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for FileConfigError {}

/// Turns toml's error into one line naming the file, the position and, when the position
/// points at a `key = value` line, the key. A sink kind this build lacks is said so, with
/// the feature that brings it.
pub(super) fn parse_error(origin: &str, text: &str, error: &toml::de::Error) -> FileConfigError {
    let mut out = FileConfigError::new(origin, None, error.message().trim().to_owned());
    if let Some((field, kind, feature)) = sink_not_built(text, crate::sinks::missing_feature) {
        // Only when it is what toml stumbled on, so the position below stays the kind's.
        if out.message.contains(&format!("unknown variant `{kind}`")) {
            out.field = Some(field);
            out.message = format!(
                "the sink kind `{kind}` is not in this build of outbox-relay: it needs the \
                 cargo feature `{feature}` (`cargo install outbox-relay --features \
                 cli,{feature}`; the container image has every sink)"
            );
        }
    }
    if let Some(span) = error.span() {
        let start = span.start.min(text.len());
        let before = &text[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        out.line = Some(line);
        out.column = Some(before[line_start..].chars().count() + 1);
        // Name the key when the error points into a `key = value` line: serde's messages for
        // a bad value (a duration, an address) do not say which field held it.
        let line_text = text[line_start..].lines().next().unwrap_or("");
        if let Some((key, _)) = line_text.split_once('=') {
            let key = key.trim();
            let is_key = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if is_key && out.field.is_none() && !out.message.contains(&format!("`{key}`")) {
                out.field = Some(match enclosing_table(&text[..line_start]) {
                    Some(table) => format!("{table}.{key}"),
                    None => key.to_owned(),
                });
            }
        }
    }
    out
}

/// The name of the `[table]` whose keys the lines `above` end in (`postgres`), as the validation
/// errors name its fields (`postgres.vacuum_every`); none at the top level or in an array
/// of tables (`[[lanes]]`, whose errors name the lane instead).
fn enclosing_table(above: &str) -> Option<&str> {
    let header = above
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| line.starts_with('['))?;
    if header.starts_with("[[") {
        return None;
    }
    let name = header.strip_prefix('[')?.split(']').next()?.trim();
    (!name.is_empty()).then_some(name)
}

/// The first lane whose `sink.kind` is a kind `missing_feature` says this build lacks:
/// `(field, kind, feature)`. serde alone would call it an unknown variant, as it does a
/// misspelt kind, and leave the reader to guess which cargo feature was left out.
fn sink_not_built(
    text: &str,
    missing_feature: impl Fn(&str) -> Option<&'static str>,
) -> Option<(String, String, &'static str)> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let lanes = table.get("lanes")?.as_array()?;
    lanes.iter().enumerate().find_map(|(i, lane)| {
        let kind = lane.get("sink")?.get("kind")?.as_str()?;
        let feature = missing_feature(kind)?;
        let name = |key: &str| lane.get(key).and_then(toml::Value::as_str);
        let lane_key = match (name("lane"), name("target")) {
            (Some(lane), Some(target)) => format!("{lane}/{target}"),
            _ => i.to_string(),
        };
        Some((
            format!("lanes[{lane_key}].sink.kind"),
            kind.to_owned(),
            feature,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KAFKA_LANE: &str = r#"
[[lanes]]
lane = "orders"
target = "billing"
sink = { kind = "log" }

[[lanes]]
lane = "orders"
target = "ledger"
sink = { kind = "kafka", brokers = "127.0.0.1:9092", topic = "orders" }
"#;

    #[test]
    fn a_sink_kind_this_build_lacks_names_the_lane_and_the_feature() {
        let lacks_kafka = |kind: &str| (kind == "kafka").then_some("kafka-sink");
        assert_eq!(
            sink_not_built(KAFKA_LANE, lacks_kafka),
            Some((
                "lanes[orders/ledger].sink.kind".to_owned(),
                "kafka".to_owned(),
                "kafka-sink"
            ))
        );
        assert_eq!(sink_not_built(KAFKA_LANE, |_| None), None);
    }

    #[test]
    fn every_sink_kind_the_crate_has_parses_or_names_its_feature() {
        for (kind, feature, built) in crate::sinks::KINDS {
            let text = format!(
                "[[lanes]]\nlane = \"a\"\ntarget = \"b\"\nsink = {{ kind = \"{kind}\" }}\n"
            );
            let Err(error) = super::super::FileConfig::from_toml_str("relay.toml", &text) else {
                assert!(built, "{kind}: parsed without its feature");
                continue;
            };
            if built {
                // Built, the kind parses: what fails is a setting the bare kind lacks.
                assert!(
                    !error.message().contains("not in this build"),
                    "{kind}: {error}"
                );
            } else {
                assert_eq!(error.field(), Some("lanes[a/b].sink.kind"), "{error}");
                assert!(error.message().contains(&format!("`{feature}`")), "{error}");
                assert_eq!(error.position(), Some((4, 17)), "{error}");
            }
        }
    }
}
