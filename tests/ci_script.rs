//! `.ci/run` runs on shared machines: it must never stop a process it did not start.

use std::path::Path;

fn ci_script() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The commands of the script, comments left out.
fn command_lines(script: &str) -> Vec<&str> {
    script
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
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
fn ci_keeps_the_prometheus_package_from_starting_its_server() {
    let script = ci_script();
    let lines = command_lines(&script);
    let install = lines
        .iter()
        .position(|line| *line == "apt_install prometheus")
        .expect(".ci/run installs prometheus");
    let policy = lines[..install]
        .iter()
        .any(|line| line.contains("exit 101") && line.contains("$policy"));
    assert!(
        policy,
        "apt_install prometheus runs without a policy-rc.d that forbids starting services"
    );
}
