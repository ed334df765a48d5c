//! Reading the documentation as its checks need it: the pages (the README and the user
//! guide under `docs/src/`), their fenced code blocks, inline code spans, links, headings
//! and tables. A small reader of the Markdown this project writes (CommonMark fences,
//! pipe tables, `[text](target)` links), not a general one.
//!
//! Shared by `tests/docs.rs` and `tests/cli/runbook.rs`, which include this file by path.

#![allow(dead_code)] // each includer uses its own part

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One page of the documentation.
#[derive(Debug, Clone)]
pub struct Page {
    /// Relative to the repository's root, with `/` separators: `README.md`,
    /// `docs/src/operations/runbook.md`.
    pub path: String,
    pub text: String,
}

impl Page {
    /// Reads `path`, relative to the repository's root.
    pub fn read(path: &str) -> Page {
        let text = std::fs::read_to_string(root().join(path))
            .unwrap_or_else(|error| panic!("{path}: {error}"));
        Page {
            path: path.to_owned(),
            text,
        }
    }

    /// The line of byte offset `at`, counted from 1.
    pub fn line_of(&self, at: usize) -> usize {
        self.text[..at.min(self.text.len())].matches('\n').count() + 1
    }

    /// Where the page is, for messages: `docs/src/daemon.md:42`.
    pub fn at(&self, offset: usize) -> String {
        format!("{}:{}", self.path, self.line_of(offset))
    }

    /// The page's fenced code blocks, in order.
    pub fn code_blocks(&self) -> Vec<CodeBlock> {
        code_blocks(&self.text)
    }

    /// The page's text outside fenced code blocks, with each block's lines blanked (so
    /// offsets and line numbers stay those of the page).
    pub fn prose(&self) -> String {
        let mut prose = self.text.clone();
        for block in self.code_blocks() {
            prose.replace_range(
                block.start..block.end,
                &blank(&self.text[block.start..block.end]),
            );
        }
        prose
    }

    /// The inline code spans of the prose (`` `like this` ``), with their offsets.
    pub fn code_spans(&self) -> Vec<(usize, String)> {
        code_spans(&self.prose())
    }

    /// The links and images of the prose: `[text](target)` and `![alt](target)`.
    pub fn links(&self) -> Vec<Link> {
        links(&strip_code_spans(&self.prose()))
    }

    /// The page's headings, each with the anchor GitHub and mdBook give it.
    pub fn headings(&self) -> Vec<Heading> {
        headings(&self.prose())
    }

    /// The page's section under the heading whose text is `title` (any level), up to the
    /// next heading of the same or a higher level.
    pub fn section(&self, title: &str) -> Option<&str> {
        let headings = self.headings();
        let index = headings.iter().position(|h| h.text == title)?;
        let heading = &headings[index];
        let end = headings[index + 1..]
            .iter()
            .find(|h| h.level <= heading.level)
            .map_or(self.text.len(), |h| h.offset);
        Some(&self.text[heading.offset..end])
    }
}

/// The README and every page of the guide (`docs/src/**/*.md`), README first, then the
/// guide's pages by path.
pub fn pages() -> Vec<Page> {
    let mut pages = vec![Page::read("README.md")];
    pages.extend(guide_pages());
    pages
}

/// Every page of the guide, by path.
pub fn guide_pages() -> Vec<Page> {
    let mut paths = Vec::new();
    collect_markdown(&root().join("docs/src"), &mut paths);
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let relative = path
                .strip_prefix(root())
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            Page::read(&relative)
        })
        .collect()
}

fn collect_markdown(dir: &Path, into: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_markdown(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            into.push(path);
        }
    }
}

/// A fenced code block.
#[derive(Debug, Clone)]
pub struct CodeBlock {
    /// The info string: `rust,no_run`, `sh`, `toml`, or empty.
    pub info: String,
    /// The lines between the fences.
    pub body: String,
    /// Byte offsets of the opening fence's start and the closing fence's end.
    pub start: usize,
    pub end: usize,
}

