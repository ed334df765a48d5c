use super::*;

#[test]
fn identifiers_are_checked_and_named() {
    assert!(Names::new("public", "outbox").is_ok());
    assert!(Names::new("_t1", "o_2").is_ok());
    for (schema, prefix, field) in [
        ("", "outbox", "schema"),
        ("Public", "outbox", "schema"),
        ("public", "out-box", "table_prefix"),
        ("public", "1outbox", "table_prefix"),
        ("pub\"lic", "outbox", "schema"),
    ] {
        assert_eq!(Names::new(schema, prefix).unwrap_err().field, field);
    }
    let long = "x".repeat(MAX_TABLE_PREFIX_LEN + 1);
    assert_eq!(
        Names::new("public", &long).unwrap_err().field,
        "table_prefix"
    );
}

#[test]
fn long_names_get_a_stable_short_channel() {
    let names = Names::new(&"s".repeat(60), "outbox").unwrap();
    assert!(names.channel.len() <= MAX_SCHEMA_LEN);
    assert_eq!(
        names.channel,
        Names::new(&"s".repeat(60), "outbox").unwrap().channel
    );
    assert_eq!(
        Names::new("public", "outbox").unwrap().channel,
        "public.outbox"
    );
}

/// A released migration runs once per database, so its file must never change: a
/// database migrated by an older build would differ from a new one, and Flyway and
/// `sqlx migrate` refuse a file whose checksum changed, comments included. Append a
/// migration instead. (FNV-1a of each file.)
#[test]
fn shipped_migrations_keep_their_text() {
    let shipped: [(i32, u64); 10] = [
        (1, 0x04c5_190a_c292_1f41),
        (2, 0xa88f_ec8e_783d_4ac4),
        (3, 0xacad_8d78_03d3_0823),
        (4, 0x882b_cc7e_dcd6_a864),
        (5, 0x63ff_5661_7287_8ada),
        (6, 0x1e43_7362_3ed9_3bb2),
        (7, 0xb839_886e_4571_83d8),
        (8, 0x2ede_af9e_fba8_0cbb),
        (9, 0x8243_e1da_7878_4289),
        (10, 0xc877_d99b_e492_9ab4),
    ];
    for (version, hash) in shipped {
        let file = FILES.iter().find(|f| f.version == version).unwrap();
        let now = fnv1a64(file.text.as_bytes());
        assert_eq!(
            now, hash,
            "migration {version}'s file changed (now {now:#x})"
        );
    }
}

/// The producer function (migration 6) checks a draft with the default limits of the
/// Rust API: a change of those limits needs a migration that makes it again.
#[test]
fn the_producer_function_checks_the_default_limits() {
    use crate::message::{
        DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD_BYTES, MAX_HEADERS, MAX_HEADER_NAME_LEN,
        MAX_HEADER_VALUE_LEN, MAX_KEY_LEN, MAX_NAME_LEN,
    };
    let v6 = FILES[5].text;
    for check in [
        format!("max_attempts bigint DEFAULT {DEFAULT_MAX_ATTEMPTS},"),
        format!("IF octet_length(v_value) > {MAX_NAME_LEN} THEN"),
        format!("IF octet_length(v_value) > {MAX_KEY_LEN} THEN"),
        format!("IF max_attempts > {} THEN", u32::MAX),
        format!("jsonb_object_keys(headers)) > {MAX_HEADERS} THEN"),
        format!("IF octet_length(v_header.key) > {MAX_HEADER_NAME_LEN} THEN"),
        format!("IF octet_length(v_value) > {MAX_HEADER_VALUE_LEN} THEN"),
        format!("IF v_size > {DEFAULT_MAX_PAYLOAD_BYTES} THEN"),
        format!("IF v_size + v_header_bytes > {DEFAULT_MAX_PAYLOAD_BYTES} THEN"),
    ] {
        assert!(v6.contains(&check), "{check}");
    }
}

#[test]
fn system_schemas_are_refused() {
    for schema in ["information_schema", "pg_catalog", "pg_toast", "pg_outbox"] {
        let err = Names::new(schema, "outbox").unwrap_err();
        assert_eq!(err.field, "schema", "{schema}");
        assert!(err.reason.contains("system schema"), "{schema}: {err}");
    }
    assert!(Names::new("pgx", "outbox").is_ok());
}
