//! `.ci/run`: it runs every test target in some tier, CONTRIBUTING.md documents each tier,
//! and, since it runs on shared machines, it never stops a process it did not start.

use std::collections::BTreeSet;
use std::path::Path;

fn repo_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ci_script() -> String {
    repo_file(".ci/run")
}

/// The commands of the script, comments left out.
fn command_lines(script: &str) -> Vec<&str> {
    script
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// The words of the bash array `name=( … )` (one line per element, quoted).
fn bash_array(script: &str, name: &str) -> Vec<String> {
    let start = script
        .find(&format!("\n{name}=("))
        .unwrap_or_else(|| panic!(".ci/run has no array {name}"));
    let body = &script[start + name.len() + 3..];
    let body = &body[..body.find(')').expect("the array ends")];
    if !body.contains('"') {
        return body.split_whitespace().map(str::to_owned).collect();
    }
    body.lines()
        .map(str::trim)
        .filter(|line| line.starts_with('"'))
        .map(|line| line.trim_matches('"').to_owned())
        .collect()
}

/// The features of plain `cargo test`: the default ones and those the crate's dev-dependency
/// on itself turns on.
fn default_tier_features(manifest: &toml::Table) -> BTreeSet<String> {
    let strings = |value: &toml::Value| -> Vec<String> {
        value
            .as_array()
            .expect("an array")
            .iter()
            .map(|v| v.as_str().expect("a string").to_owned())
            .collect()
    };
    let mut features: BTreeSet<String> = strings(&manifest["features"]["default"])
        .into_iter()
        .collect();
    let myself = &manifest["dev-dependencies"]["outbox-relay"];
    features.extend(strings(&myself["features"]));
    // A feature's own features.
    loop {
        let implied: Vec<String> = features
            .iter()
            .filter_map(|f| manifest["features"].get(f))
            .flat_map(strings)
            .filter(|f| !f.contains(':') && !f.contains('/'))
            .filter(|f| !features.contains(f))
            .collect();
        if implied.is_empty() {
            return features;
        }
        features.extend(implied);
    }
}

/// The features a target's source requires with a crate-level `#![cfg(…)]`.
fn source_features(source: &str) -> Vec<String> {
    let Some(cfg) = source.lines().find(|line| line.starts_with("#![cfg(")) else {
        return Vec::new();
    };
    cfg.split("feature = \"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').expect("a quoted feature")].to_owned())
        .collect()
}

/// The features a target's modules require, each with a `#[cfg(feature = "…")]` line of its
/// own in the target's file (`tests/postgres.rs`'s plan guards need `plans`).
fn module_features(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| line.trim().strip_prefix("#[cfg(feature = \""))
        .filter_map(|rest| rest.strip_suffix("\")]"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_test_target_runs_in_a_tier() {
    let manifest: toml::Table = toml::from_str(&repo_file("Cargo.toml")).expect("Cargo.toml");
    let plain = default_tier_features(&manifest);
    let script = ci_script();
    let selected: BTreeSet<String> = bash_array(&script, "TIER_RUNS")
        .iter()
        .flat_map(|run| {
            let words: Vec<&str> = run.split_whitespace().collect();
            words
                .windows(2)
                .filter(|w| w[0] == "--test")
                .map(|w| w[1].to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    // The targets: tests/NAME.rs and tests/NAME/main.rs, with Cargo.toml's required-features.
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")).unwrap() {
        let path = entry.unwrap().path();
        let (name, source) = if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            (name, path.clone())
        } else if path.join("main.rs").is_file() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, path.join("main.rs"))
        } else {
            continue;
        };
        targets.push((name, std::fs::read_to_string(source).unwrap()));
    }
    assert!(
        targets.len() > 20,
        "only {} test targets found",
        targets.len()
    );
    let declared = manifest["test"].as_array().expect("[[test]] tables");
    let mut orphans = Vec::new();
    for (name, source) in &targets {
        let required: Vec<String> = declared
            .iter()
            .find(|t| t["name"].as_str() == Some(name))
            .and_then(|t| t.get("required-features"))
            .and_then(|f| f.as_array())
            .map(|f| f.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        let in_source = source_features(source);
        let in_plain_cargo_test = required.iter().chain(&in_source).all(|f| plain.contains(f));
        if !in_plain_cargo_test && !selected.contains(name) {
            orphans.push(name.clone());
        }
        // A module behind a feature plain `cargo test` lacks runs only in a tier's
        // `--all-features` build.
        let modules_in_plain = module_features(source).iter().all(|f| plain.contains(f));
        if !modules_in_plain && !selected.contains(name) {
            orphans.push(format!("{name} (a module behind a feature)"));
        }
    }
    assert!(
        orphans.is_empty(),
        "test targets that neither plain `cargo test` builds nor a tier of .ci/run selects \
         (add `--test NAME` to a TIER_RUNS line): {orphans:?}"
    );
    // And no tier names a target that does not exist.
    let names: BTreeSet<&String> = targets.iter().map(|(name, _)| name).collect();
    let unknown: Vec<&String> = selected.iter().filter(|s| !names.contains(s)).collect();
    assert!(
        unknown.is_empty(),
        ".ci/run selects no such targets: {unknown:?}"
    );
}

#[test]
fn contributing_shows_the_command_of_every_tier() {
    let script = ci_script();
    let tiers = bash_array(&script, "TIERS");
    assert!(tiers.len() >= 8, "tiers: {tiers:?}");
    for run in bash_array(&script, "TIER_RUNS") {
        let tier = run.split(':').next().unwrap().to_owned();
        assert!(
            tiers.contains(&tier),
            "TIER_RUNS names tier {tier:?}, which TIERS lacks"
        );
    }
    let contributing = repo_file("CONTRIBUTING.md");
    let missing: Vec<&String> = tiers
        .iter()
        .filter(|tier| !contributing.contains(&format!("`.ci/run {tier}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md lacks `.ci/run TIER` for {missing:?}"
    );
}

#[test]
fn ci_never_kills_processes_by_name() {
    let script = ci_script();
    let by_name: Vec<&str> = command_lines(&script)
        .into_iter()
        .filter(|line| {
            line.split(|c: char| c.is_whitespace() || c == ';' || c == '|' || c == '&')
                .any(|word| matches!(word, "pkill" | "killall" | "pgrep"))
        })
        .collect();
    assert!(
        by_name.is_empty(),
        ".ci/run stops processes by name: {by_name:#?}"
    );
}

#[test]
fn ci_keeps_the_packages_of_servers_the_tests_start_from_starting_theirs() {
    let script = ci_script();
    let lines = command_lines(&script);
    // The function's body: up to the closing brace at the start of a line.
    let start = script
        .find("\napt_install_without_starting() {\n")
        .expect(".ci/run has apt_install_without_starting");
    let end = start + script[start..].find("\n}\n").expect("the function ends");
    let body = command_lines(&script[start..end]);
    let policy = body
        .iter()
        .position(|l| l.contains("exit 101") && l.contains("$policy"));
    let install = body
        .iter()
        .position(|l| l.starts_with("apt_install \"$@\""));
    assert!(
        matches!((policy, install), (Some(p), Some(i)) if p < i),
        "apt_install_without_starting installs without a policy-rc.d that forbids starting \
         services: {body:#?}"
    );
    for package in ["prometheus", "pgbouncer"] {
        assert!(
            lines
                .iter()
                .any(|l| l.ends_with(&format!("apt_install_without_starting {package}"))),
            "{package} is not installed through apt_install_without_starting"
        );
        assert!(
            !lines
                .iter()
                .any(|l| l.contains(&format!("apt_install {package}"))),
            "{package} is installed with a plain apt_install, which lets it start its server"
        );
    }
}
