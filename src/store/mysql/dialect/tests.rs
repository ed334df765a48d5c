use super::*;

#[test]
fn servers_are_told_apart_by_their_version_strings() {
    for (version, comment, dialect) in [
        ("10.11.6-MariaDB-0+deb12u1", "Debian 12", Dialect::MariaDb),
        (
            "10.6.18-MariaDB",
            "mariadb.org binary distribution",
            Dialect::MariaDb,
        ),
        ("9.7.4-2", "(Debian)", Dialect::MySql),
        ("8.0.36", "MySQL Community Server - GPL", Dialect::MySql),
        ("8.0.19", "MySQL Community Server - GPL", Dialect::MySql),
        ("8.4.3-3", "Percona Server (GPL), Release 3", Dialect::MySql),
    ] {
        assert_eq!(
            Dialect::of_server(version, comment),
            Ok(dialect),
            "{version} {comment}"
        );
    }
}

#[test]
fn servers_too_old_are_refused_with_the_version_and_the_reason() {
    let old_mysql = Dialect::of_server("8.0.18", "MySQL Community Server - GPL").unwrap_err();
    assert!(old_mysql.contains("MySQL 8.0.18 is too old"), "{old_mysql}");
    assert!(old_mysql.contains("8.0.19 or later"), "{old_mysql}");
    let old_mariadb = Dialect::of_server("10.5.23-MariaDB", "").unwrap_err();
    assert!(
        old_mariadb.contains("MariaDB 10.5.23-MariaDB is too old"),
        "{old_mariadb}"
    );
    assert!(old_mariadb.contains("SKIP LOCKED"), "{old_mariadb}");
    let garbage = Dialect::of_server("banana", "x").unwrap_err();
    assert!(garbage.contains("\"banana\""), "{garbage}");
}

#[test]
fn an_upsert_reads_the_new_row_by_values_on_mariadb_and_by_alias_on_mysql() {
    assert_eq!(
        Dialect::MariaDb.upsert(&["head_seq"]),
        " ON DUPLICATE KEY UPDATE head_seq = VALUES(head_seq)"
    );
    assert_eq!(
        Dialect::MySql.upsert(&["a", "b"]),
        " AS new ON DUPLICATE KEY UPDATE a = new.a, b = new.b"
    );
}
