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
/// points at a `key = value` line, the key.
pub(super) fn parse_error(origin: &str, text: &str, error: &toml::de::Error) -> FileConfigError {
    let mut out = FileConfigError::new(origin, None, error.message().trim().to_owned());
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
            if is_key && !out.message.contains(&format!("`{key}`")) {
                out.field = Some(key.to_owned());
            }
        }
    }
    out
}
