//! A full disk is an outage, not a wedge: once space returns, the same store writes again.
//! The database lives on a tmpfs of its own (mounting one needs root, as in CI; without
//! it the test fails, loudly), filled up with a file the test then deletes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use outbox_relay::store::sqlite::SqliteOutboxStore;
use outbox_relay::Outbox;
use serde_json::json;

use crate::claim_req;

/// A small tmpfs, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test mounts a tmpfs to fill it up, which needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the store's connections close in the background and may still hold the
        // file; the mount goes away as soon as they let go.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes `path` until the file system is full.
fn fill(path: &PathBuf) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 16 * 1024];
    while file
        .write_all(&chunk)
        .and_then(|()| file.sync_all())
        .is_ok()
    {}
}

#[tokio::test]
async fn a_full_disk_fails_writes_and_they_recover_once_space_returns() {
    let tmpfs = Tmpfs::mount("4m");
    let store = SqliteOutboxStore::builder(tmpfs.path().join("outbox.db"))
        .open()
        .await
        .unwrap_or_else(|e| panic!("open: {e}"));
    let outbox = Outbox::new(store);
    let big = || {
        outbox_relay::OutboxMessageDraft::new("orders", "billing", json!("x".repeat(64 * 1024)))
            .unwrap()
    };
    outbox.enqueue(big()).await.expect("a write with space");

    let filler = tmpfs.path().join("filler");
    fill(&filler);
    let mut failures = Vec::new();
    for _ in 0..3 {
        match outbox.enqueue(big()).await {
            Ok(_) => {}
            Err(error) => failures.push(error.to_string()),
        }
    }
    assert!(!failures.is_empty(), "the full disk refused nothing");

    std::fs::remove_file(&filler).unwrap();
    let again = outbox.enqueue(big()).await;
    assert!(
        again.is_ok(),
        "after space returned: {again:?}; while full: {failures:?}"
    );
    let claimed = outbox
        .claim(&claim_req(100))
        .await
        .unwrap_or_else(|e| panic!("claim after space returned: {e}"));
    assert!(claimed.messages.len() >= 2, "{}", claimed.messages.len());
}