impl CodeBlock {
    /// The info string's first word: the language.
    pub fn lang(&self) -> &str {
        self.info
            .split([',', ' '])
            .next()
            .unwrap_or_default()
            .trim()
    }
}

/// The fenced code blocks of `text` (fences of three or more backticks or tildes,
/// possibly indented, as in a list item).
pub fn code_blocks(text: &str) -> Vec<CodeBlock> {
    struct Open {
        start: usize,
        fence: String,
        info: String,
        indent: usize,
        body_start: usize,
    }
    let mut blocks = Vec::new();
    let mut open: Option<Open> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = &line[indent..];
        let first = trimmed.chars().next().unwrap_or(' ');
        let fence: String = trimmed.chars().take_while(|&c| c == first).collect();
        let is_fence = (first == '`' || first == '~') && fence.len() >= 3;
        match &open {
            None if is_fence => {
                open = Some(Open {
                    start: offset,
                    info: trimmed[fence.len()..].trim().to_owned(),
                    fence,
                    indent,
                    body_start: offset + line.len(),
                });
            }
            Some(o)
                if is_fence
                    && fence.starts_with(o.fence.as_str())
                    && trimmed[fence.len()..].trim().is_empty() =>
            {
                let body: String = text[o.body_start..offset]
                    .split_inclusive('\n')
                    .map(|l| {
                        let spaces = l.len() - l.trim_start_matches(' ').len();
                        &l[spaces.min(o.indent)..]
                    })
                    .collect();
                blocks.push(CodeBlock {
                    info: o.info.clone(),
                    body,
                    start: o.start,
                    end: offset + line.len(),
                });
                open = None;
            }
            _ => {}
        }
        offset += line.len();
    }
    assert!(open.is_none(), "a code block is not closed");
    blocks
}

/// The inline code spans of `prose` (code blocks already blanked), with their offsets.
pub fn code_spans(prose: &str) -> Vec<(usize, String)> {
    code_span_ranges(prose)
        .into_iter()
        .map(|(start, _, content)| (start, content))
        .collect()
}

/// Each inline code span: its start, its end (after the closing backticks) and content.
fn code_span_ranges(prose: &str) -> Vec<(usize, usize, String)> {
    let mut spans = Vec::new();
    let bytes = prose.as_bytes();
    let ticks = |at: usize| bytes[at..].iter().take_while(|&&b| b == b'`').count();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = ticks(i);
        let content_start = i + run;
        // The closing run: exactly as many backticks.
        let mut j = content_start;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let closing = ticks(j);
                if closing == run {
                    end = Some(j);
                    break;
                }
                j += closing;
            } else {
                j += 1;
            }
        }
        match end {
            Some(end) => {
                let content = prose[content_start..end].replace('\n', " ");
                let content = if run > 1 {
                    content.trim().to_owned()
                } else {
                    content
                };
                spans.push((i, end + run, content));
                i = end + run;
            }
            None => i = content_start,
        }
    }
    spans
}

/// `prose` with every inline code span blanked (links inside code are not links).
pub fn strip_code_spans(prose: &str) -> String {
    let mut out = prose.to_owned();
    for (start, end, _) in code_span_ranges(prose) {
        out.replace_range(start..end, &blank(&prose[start..end]));
    }
    out
}

/// `text` as spaces of the same byte length, its line breaks kept.
fn blank(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '\n' {
                "\n".to_owned()
            } else {
                " ".repeat(c.len_utf8())
            }
        })
        .collect()
}

/// A link or an image.
#[derive(Debug, Clone)]
pub struct Link {
    pub offset: usize,
    pub target: String,
    pub image: bool,
}

/// The `[text](target)` links and `![alt](target)` images of `prose`.
pub fn links(prose: &str) -> Vec<Link> {
    let mut found = Vec::new();
    let mut search = 0;
    while let Some(at) = prose[search..].find("](") {
        let close = search + at;
        let target_start = close + 2;
        let Some(target_len) = prose[target_start..].find(')') else {
            break;
        };
        let target = prose[target_start..target_start + target_len]
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        // The opening bracket: the nearest `[` before, on the same paragraph.
        let open = prose[..close].rfind('[').unwrap_or(close);
        let image = open > 0 && prose.as_bytes()[open - 1] == b'!';
        found.push(Link {
            offset: open,
            target,
            image,
        });
        search = target_start + target_len;
    }
    found
}

