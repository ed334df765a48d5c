use super::*;

fn timeouts() -> MigrationTimeouts {
    MigrationTimeouts {
        lock: std::time::Duration::from_secs(5),
        statement: std::time::Duration::from_secs(900),
    }
}

#[test]
fn each_file_is_a_header_the_prelude_a_body_and_commit() {
    let names = Names::new("public", "outbox").unwrap();
    let prelude: String = prelude(&names, timeouts())
        .iter()
        .map(|s| format!("{s};\n"))
        .collect();
    assert_eq!(format!("BEGIN;\n{prelude}"), FILE_PRELUDE);
    for (index, file) in FILES.iter().enumerate() {
        let v = file.version;
        assert_eq!(usize::try_from(v).unwrap(), index + 1);
        assert_eq!(file.text.matches(FILE_PRELUDE).count(), 1, "{v}");
        assert!(file.text.ends_with(";\nCOMMIT;\n"), "{v}");
        let (header, body) = split(file);
        assert!(header.lines().all(|l| l.starts_with("--")), "{v}");
        assert!(header.starts_with(&format!(
            "-- outbox-relay PostgreSQL schema migration {v}: "
        )));
        let record = format!(
            "INSERT INTO \"public\".\"outbox_migrations\" (version, name) VALUES ({v}, '{}');\n",
            name(file)
        );
        assert!(body.contains(&record), "{v}: {record}");
        assert_eq!(body.starts_with(&record), v != 1, "{v}");
        assert_eq!(script(&names, timeouts(), v - 1, v), file.text);
    }
}

/// The substitution renames what the files spell for the default names, and only
/// that: no unquoted word, even one starting with the prefix.
#[test]
fn for_names_renames_only_the_default_names() {
    let all: String = FILES.iter().map(|f| f.text).collect();
    let default = Names::new("public", "outbox").unwrap();
    assert_eq!(for_names(&default, &all), all);
    let names = Names::new("app", "box").unwrap();
    let renamed = for_names(&names, &all);
    for gone in [
        "\"public\"",
        "\"outbox",
        "'public.outbox'",
        "migrate public",
        "458410234",
    ] {
        assert!(all.contains(gone), "{gone}");
        assert!(!renamed.contains(gone), "{gone}");
    }
    for kept in [
        "outbox_id",
        "outbox_relay.head_lock_held",
        "outbox-relay migrate",
    ] {
        assert_eq!(
            renamed.matches(kept).count(),
            all.matches(kept).count(),
            "{kept}"
        );
    }
    assert!(renamed.contains("CREATE TABLE IF NOT EXISTS \"app\".\"box_messages\""));
    assert!(renamed.contains("'app.box'"));
    let class = super::super::heads::head_lock_class(&names.messages);
    assert!(renamed.contains(&format!("pg_advisory_xact_lock({class}, v_key)")));
    // One pass: a new name that spells a default one is not renamed again.
    let swapped = Names::new("outbox_x", "public").unwrap();
    let text = for_names(&swapped, "\"public\".\"outbox_messages\"");
    assert_eq!(text, "\"outbox_x\".\"public_messages\"");
}

#[test]
fn each_migration_is_a_transaction_that_records_its_version_first() {
    let names = Names::new("app", "box").unwrap();
    let text = script(&names, timeouts(), 0, super::super::latest_version());
    assert_eq!(text.matches("\nBEGIN;\n").count(), FILES.len(), "{text}");
    assert_eq!(text.matches("\nCOMMIT;\n").count(), FILES.len());
    assert_eq!(
        text.matches("SET LOCAL lock_timeout = 5000").count(),
        FILES.len()
    );
    let first = script(&names, timeouts(), 0, 1);
    let insert = first
        .find("INSERT INTO \"app\".\"box_migrations\"")
        .unwrap();
    assert!(
        first
            .find("CREATE TABLE IF NOT EXISTS \"app\".\"box_messages\"")
            .unwrap()
            > insert
    );
    assert!(first.contains("CREATE SCHEMA IF NOT EXISTS \"app\""));
    assert!(!script(&names, timeouts(), 2, 4).contains("migration 5:"));
    assert!(script(&names, timeouts(), 2, 4).contains("migration 4:"));
    let latest = super::super::latest_version();
    assert!(script(&names, timeouts(), latest, latest).is_empty());
}

/// A file's online preparation (its header's `CREATE INDEX CONCURRENTLY`s) builds
/// exactly the indexes its body creates under a name it does not drop first, with the
/// body's definitions, so that the body then finds them built.
#[test]
fn online_preparation_builds_the_bodys_new_indexes() {
    for file in FILES {
        let (header, body) = split(file);
        let prepared: Vec<String> = header
            .split("-- CREATE INDEX CONCURRENTLY IF NOT EXISTS ")
            .skip(1)
            .map(|s| {
                let statement = s.split_once(';').map_or(s, |(s, _)| s);
                statement.replace("\n--     ", "\n    ")
            })
            .collect();
        let created: Vec<String> = body
            .split("\nCREATE INDEX IF NOT EXISTS ")
            .skip(1)
            .map(|s| s.split_once(';').map_or(s, |(s, _)| s).to_owned())
            .filter(|s| {
                let index = s.split_whitespace().next().unwrap_or_default();
                !body.contains(&format!("DROP INDEX IF EXISTS \"public\".{index}"))
            })
            .collect();
        assert_eq!(prepared, created, "migration {}", file.version);
    }
    let v2 = split(&FILES[1]).0;
    assert!(v2.contains(
        "-- ALTER TABLE \"public\".\"outbox_messages\" ADD COLUMN IF NOT EXISTS key_head"
    ));
}
