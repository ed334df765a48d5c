//! What holds for the pages as a whole: the README stays short; every Rust snippet of the
//! README and the guide is compiled (a doc test of `src/lib.rs`, none ignored); dated
//! measurements live on the benchmark's page only; the counts the pages state are the
//! code's.

use crate::markdown::{pages, root, Page};

/// The README's bounds: a front door, not a manual.
const README_MAX_LINES: usize = 250;
const README_MAX_WIDTH: usize = 100;

/// The one page that holds measurements with their date and machine.
const BENCHMARK_PAGE: &str = "docs/src/benchmark.md";

#[test]
fn the_readme_is_at_most_250_lines_of_at_most_100_characters() {
    let readme = Page::read("README.md");
    let lines: Vec<&str> = readme.text.lines().collect();
    assert!(
        lines.len() <= README_MAX_LINES,
        "README.md has {} lines, over {README_MAX_LINES}: move the detail into the guide",
        lines.len()
    );
    let wide: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.chars().count() > README_MAX_WIDTH)
        .map(|(i, line)| format!("README.md:{}: {} characters", i + 1, line.chars().count()))
        .collect();
    assert!(
        wide.is_empty(),
        "lines over {README_MAX_WIDTH} characters:\n{}",
        wide.join("\n")
    );
}

#[test]
fn every_rust_snippet_is_a_doc_test_and_none_is_ignored() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    let mut problems = Vec::new();
    let mut snippets = 0;
    for page in pages() {
        let rust: Vec<_> = page
            .code_blocks()
            .into_iter()
            .filter(|block| block.lang() == "rust")
            .collect();
        if rust.is_empty() {
            continue;
        }
        snippets += rust.len();
        let include = format!("include_str!(\"../{}\")", page.path);
        if !lib.contains(&include) {
            problems.push(format!(
                "{}: has Rust snippets, but src/lib.rs does not compile it as doc tests ({include})",
                page.path
            ));
        }
        for block in rust {
            if block.info.split(',').any(|word| word.trim() == "ignore") {
                problems.push(format!("{}: a snippet marked ignore", page.at(block.start)));
            }
        }
    }
    assert!(snippets >= 5, "too few Rust snippets found ({snippets})");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `2026-12-04`-like dates that are not part of a timestamp (`…T05:40:12Z`, an example
/// value of the API).
fn dates(text: &str) -> Vec<(usize, &str)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    for i in 0..bytes.len().saturating_sub(9) {
        let candidate = &bytes[i..i + 10];
        let shape = candidate.iter().enumerate().all(|(j, b)| match j {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        });
        let boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let timestamp = bytes.get(i + 10) == Some(&b'T');
        if shape && boundary && !timestamp && candidate.starts_with(b"20") {
            found.push((i, &text[i..i + 10]));
        }
    }
    found
}

#[test]
fn dated_measurements_and_machine_talk_live_on_the_benchmark_page_only() {
    let mut problems = Vec::new();
    for page in pages() {
        if page.path == BENCHMARK_PAGE {
            continue;
        }
        for (offset, date) in dates(&page.text) {
            problems.push(format!("{}: the date {date}", page.at(offset)));
        }
        for phrase in [
            "load average",
            "cores",
            "2-core",
            "this machine",
            "test machine",
            "not met",
        ] {
            for (offset, _) in page.text.match_indices(phrase) {
                problems.push(format!("{}: {phrase:?}", page.at(offset)));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "measurements belong on {BENCHMARK_PAGE}, with their date and machine:\n{}",
        problems.join("\n")
    );
}

/// The cases `conformance!` runs per store: the names listed in `src/testing.rs`.
fn conformance_cases() -> usize {
    let source = std::fs::read_to_string(root().join("src/testing.rs")).expect("src/testing.rs");
    let list = source
        .split("@cases $make;")
        .nth(1)
        .and_then(|rest| rest.split(");").next())
        .expect("the conformance! macro's list of cases");
    list.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("//") && line.ends_with(','))
        .count()
}

#[test]
fn the_conformance_count_the_docs_state_is_the_macros() {
    let cases = conformance_cases();
    assert!(
        cases > 50,
        "too few cases read from src/testing.rs: {cases}"
    );
    let mut stated = Vec::new();
    for page in pages() {
        for (offset, _) in page.text.match_indices(" cases per store") {
            let number: String = page.text[..offset]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_digit())
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            stated.push((page.at(offset), number));
        }
    }
    assert!(
        !stated.is_empty(),
        "no page states how many cases the conformance suite runs"
    );
    for (at, number) in stated {
        assert_eq!(
            number,
            cases.to_string(),
            "{at}: the docs say {number} cases per store; `conformance!` runs {cases}"
        );
    }
}

/// The features of `Cargo.toml`'s `[features]` table, `default` left out.
fn cargo_features() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let table = manifest
        .split("\n[features]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a [features] table");
    table
        .lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with(' '))
        .filter_map(|line| {
            line.split_once(" = ")
                .map(|(name, _)| name.trim().to_owned())
        })
        .filter(|name| name != "default")
        .collect()
}

#[test]
fn the_features_table_has_a_row_per_cargo_feature() {
    let page = Page::read("docs/src/embedding.md");
    let section = page
        .section("The crate and its features")
        .expect("the embedding page's features");
    let rows = crate::markdown::table(section);
    let names = |keep: &dyn Fn(&Vec<String>) -> bool| -> Vec<String> {
        let mut names: Vec<String> = rows
            .iter()
            .skip(1)
            .filter(|row| keep(row))
            .flat_map(|row| crate::markdown::spans_of(&row[0]))
            .collect();
        names.sort();
        names
    };
    let mut features = cargo_features();
    features.sort();
    assert!(features.len() > 10, "too few features read: {features:?}");
    assert_eq!(
        names(&|_| true),
        features,
        "docs/src/embedding.md's features table against Cargo.toml"
    );
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let default_line = manifest
        .lines()
        .find(|line| line.starts_with("default = ["))
        .expect("the default features");
    let mut defaults: Vec<String> = default_line
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    defaults.sort();
    assert_eq!(
        names(&|row| row[1] == "yes"),
        defaults,
        "the features the table marks default against Cargo.toml's"
    );
}

/// The crate docs' component list: what docs.rs shows after the example, at most 20 lines
/// (the guide's architecture page has the rest).
#[test]
fn the_crate_docs_list_their_components_in_at_most_20_lines() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    let docs: Vec<&str> = lib
        .lines()
        .take_while(|line| line.starts_with("//!"))
        .map(|line| line.trim_start_matches("//!").trim_start())
        .collect();
    let start = docs
        .iter()
        .position(|line| *line == "## Components")
        .expect("src/lib.rs has a \"## Components\" section");
    let list: Vec<&&str> = docs[start + 1..]
        .iter()
        .skip_while(|line| line.is_empty())
        .take_while(|line| !line.is_empty())
        .collect();
    assert!(!list.is_empty(), "the component list is empty");
    assert!(
        list.len() <= 20,
        "the crate docs' component list has {} lines, over 20: the architecture page holds the rest",
        list.len()
    );
    assert!(
        docs.len() <= 100,
        "the crate docs are {} lines: a user's first lines, the main types and the components",
        docs.len()
    );
}