/// A heading, with the anchor GitHub and mdBook give it.
#[derive(Debug, Clone)]
pub struct Heading {
    pub level: usize,
    /// The text as written, markup included.
    pub text: String,
    pub anchor: String,
    pub offset: usize,
}

/// The ATX headings (`## Title`) of `prose`, with their anchors made unique as GitHub and
/// mdBook make them (`-1`, `-2`, … after the first).
pub fn headings(prose: &str) -> Vec<Heading> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = Vec::new();
    let mut offset = 0;
    for line in prose.split_inclusive('\n') {
        let level = line.bytes().take_while(|&b| b == b'#').count();
        if (1..=6).contains(&level) && line[level..].starts_with(' ') {
            let text = line[level..].trim().to_owned();
            let base = anchor(&text);
            let count = seen.entry(base.clone()).or_insert(0);
            let anchor = if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            found.push(Heading {
                level,
                text,
                anchor,
                offset,
            });
        }
        offset += line.len();
    }
    found
}

/// The anchor of a heading's text: its words, lowercased, joined by `-`, with the markup
/// and punctuation left out (`` `outbox-relay` and its config `` →
/// `outbox-relay-and-its-config`): GitHub's rule and mdBook's.
pub fn anchor(heading: &str) -> String {
    // Links keep their text; emphasis and code markers go.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The rows of the first pipe table in `text`, each as its trimmed cells (the header row
/// first, the `|---|` row left out).
pub fn table(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut started = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('|') {
            started = true;
            if line
                .trim_matches(|c| c == '|' || c == '-' || c == ':' || c == ' ')
                .is_empty()
            {
                continue;
            }
            rows.push(split_row(line));
        } else if started {
            break;
        }
    }
    rows
}

/// The cells of one table row: split on `|` outside code spans (`` `a|b` `` is one cell;
/// `\|` is a literal bar).
pub fn split_row(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    cells.push(cell.trim().to_owned());
    cells
}

/// The text of every code span in `cell` (`` `a` or `b` `` → `["a", "b"]`).
pub fn spans_of(cell: &str) -> Vec<String> {
    code_spans(cell).into_iter().map(|(_, span)| span).collect()
}

/// Splits a shell line into words: single and double quotes, backslash escapes, and a
/// `#` comment after a space.
pub fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("an unclosed ' in {line:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.extend(chars.next()),
                        Some(c) => word.push(c),
                        None => return Err(format!("an unclosed \" in {line:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_follow_github_and_mdbook() {
        assert_eq!(anchor("Getting started"), "getting-started");
        assert_eq!(anchor("`outbox-relay simulate`"), "outbox-relay-simulate");
        assert_eq!(anchor("TLS (PostgreSQL)"), "tls-postgresql");
        assert_eq!(anchor("The web UI (`/ui`)"), "the-web-ui-ui");
        assert_eq!(anchor("OutboxLaneFailed"), "outboxlanefailed");
        assert_eq!(anchor("[Sinks](sinks.md) and more"), "sinks-and-more");
    }

    #[test]
    fn code_spans_and_blocks_are_told_apart() {
        let text = "a `b` c ``d ` e``\n```sh\nx `y`\n```\n| `p|q` | r |\n";
        let page = Page {
            path: "t.md".into(),
            text: text.into(),
        };
        let blocks = page.code_blocks();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].lang(), "sh");
        assert_eq!(blocks[0].body, "x `y`\n");
        let spans: Vec<String> = page.code_spans().into_iter().map(|(_, s)| s).collect();
        assert_eq!(spans, ["b", "d ` e", "p|q"]);
        assert_eq!(split_row("| `p|q` | r |"), ["`p|q`", "r"]);
    }
}
