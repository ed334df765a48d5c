//! The README's embedding is `examples/readme-crate/`, a crate of its own that `.ci/run`
//! builds and runs against PostgreSQL: its `[dependencies]` are the README's Cargo lines
//! (with outbox-relay by path) and its `src/relay.rs` is the README's Rust snippet,
//! character for character. These tests keep the two equal, so what CI runs is what a
//! reader copies.

use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first fenced block opening with "```{lang}" after `heading` in the README.
fn readme_block(heading: &str, lang: &str) -> String {
    let readme = read("README.md");
    let section = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README has no heading {heading:?}"));
    let fence = format!("```{lang}\n");
    let start = readme[section..]
        .find(&fence)
        .map(|at| section + at + fence.len())
        .unwrap_or_else(|| panic!("README has no {fence:?} block after {heading:?}"));
    let end = readme[start..]
        .find("```\n")
        .map(|at| start + at)
        .unwrap_or_else(|| panic!("README's {fence:?} block after {heading:?} is not closed"));
    readme[start..end].to_string()
}

const HEADING: &str = "## Three ways to run it\n";

#[test]
fn the_readme_snippet_is_the_crates_relay_module() {
    let readme = readme_block(HEADING, "rust,no_run");
    let module = read("examples/readme-crate/src/relay.rs");
    assert_eq!(
        readme, module,
        "README's embedding snippet and examples/readme-crate/src/relay.rs differ"
    );
}

#[test]
fn the_readme_cargo_lines_are_the_crates_dependencies() {
    let readme = readme_block(HEADING, "toml");
    let manifest = read("examples/readme-crate/Cargo.toml");
    let dependencies = &manifest[manifest
        .find("[dependencies]\n")
        .expect("examples/readme-crate/Cargo.toml has a [dependencies] table")..];
    let version = env!("CARGO_PKG_VERSION");
    let major_minor = version.rsplit_once('.').map_or(version, |(head, _)| head);
    let as_published = dependencies.replace(
        r#"outbox-relay = { path = "../..", "#,
        &format!(r#"outbox-relay = {{ version = "{major_minor}", "#),
    );
    assert_eq!(
        readme, as_published,
        "README's Cargo lines and examples/readme-crate's [dependencies] differ"
    );
}
