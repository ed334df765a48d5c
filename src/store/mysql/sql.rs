//! The store's SQL as text: the migrations (`migrations/mysql/`) and the statements in
//! `sql/` are written for the default table prefix `outbox`, so a DBA runs them as they
//! are; [`for_prefix`] makes them the configured prefix's, and [`statements`] splits a
//! migration into the statements the store sends one by one.
//!
//! Both read the text the way the server does: backquoted names, quoted strings and
//! comments are each one piece, so a `;` or an `outbox_` inside them is not taken for
//! code. Only two kinds of piece are renamed, each matched whole:
//! - a backquoted table name, `` `outbox_messages` `` and the other tables of [`TABLES`];
//! - the string `'outbox'` (the prefix in the migration lock's name).
//!
//! Nothing else changes: a column such as `outbox_id`, a name inside a comment or a string
//! such as `'outbox-relay migrate '` stay as written. The files quote every table name,
//! which the tests check.

use super::DEFAULT_TABLE_PREFIX;

/// The tables of one outbox, without the prefix.
pub(super) const TABLES: [&str; 5] = [
    "messages",
    "keys",
    "lane_control",
    "served_lanes",
    "migrations",
];

/// One piece of SQL text, as the server reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece<'a> {
    /// Code outside names, strings and comments.
    Code(&'a str),
    /// A backquoted name, with its quotes.
    Name(&'a str),
    /// A string in single or double quotes, with its quotes.
    Text(&'a str),
    /// A comment: `-- ` or `#` to the end of the line, or `/* … */`.
    Comment(&'a str),
}

/// Splits `sql` into its pieces, which put back together are `sql`. An unterminated quote
/// or comment runs to the end of the text.
fn pieces<'s>(sql: &'s str) -> Vec<Piece<'s>> {
    let bytes = sql.as_bytes();
    let mut pieces = Vec::new();
    let mut code_from = 0;
    let mut i = 0;
    // Every boundary found is next to an ASCII byte, so every slice is on a char boundary.
    while i < bytes.len() {
        let rest = &bytes[i..];
        let (end, piece): (usize, fn(&'s str) -> Piece<'s>) = match rest {
            [b'`', ..] => (quoted_end(bytes, i, b'`', false), Piece::Name),
            [q @ (b'\'' | b'"'), ..] => (quoted_end(bytes, i, *q, true), Piece::Text),
            [b'-', b'-', ws, ..] if ws.is_ascii_whitespace() => {
                (line_end(bytes, i), Piece::Comment)
            }
            [b'-', b'-'] | [b'#', ..] => (line_end(bytes, i), Piece::Comment),
            [b'/', b'*', ..] => (
                find(bytes, i + 2, b"*/").map_or(bytes.len(), |at| at + 2),
                Piece::Comment,
            ),
            _ => {
                i += 1;
                continue;
            }
        };
        if code_from < i {
            pieces.push(Piece::Code(&sql[code_from..i]));
        }
        pieces.push(piece(&sql[i..end]));
        i = end;
        code_from = end;
    }
    if code_from < bytes.len() {
        pieces.push(Piece::Code(&sql[code_from..]));
    }
    pieces
}

/// Where the quoted piece opened at `start` ends (after its closing quote). A doubled quote
/// stands for itself; in strings a backslash escapes the next byte.
fn quoted_end(bytes: &[u8], start: usize, quote: u8, backslash: bool) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if backslash => i += 2,
            b if b == quote && bytes.get(i + 1) == Some(&quote) => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The end of the line that `start` is on (before its newline).
fn line_end(bytes: &[u8], start: usize) -> usize {
    find(bytes, start, b"\n").unwrap_or(bytes.len())
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| from + at)
}

/// `sql`, written for the prefix `outbox`, for the tables of `prefix` (already validated:
/// lowercase letters, digits and `_`). See the module docs for what changes.
pub(super) fn for_prefix(sql: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    for piece in pieces(sql) {
        match piece {
            Piece::Name(name) => match table_of(name) {
                Some(table) => out.push_str(&format!("`{prefix}_{table}`")),
                None => out.push_str(name),
            },
            Piece::Text(text) if text == format!("'{DEFAULT_TABLE_PREFIX}'") => {
                out.push_str(&format!("'{prefix}'"));
            }
            Piece::Code(text) | Piece::Text(text) | Piece::Comment(text) => {
                out.push_str(text);
            }
        }
    }
    out
}

/// The table a backquoted name of the default prefix names: `` `outbox_keys` `` → `keys`.
fn table_of(quoted: &str) -> Option<&'static str> {
    let name = quoted.strip_prefix('`')?.strip_suffix('`')?;
    let table = name.strip_prefix(DEFAULT_TABLE_PREFIX)?.strip_prefix('_')?;
    TABLES.into_iter().find(|t| *t == table)
}

/// The statements of a script, in order: split at each `;` outside names, strings and
/// comments, each from its first code to its last (the comments and blanks around it
/// dropped). Text with no code in it (only comments) is no statement. Like the `mysql`
/// client without `DELIMITER`, so a file holds no stored program.
pub(super) fn statements(sql: &str) -> Vec<&str> {
    let mut statements = Vec::new();
    // The span of code of the statement being read, once it has any.
    let mut span: Option<(usize, usize)> = None;
    let mut offset = 0;
    for piece in pieces(sql) {
        match piece {
            Piece::Code(text) => {
                let mut from = 0;
                for (at, _) in text.match_indices(';') {
                    extend(&mut span, offset + from, &text[from..at]);
                    if let Some((begin, end)) = span.take() {
                        statements.push(&sql[begin..end]);
                    }
                    from = at + 1;
                }
                extend(&mut span, offset + from, &text[from..]);
            }
            Piece::Name(text) | Piece::Text(text) => extend(&mut span, offset, text),
            Piece::Comment(_) => {}
        }
        offset += piece_len(piece);
    }
    if let Some((begin, end)) = span {
        statements.push(&sql[begin..end]);
    }
    statements
}

/// Extends the span of code `span` over `text`, found at `from`, if it holds code.
fn extend(span: &mut Option<(usize, usize)>, from: usize, text: &str) {
    let trimmed = text.trim();
    if !trimmed.is_empty() {
        let first = from + (text.len() - text.trim_start().len());
        let begin = span.map_or(first, |(begin, _)| begin);
        *span = Some((begin, first + trimmed.len()));
    }
}

fn piece_len(piece: Piece<'_>) -> usize {
    match piece {
        Piece::Code(t) | Piece::Name(t) | Piece::Text(t) | Piece::Comment(t) => t.len(),
    }
}

#[cfg(test)]
mod tests;
