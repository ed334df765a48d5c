//! The SQLite file the binary creates holds every payload: it is created readable by its
//! owner only.

use super::Sandbox;

/// `outbox-relay enqueue` into a file that does not exist yet creates it (and its WAL) with
/// mode 0600, whatever the umask allows.
#[cfg(unix)]
#[test]
fn enqueue_creates_the_sqlite_file_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let sandbox = Sandbox::new();
    assert!(sandbox.files().is_empty());
    sandbox.enqueue(&[], "default", "log", &["--payload", r#"{"n":1}"#]);
    let mode = |name: &str| {
        std::fs::metadata(sandbox.path(name))
            .unwrap_or_else(|error| panic!("{name}: {error} (files: {:?})", sandbox.files()))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("outbox.db"), 0o600, "files: {:?}", sandbox.files());
    for file in sandbox.files() {
        // The WAL and shared-memory files, when SQLite left them, take the same mode.
        assert_eq!(mode(&file), 0o600, "{file}");
    }
}
