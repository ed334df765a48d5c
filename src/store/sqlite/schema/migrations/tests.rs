use super::*;

/// Each file is named for its version, is one transaction, and creates the migrations
/// table and records its own version before anything else.
#[test]
fn every_file_is_one_transaction_that_records_its_version_first() {
    for ((name, text), version) in FILES.iter().zip(1..) {
        assert!(name.starts_with(&format!("V{version}__")), "{name}");
        assert!(text.contains("\nBEGIN IMMEDIATE;\n"), "{name}");
        assert!(text.ends_with("\nCOMMIT;\n"), "{name}");
        assert_eq!(text.matches("BEGIN IMMEDIATE;").count(), 1, "{name}");
        assert_eq!(text.matches("COMMIT;").count(), 1, "{name}");
        let record = format!(
            "{MIGRATIONS_TABLE};\nINSERT INTO outbox_migrations (version, applied_at) \
                 VALUES ({version}, "
        );
        assert!(
            transaction_body(text).starts_with(&record),
            "{name} does not start with:\n{record}"
        );
    }
}

/// Every file of the directory is listed, in version order.
#[test]
fn every_file_of_the_directory_is_listed() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite");
    let mut present: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sql"))
        .collect();
    present.sort_by_key(|name| {
        name[1..]
            .split("__")
            .next()
            .and_then(|v| v.parse::<i64>().ok())
    });
    let listed: Vec<&str> = FILES.iter().map(|(name, _)| *name).collect();
    assert_eq!(present, listed);
}

/// The words of a file's statements, comments left out: what a database that ran it
/// holds. Comments may change; statements never do once shipped.
fn statement_words(text: &str) -> String {
    let statements: String = super::super::pieces(text)
        .filter(|(_, piece)| !piece.starts_with("--"))
        .map(|(_, piece)| piece)
        .collect();
    statements.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A shipped migration's statements never change (a database that ran it would not
/// run the new text): append a file instead. FNV-1a over [`statement_words`].
#[test]
fn shipped_migrations_keep_their_statements() {
    let shipped: [u64; 7] = [
        0x5858_1082_9269_1c9a,
        0x9226_343f_dea4_53bd,
        0x95ce_76f0_eb78_135a,
        0x4d37_9a0a_bcea_4b02,
        0x2670_66a5_d989_ce47,
        0xf494_7d1f_df5d_ed98,
        0x7322_3c68_aca4_8ce6,
    ];
    let fnv1a64 = |bytes: &[u8]| {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let now: Vec<u64> = texts()
        .map(|text| fnv1a64(statement_words(text).as_bytes()))
        .collect();
    assert_eq!(
        now[..shipped.len()],
        shipped,
        "a shipped migration's statements changed: {now:#x?}"
    );
}

#[test]
fn the_next_migration_follows_the_applied_version() {
    let (version, first) = next_migration("app_outbox", 0).unwrap();
    assert_eq!(version, 1);
    assert!(
        first.contains("CREATE TABLE IF NOT EXISTS app_outbox ("),
        "{first}"
    );
    assert!(!first.contains("BEGIN IMMEDIATE") && !first.contains("COMMIT"));
    assert_eq!(
        next_migration("outbox", latest_version() - 1).unwrap().0,
        latest_version()
    );
    assert!(next_migration("outbox", latest_version()).is_none());
    assert!(next_migration("outbox", -1).is_none());
}

#[test]
fn the_default_script_is_the_files() {
    let all: Vec<&str> = texts().collect();
    assert_eq!(script("outbox", 0, latest_version()), all.join("\n"));
    assert_eq!(script("outbox", 2, 3), all[2]);
    assert_eq!(script("outbox", 3, 3), "");
}
