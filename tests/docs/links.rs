//! Every relative link and anchor of the README and the guide resolves, and so does every
//! link into this repository by its GitHub address; the guide's table of contents
//! (`docs/src/SUMMARY.md`) lists every page once.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use crate::markdown::{pages, root, Page};

/// This repository's GitHub address, as `Cargo.toml` states it: a link that starts with it
/// and `/blob/main/` or `/tree/main/` names a file of the repository.
const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");

/// The other Markdown files beside the code whose links are checked too.
const BESIDE: &[&str] = &["grafana/README.md", "migrations/README.md"];

/// What a link points into: a file of the repository (relative to the root) and an anchor.
fn resolve(page: &Page, target: &str) -> Option<(PathBuf, Option<String>)> {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor.to_owned())),
        None => (target, None),
    };
    let in_repository = [
        format!("{REPOSITORY}/blob/main/"),
        format!("{REPOSITORY}/tree/main/"),
    ]
    .into_iter()
    .find_map(|prefix| path.strip_prefix(prefix.as_str()).map(PathBuf::from));
    if let Some(relative) = in_repository {
        return Some((relative, anchor));
    }
    if path.contains("://") || path.starts_with("mailto:") {
        return None; // another site: not ours to check offline
    }
    let base = Path::new(&page.path).parent().unwrap_or(Path::new(""));
    let joined = if path.is_empty() {
        PathBuf::from(&page.path)
    } else {
        base.join(path)
    };
    Some((normalize(&joined), anchor))
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn checked_pages() -> Vec<Page> {
    let mut all = pages();
    all.extend(BESIDE.iter().map(|path| Page::read(path)));
    all
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in checked_pages() {
        for link in page.links() {
            let Some((path, anchor)) = resolve(&page, &link.target) else {
                continue;
            };
            checked += 1;
            let file = root().join(&path);
            if !file.exists() {
                broken.push(format!(
                    "{}: {} (no file {})",
                    page.at(link.offset),
                    link.target,
                    path.display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if path.extension().is_none_or(|ext| ext != "md") {
                broken.push(format!(
                    "{}: {} (an anchor into a file that is not Markdown)",
                    page.at(link.offset),
                    link.target
                ));
                continue;
            }
            let target = Page::read(&path.to_string_lossy());
            if !target.headings().iter().any(|h| h.anchor == anchor) {
                broken.push(format!(
                    "{}: {} (no heading of {} has the anchor #{anchor})",
                    page.at(link.offset),
                    link.target,
                    path.display()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "too few links found ({checked}): is the reader broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_table_of_contents_lists_every_page_of_the_guide_once() {
    let summary = Page::read("docs/src/SUMMARY.md");
    let mut listed = Vec::new();
    for link in summary.links() {
        let (path, _) = resolve(&summary, &link.target).expect("a page of the guide");
        listed.push(path);
    }
    let unique: BTreeSet<&PathBuf> = listed.iter().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a page listed twice: {listed:?}"
    );
    let pages: BTreeSet<PathBuf> = pages()
        .iter()
        .filter(|page| page.path.starts_with("docs/src/") && page.path != "docs/src/SUMMARY.md")
        .map(|page| PathBuf::from(&page.path))
        .collect();
    let listed: BTreeSet<PathBuf> = listed.into_iter().collect();
    let missing: Vec<_> = pages.difference(&listed).collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
    let absent: Vec<_> = listed.difference(&pages).collect();
    assert!(
        absent.is_empty(),
        "SUMMARY.md lists pages that do not exist: {absent:?}"
    );
}

#[test]
fn the_link_reader_resolves_paths_and_anchors() {
    let page = Page {
        path: "docs/src/operations/runbook.md".into(),
        text: String::new(),
    };
    assert_eq!(
        resolve(&page, "../daemon.md#the-config-file"),
        Some((
            PathBuf::from("docs/src/daemon.md"),
            Some("the-config-file".into())
        ))
    );
    assert_eq!(
        resolve(&page, "#outboxlanefailed"),
        Some((
            PathBuf::from("docs/src/operations/runbook.md"),
            Some("outboxlanefailed".into())
        ))
    );
    assert_eq!(
        resolve(&page, &format!("{REPOSITORY}/blob/main/grafana/alerts.yml")),
        Some((PathBuf::from("grafana/alerts.yml"), None))
    );
    assert_eq!(resolve(&page, "https://example.com/x"), None);
}
