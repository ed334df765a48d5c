use super::*;

#[test]
fn pieces_put_back_together_are_the_text() {
    for sql in [
        "SELECT 'a;b', `c``d`, \"e\\\"f\" -- g;\n# h\n/* i; */ j;",
        "unterminated 'string",
        "--",
        "-- comment without newline",
        "a--b",
        "é 'ü' `ö`",
    ] {
        let joined: String = pieces(sql)
            .into_iter()
            .map(|p| match p {
                Piece::Code(t) | Piece::Name(t) | Piece::Text(t) | Piece::Comment(t) => t,
            })
            .collect();
        assert_eq!(joined, sql);
    }
    assert_eq!(
        pieces("a--b"),
        vec![Piece::Code("a--b")],
        "`--` without a blank after it is code (MySQL's rule)"
    );
}

#[test]
fn only_quoted_table_names_and_the_prefix_string_are_renamed() {
    let sql = "-- `outbox_messages` in a comment\n\
               SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'outbox'), 30);\n\
               CREATE TABLE IF NOT EXISTS `outbox_messages` (outbox_id BINARY(16), \
               `outbox_id` INT, outbox_messages INT, UNIQUE KEY outbox_id (outbox_id));\n\
               INSERT INTO `outbox_keys` SELECT 'outbox_keys', \"outbox\", `outbox_other`, \
               `outbox_keys_x`, `xoutbox_keys` FROM `outbox_migrations`;";
    let renamed = for_prefix(sql, "shop");
    assert_eq!(
        renamed,
        "-- `outbox_messages` in a comment\n\
         SELECT GET_LOCK(CONCAT('outbox-relay migrate ', DATABASE(), '.', 'shop'), 30);\n\
         CREATE TABLE IF NOT EXISTS `shop_messages` (outbox_id BINARY(16), \
         `outbox_id` INT, outbox_messages INT, UNIQUE KEY outbox_id (outbox_id));\n\
         INSERT INTO `shop_keys` SELECT 'outbox_keys', \"outbox\", `outbox_other`, \
         `outbox_keys_x`, `xoutbox_keys` FROM `shop_migrations`;"
    );
    assert_eq!(for_prefix(sql, DEFAULT_TABLE_PREFIX), sql);
    assert_eq!(
        for_prefix("SELECT 1 FROM `outbox_served_lanes`", "outbox_2"),
        "SELECT 1 FROM `outbox_2_served_lanes`"
    );
}

#[test]
fn a_script_splits_at_semicolons_outside_quotes_and_comments() {
    let sql = "-- header; with a semicolon\n\
               SELECT 1;\n\
               \n\
               /* a; */ SELECT 'a;b', `c;d`, \"e\\\";\" FROM t; # tail; comment\n\
               -- only a comment;\n\
               ;;\n\
               CREATE TABLE x (\n    a INT -- the a; column\n) ENGINE = InnoDB;\n\
               SELECT 'it''s; fine'\n\
               -- the end";
    assert_eq!(
        statements(sql),
        vec![
            "SELECT 1",
            "SELECT 'a;b', `c;d`, \"e\\\";\" FROM t",
            "CREATE TABLE x (\n    a INT -- the a; column\n) ENGINE = InnoDB",
            "SELECT 'it''s; fine'",
        ]
    );
    assert!(statements("-- nothing\n/* at all */\n").is_empty());
    assert_eq!(
        statements("'starts with a string'"),
        vec!["'starts with a string'"]
    );
}

/// Every `.sql` file of `dir` (under the crate's root): (name, text).
fn sql_files(dir: &str) -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}", dir.display());
    files
}

/// The prefix reaches every table because the files quote every table name (and the
/// renaming reads nothing else): no table name of the default prefix is left outside
/// backquotes in code.
#[test]
fn the_sql_files_quote_every_table_name() {
    for (name, text) in sql_files("migrations/mysql")
        .into_iter()
        .chain(sql_files("src/store/mysql/sql"))
    {
        for piece in pieces(&text) {
            if let Piece::Code(code) = piece {
                for table in TABLES {
                    let unquoted = format!("{DEFAULT_TABLE_PREFIX}_{table}");
                    assert!(!code.contains(&unquoted), "{name}: {unquoted} unquoted");
                }
            }
        }
        let renamed = for_prefix(&text, "shop");
        for statement in statements(&renamed) {
            assert!(!statement.contains("`outbox_"), "{name}: {statement}");
        }
    }
}

/// A statement file holds one statement, with at most one list (`in_list.rs`).
#[test]
fn each_statement_file_is_one_statement() {
    for (name, text) in sql_files("src/store/mysql/sql") {
        assert_eq!(statements(&text).len(), 1, "{name}");
        assert!(text.matches("IN (?)").count() <= 1, "{name}");
    }
}
