//! Stamps the build with the commit it came from, for `outbox_build_info{git_sha}`:
//! `OUTBOX_RELAY_GIT_SHA` if set (an image built without `.git`), else git's HEAD,
//! else nothing (the metric then says `unknown`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=OUTBOX_RELAY_GIT_SHA");
    let sha = std::env::var("OUTBOX_RELAY_GIT_SHA")
        .ok()
        .filter(|sha| !sha.trim().is_empty())
        .or_else(git_head);
    if let Some(sha) = sha {
        println!("cargo:rustc-env=OUTBOX_RELAY_GIT_SHA={}", sha.trim());
    }
}

/// The first 12 hex digits of HEAD, and a rerun whenever HEAD moves (a checkout, a commit).
fn git_head() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let output = Command::new("git").args(args).output().ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let sha = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD names a branch, whose ref moves on commit: watch both, and packed refs. A
    // worktree has its own HEAD (--git-dir) and shares the refs (--git-common-dir).
    if let (Some(dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) {
        let (dir, common) = (PathBuf::from(dir), PathBuf::from(common));
        let branch = git(&["symbolic-ref", "-q", "HEAD"]).map(|branch| common.join(branch));
        let watched = [
            Some(dir.join("HEAD")),
            Some(common.join("packed-refs")),
            branch,
        ];
        // A path that does not exist would rerun this script on every build.
        for path in watched.into_iter().flatten().filter(|path| path.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(sha)
}
