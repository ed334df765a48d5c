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
