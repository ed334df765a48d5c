use super::*;

#[test]
fn the_relays_transactions_commit_asynchronously_unless_asked_not_to() {
    let config = PostgresConfig::default();
    assert!(!config.settings.synchronous_commit);
    assert_eq!(
        config.relay_begin(),
        "BEGIN; SET LOCAL synchronous_commit = off"
    );
    assert_eq!(
        config.clone().synchronous_commit(true).relay_begin(),
        "BEGIN"
    );
    assert_eq!(config.begin(), "BEGIN");
}

#[test]
fn under_a_transaction_pooler_the_session_settings_are_set_per_transaction() {
    let config = PostgresConfig::default()
        .pooler(Pooler::Transaction)
        .statement_timeout(Duration::from_millis(1500));
    assert!(!config.named_statements());
    assert_eq!(
        config.begin(),
        "BEGIN; SET LOCAL jit = off; SET LOCAL statement_timeout = 1500"
    );
    assert_eq!(
        config.relay_begin(),
        "BEGIN; SET LOCAL synchronous_commit = off; SET LOCAL jit = off; \
             SET LOCAL statement_timeout = 1500"
    );
    let options = config.session_options(PgConnectOptions::new());
    assert_eq!(options.get_options(), None, "no startup options");
    assert!(PostgresConfig::default().named_statements());
    let direct = PostgresConfig::default().session_options(PgConnectOptions::new());
    assert!(direct.get_options().is_some_and(|o| o.contains("jit")));
}

#[test]
fn poolers_parse_by_name() {
    assert_eq!(
        "transaction".parse::<Pooler>().unwrap(),
        Pooler::Transaction
    );
    assert_eq!("session".parse::<Pooler>().unwrap(), Pooler::Session);
    assert_eq!("none".parse::<Pooler>().unwrap(), Pooler::Session);
    let error = "statement".parse::<Pooler>().unwrap_err();
    assert_eq!(error.field, "pooler");
    assert!(error.reason.contains("\"statement\""), "{error}");
    assert_eq!(Pooler::Transaction.to_string(), "transaction");
}

#[test]
fn migration_timeouts_are_bounded_and_named() {
    let config = PostgresConfig::default();
    assert_eq!(
        config.settings.lock_timeout,
        super::super::DEFAULT_MIGRATION_LOCK_TIMEOUT
    );
    for (config, field) in [
        (
            config.clone().migration_lock_timeout(Duration::ZERO),
            "migration_lock_timeout",
        ),
        (
            config
                .clone()
                .migration_statement_timeout(Duration::from_micros(10)),
            "migration_statement_timeout",
        ),
        (
            config
                .clone()
                .migration_lock_timeout(Duration::from_secs(u64::from(u32::MAX))),
            "migration_lock_timeout",
        ),
    ] {
        assert_eq!(config.validate().unwrap_err().field, field);
    }
}

#[test]
fn vacuum_every_must_be_at_least_one_row() {
    let config = PostgresConfig::default();
    assert_eq!(
        config.settings.vacuum_every,
        Some(super::super::DEFAULT_VACUUM_EVERY)
    );
    assert!(config.clone().vacuum_every(None).validate().is_ok());
    let error = config.vacuum_every(Some(0)).validate().unwrap_err();
    assert_eq!(error.field, "vacuum_every");
}
