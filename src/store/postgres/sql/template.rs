//! How a statement is put together from its files: a file may hold placeholders,
//! `{{name}}`, which [`fill`] replaces with the text the caller names for them, once, when
//! the store's statements are made. No other syntax: what goes where is said in `sql.rs`.

/// A text whose placeholders and the parts given for them do not match. The files are
/// part of the build, so this is a defect of the build; the store refuses to start with it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    /// A placeholder that no given part fills.
    #[error("the SQL placeholder {{{{{0}}}}} has no part")]
    Unknown(String),
    /// A given part that no placeholder asks for.
    #[error("the SQL part `{0}` fills no placeholder")]
    Unused(String),
    /// A `{{` without its `}}`.
    #[error("an SQL placeholder is not closed: `{0}`")]
    Unclosed(String),
}

/// `text` with each `{{name}}` replaced by the part named `name` in `parts`. Every
/// placeholder must have a part and every part a placeholder. The parts are put in as they
/// are: a placeholder in a part is filled beforehand, by its own call.
pub(crate) fn fill(text: &str, parts: &[(&str, &str)]) -> Result<String, TemplateError> {
    let mut used = vec![false; parts.len()];
    let mut out =
        String::with_capacity(text.len() + parts.iter().map(|p| p.1.len()).sum::<usize>());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            TemplateError::Unclosed(rest[start..].lines().next().unwrap_or("").into())
        })?;
        let name = &after[..end];
        let index = parts
            .iter()
            .position(|(part, _)| *part == name)
            .ok_or_else(|| TemplateError::Unknown(name.into()))?;
        used[index] = true;
        out.push_str(parts[index].1);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    match used.iter().position(|used| !used) {
        Some(index) => Err(TemplateError::Unused(parts[index].0.into())),
        None => Ok(out),
    }
}

/// The text of a part's file (`sql/part/*.sql`): without the comment lines that open it,
/// which tell its reader what it is and what its placeholders take, and without its last
/// line end, as a part most often sits inside a line.
pub(crate) fn part(file: &str) -> &str {
    let mut rest = file;
    while rest.starts_with("--") {
        rest = rest.split_once('\n').map_or("", |(_, after)| after);
    }
    rest.strip_suffix('\n').unwrap_or(rest)
}
