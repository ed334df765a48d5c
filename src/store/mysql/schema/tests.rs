use super::*;

#[test]
fn a_prefix_names_its_field_when_refused() {
    assert!(validate_table_prefix("outbox").is_ok());
    for bad in [
        "",
        "Outbox",
        "1x",
        "a-b",
        &"x".repeat(MAX_TABLE_PREFIX_LEN + 1),
    ] {
        assert_eq!(
            validate_table_prefix(bad).unwrap_err().field,
            "table_prefix"
        );
    }
}

#[test]
fn the_script_is_the_files_for_the_prefix() {
    let text = script(&Names::new("shop"), 0, latest_version());
    let table = text
        .find("CREATE TABLE IF NOT EXISTS `shop_messages`")
        .unwrap();
    let recorded = text
        .find("INSERT INTO `shop_migrations` (version, applied_at) VALUES (1,")
        .unwrap();
    assert!(table < recorded, "{text}");
    assert!(
        text.starts_with("-- The files of migrations/mysql/ for the table prefix shop.\n"),
        "{text}"
    );
    for statement in sql::statements(&text) {
        assert!(!statement.contains("`outbox_"), "{statement}");
    }
    assert_eq!(
        script(&Names::new("outbox"), 1, 2),
        MIGRATIONS[1],
        "the default prefix's script is the file"
    );
    assert!(script(&Names::new("outbox"), 1, 1).is_empty());
}

/// What makes a file safe to run again and to run beside another process: the lock
/// first, then only idempotent statements, then the version, then the release.
#[test]
fn each_file_takes_the_lock_and_records_its_version_last() {
    for (version, text) in between(0, latest_version()) {
        let statements = sql::statements(text);
        let lock = TAKE_LOCK.replace('?', "30");
        assert_eq!(statements.first(), Some(&lock.as_str()), "V{version}");
        let n = statements.len();
        assert_eq!(
            statements[n - 2],
            format!(
                "INSERT INTO `outbox_migrations` (version, applied_at) \
                 VALUES ({version}, UNIX_TIMESTAMP() * 1000)"
            ),
            "V{version}"
        );
        assert_eq!(
            statements[n - 1],
            lock.replace("SELECT GET_LOCK(", "SELECT RELEASE_LOCK(")
                .replace(", 30)", ")"),
            "V{version}"
        );
        for statement in &statements[1..n - 2] {
            assert!(
                statement.starts_with("CREATE TABLE IF NOT EXISTS `outbox_"),
                "V{version}: not idempotent: {statement}"
            );
        }
    }
}
