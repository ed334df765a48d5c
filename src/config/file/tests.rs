use std::time::Duration;

use super::*;
use crate::config::{CircuitBreakerConfig, FailureRatio, RateLimit};
use crate::database::DatabaseUrl;
use crate::retry::RetryPolicy;
use crate::sinks::LogSinkConfig;

const MINIMAL: &str = r#"
[[lanes]]
lane = "orders"
target = "billing"
sink = { kind = "log" }
"#;

fn parse(text: &str) -> Result<FileConfig, FileConfigError> {
    FileConfig::from_toml_str("relay.toml", text)
}

fn error(text: &str) -> FileConfigError {
    parse(text).expect_err("the config should be refused")
}

#[test]
fn the_example_file_parses_and_sets_every_field() {
    let text = include_str!("../../../examples/relay.toml");
    let config = parse(text).unwrap();
    // Every field of the example is uncommented or documented; the uncommented ones equal
    // the defaults, so the example and the code agree on them.
    let lanes = config.lanes().unwrap();
    assert_eq!(lanes.len(), 1);
    let (lane, sink) = &lanes[0];
    let defaults = LaneConfig::new("default", "log").consumer_id(lane.consumer_id.clone());
    assert_eq!(lane, &defaults);
    assert_eq!(sink, &SinkConfig::Log(LogSinkConfig::default()));
    assert_eq!(config.supervisor().unwrap(), SupervisorConfig::default());
    assert_eq!(config.shutdown_timeout(), DEFAULT_SHUTDOWN_TIMEOUT);
    assert_eq!(config.connect_timeout(), DEFAULT_CONNECT_TIMEOUT);
    assert_eq!(config.listen_address(), MetricsListen::default());
    assert_eq!(
        config.listener.to_config(),
        crate::config::ListenerConfig::default()
    );
    assert_eq!(config.listener.control_token().unwrap(), None);
    for key in serde_json::to_value(&config.listener)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
    {
        assert!(
            text.contains(&format!("{key} =")),
            "listener.{key} is not in the example"
        );
    }
    assert_eq!(
        config.database_url().unwrap(),
        DatabaseUrl::Sqlite {
            path: "outbox.db".into()
        }
    );
    // Every key the structs know appears in the example, set or commented out.
    let example_keys = serde_json::to_value(&config).unwrap();
    for key in example_keys.as_object().unwrap().keys() {
        assert!(
            text.contains(&format!("{key} ="))
                || text.contains(&format!("[{key}]"))
                || text.contains(&format!("[[{key}]]")),
            "{key} is not in the example"
        );
    }
    for (key, value) in serde_json::to_value(&config.lanes[0])
        .unwrap()
        .as_object()
        .unwrap()
    {
        // A field that is off unless set (a rate limit, a breaker) is shown commented out.
        assert!(
            text.contains(&format!("\n{key} ="))
                || (value.is_null() && text.contains(&format!("\n# {key} ="))),
            "lanes.{key} is not in the example"
        );
    }
    for key in serde_json::to_value(&config.supervisor)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
    {
        assert!(
            text.contains(&format!("\n{key} =")),
            "supervisor.{key} is not in the example"
        );
    }
    // The [postgres] table shows every field, with the defaults it documents.
    assert_eq!(config.postgres, crate::database::PostgresOptions::default());
    for key in serde_json::to_value(crate::database::PostgresOptions::default())
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
    {
        assert!(
            text.contains(&format!("\n{key} =")) || text.contains(&format!("\n# {key} =")),
            "postgres.{key} is not in the example"
        );
    }
}

#[test]
fn the_postgres_table_sets_the_pool_and_session_and_names_a_bad_field() {
    let base = "[[lanes]]\nlane = \"a\"\ntarget = \"b\"\nsink = { kind = \"log\" }\n";
    let config = FileConfig::from_toml_str(
        "t.toml",
        &format!(
            "[postgres]\npool_min_connections = 2\npool_max_connections = 4\n\
             acquire_timeout = \"2s\"\nstatement_timeout = \"5s\"\nlock_timeout = \"1s\"\n\
             synchronous_commit = true\nvacuum_every = false\npooler = \"transaction\"\n{base}"
        ),
    )
    .unwrap();
    let options = config.store_options().postgres;
    assert_eq!(
        options,
        crate::database::PostgresOptions {
            pool_min_connections: 2,
            pool_max_connections: 4,
            acquire_timeout: Some(Duration::from_secs(2)),
            statement_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(1),
            synchronous_commit: true,
            vacuum_every: None,
            listen_url: None,
            pooler: crate::database::Pooler::Transaction,
        }
    );
    for (table, field) in [
        ("pool_min_connections = 11", "postgres.pool_min_connections"),
        ("vacuum_every = 0", "postgres.vacuum_every"),
        ("vacuum_every = true", "postgres.vacuum_every"),
        ("lock_timeout = \"0s\"", "postgres.lock_timeout"),
        ("statement_timeout = \"soon\"", "postgres.statement_timeout"),
        ("pool_max_connections = -1", "postgres.pool_max_connections"),
        ("listen_url = \"mysql://db/app\"", "postgres.listen_url"),
        ("pooler = \"statement\"", "pooler"),
    ] {
        let error = FileConfig::from_toml_str("t.toml", &format!("[postgres]\n{table}\n{base}"))
            .unwrap_err()
            .to_string();
        assert!(error.contains(field), "{table}: {error}");
    }
}

#[test]
fn the_embedded_default_is_one_log_lane_on_a_local_sqlite_file() {
    let config = FileConfig::embedded_default().unwrap();
    let lanes = config.lanes().unwrap();
    assert_eq!(lanes.len(), 1);
    assert_eq!(
        (lanes[0].0.name.as_str(), lanes[0].0.target.as_str()),
        ("default", "log")
    );
    assert_eq!(lanes[0].1.kind(), "log");
    assert_eq!(
        config.database_url().unwrap().to_string(),
        DEFAULT_DATABASE_URL
    );
}

#[test]
fn every_field_is_read() {
    let config = parse(
        r#"
        database_url = "postgres://relay@db:6543/app"
        table_prefix = "billing"
        schema = "relay"
        connect_timeout = "2s"
        metrics_listen = false
        shutdown_timeout = "1m"
        consumer_id = "relay-a"
        [supervisor]
        max_restarts = 2
        restart_window = "10s"
        restart_backoff = "50ms"
        restart_backoff_max = "1s"
        [[lanes]]
        lane = "orders"
        target = "billing"
        concurrency = 3
        batch_size = 7
        prefetch = 5
        lease = "9s"
        lease_extend_margin = false
        delivery_timeout = "4s"
        retry_base = "250ms"
        retry_max = "1h"
        retry_after_max = "2m"
        jitter = false
        ordering = "block"
        max_poll_interval = "200ms"
        stats_interval = "1s"
        store_backoff = "20ms"
        store_backoff_max = "2s"
        rate_limit = "30/m"
        rate_burst = 4
        breaker = { consecutive_failures = 3, cool_down = "10s", max_cool_down = "2m" }
        retry_after_holds_lane = true
        sink = { kind = "log" }
        "#,
    )
    .unwrap();
    assert_eq!(config.listen_address(), MetricsListen::Off);
    assert_eq!(config.shutdown_timeout(), Duration::from_secs(60));
    let options = config.store_options();
    assert_eq!(options.table_prefix.as_deref(), Some("billing"));
    assert_eq!(options.schema.as_deref(), Some("relay"));
    assert_eq!(options.connect_timeout, Duration::from_secs(2));
    let supervisor = config.supervisor().unwrap();
    assert_eq!(supervisor.max_restarts, 2);
    assert_eq!(supervisor.restart_window, Duration::from_secs(10));
    assert_eq!(supervisor.restart_backoff.base, Duration::from_millis(50));
    assert_eq!(supervisor.restart_backoff.max, Duration::from_secs(1));
    let (lane, _) = &config.lanes().unwrap()[0];
    let want = LaneConfig::new("orders", "billing")
        .consumer_id("relay-a")
        .concurrency(3)
        .batch_size(7)
        .lease(Duration::from_secs(9))
        .lease_extend_margin(None)
        .delivery_timeout(Duration::from_secs(4))
        .retry(
            RetryPolicy::new(Duration::from_millis(250), Duration::from_secs(3600)).jitter(false),
        )
        .ordering(OrderingPolicy::Block)
        .max_poll_interval(Duration::from_millis(200))
        .stats_interval(Duration::from_secs(1))
        .prefetch(5)
        .store_backoff(
            RetryPolicy::new(Duration::from_millis(20), Duration::from_secs(2)).jitter(false),
        )
        .rate_limit(Some(RateLimit::new(30, Duration::from_secs(60)).burst(4)))
        .circuit_breaker(Some(
            CircuitBreakerConfig::default()
                .consecutive_failures(Some(3))
                .cool_down(Duration::from_secs(10))
                .max_cool_down(Duration::from_secs(120)),
        ))
        .retry_after_holds_lane(true)
        .retry_after_max(Duration::from_secs(120));
    assert_eq!(lane, &want);
    assert_eq!(
        config.ordering_of("orders", "billing"),
        Some(OrderingPolicy::Block)
    );
}

#[test]
fn the_log_sink_takes_a_delay() {
    let config =
        parse(&MINIMAL.replace("kind = \"log\"", "kind = \"log\", delay = \"200ms\"")).unwrap();
    let expected = LogSinkConfig {
        delay: Duration::from_millis(200).into(),
    };
    assert_eq!(config.lanes().unwrap()[0].1, SinkConfig::Log(expected));
    let bad = error(&MINIMAL.replace("kind = \"log\"", "kind = \"log\", delay = \"soon\""));
    assert!(bad.message().contains("\"soon\""), "{bad}");
}

#[test]
fn a_lease_without_a_margin_extends_at_a_third() {
    let config = parse(&MINIMAL.replace("sink =", "lease = \"12s\"\nsink =")).unwrap();
    assert_eq!(
        config.lanes().unwrap()[0].0.lease_extend_margin,
        Some(Duration::from_secs(4))
    );
    let config = parse(&MINIMAL.replace("sink =", "lease_extend_margin = \"2s\"\nsink =")).unwrap();
    assert_eq!(
        config.lanes().unwrap()[0].0.lease_extend_margin,
        Some(Duration::from_secs(2))
    );
}

#[test]
fn unknown_fields_are_refused_everywhere_with_their_position() {
    let top = error(&format!("databse_url = \"sqlite:x.db\"\n{MINIMAL}"));
    assert!(
        top.message().contains("unknown field `databse_url`"),
        "{top}"
    );
    assert_eq!(top.position(), Some((1, 1)));
    assert!(
        top.to_string().starts_with("relay.toml, line 1, column 1"),
        "{top}"
    );

    let lane = error(&MINIMAL.replace("sink =", "concurency = 3\nsink ="));
    assert!(
        lane.message().contains("unknown field `concurency`"),
        "{lane}"
    );
    assert_eq!(lane.position().map(|p| p.0), Some(5));

    let supervisor = error(&format!("{MINIMAL}\n[supervisor]\nmax_restart = 1\n"));
    assert!(
        supervisor.message().contains("unknown field `max_restart`"),
        "{supervisor}"
    );

    let sink = error(&MINIMAL.replace("kind = \"log\"", "kind = \"log\", path = \"x\""));
    assert!(sink.message().contains("unknown field `path`"), "{sink}");

    let kind = error(&MINIMAL.replace("kind = \"log\"", "kind = \"pulsar\""));
    assert!(kind.message().contains("pulsar"), "{kind}");
}

#[test]
fn a_lane_without_its_name_or_sink_is_refused() {
    let missing = error("[[lanes]]\ntarget = \"billing\"\nsink = { kind = \"log\" }\n");
    assert!(
        missing.message().contains("missing field `lane`"),
        "{missing}"
    );
    assert!(missing.position().is_some(), "{missing}");

    let no_sink = error("[[lanes]]\nlane = \"a\"\ntarget = \"b\"\n");
    assert!(
        no_sink.message().contains("missing field `sink`"),
        "{no_sink}"
    );

    let none = error("database_url = \"sqlite:x.db\"\n");
    assert_eq!(none.field(), Some("lanes"));
    assert!(
        none.to_string().contains("at least one [[lanes]]"),
        "{none}"
    );
}

#[test]
fn a_bad_duration_names_its_field_and_line() {
    let bad = error(&MINIMAL.replace("sink =", "lease = \"30 parsecs\"\nsink ="));
    assert_eq!(bad.field(), Some("lease"));
    assert_eq!(bad.position().map(|p| p.0), Some(5));
    let text = bad.to_string();
    assert!(text.contains("field `lease`"), "{text}");
    assert!(text.contains("invalid duration \"30 parsecs\""), "{text}");

    let number = error(&format!("shutdown_timeout = 30\n{MINIMAL}"));
    assert_eq!(number.field(), Some("shutdown_timeout"));
    assert!(number.message().contains("duration"), "{number}");
}

#[test]
fn bad_values_name_their_field() {
    let cases = [
        (
            format!("database_url = \"mongodb://db/app\"\n{MINIMAL}"),
            "database_url",
        ),
        (
            format!("metrics_listen = \"localhost\"\n{MINIMAL}"),
            "metrics_listen",
        ),
        (
            MINIMAL.replace("sink =", "ordering = \"fifo\"\nsink ="),
            "ordering",
        ),
        (
            MINIMAL.replace("sink =", "concurrency = 0\nsink ="),
            "lanes[orders/billing].concurrency",
        ),
        (
            MINIMAL.replace("sink =", "retry_after_max = \"0s\"\nsink ="),
            "lanes[orders/billing].retry_after_max",
        ),
        (
            // The default delivery_timeout (20s) outlives a 10s lease nobody extends.
            MINIMAL.replace(
                "sink =",
                "lease = \"10s\"\nlease_extend_margin = false\nsink =",
            ),
            "lanes[orders/billing].delivery_timeout",
        ),
        (
            MINIMAL.replace(
                "sink =",
                "lease = \"3s\"\nlease_extend_margin = \"3s\"\nsink =",
            ),
            "lanes[orders/billing].lease_extend_margin",
        ),
        (
            MINIMAL.replace("sink =", "retry_base = \"1m\"\nretry_max = \"1s\"\nsink ="),
            "lanes[orders/billing].retry.max",
        ),
        (
            MINIMAL.replace("sink =", "concurrency = 2\nprefetch = 9\nsink ="),
            "lanes[orders/billing].prefetch",
        ),
        (
            MINIMAL.replace("sink =", "prefetch_max = 1001\nsink ="),
            "lanes[orders/billing].prefetch_max",
        ),
        (
            MINIMAL.replace("sink =", "key_run = 0\nsink ="),
            "lanes[orders/billing].key_run",
        ),
        (
            MINIMAL.replace("sink =", "key_run = 257\nsink ="),
            "lanes[orders/billing].key_run",
        ),
        (
            MINIMAL.replace("sink =", "claims_in_flight = 0\nsink ="),
            "lanes[orders/billing].claims_in_flight",
        ),
        (
            MINIMAL.replace("sink =", "claims_in_flight = 9\nsink ="),
            "lanes[orders/billing].claims_in_flight",
        ),
        (
            MINIMAL.replace("sink =", "store_backoff = \"0s\"\nsink ="),
            "lanes[orders/billing].store_backoff",
        ),
        (
            MINIMAL.replace(
                "sink =",
                "store_backoff = \"5s\"\nstore_backoff_max = \"1s\"\nsink =",
            ),
            "lanes[orders/billing].store_backoff.max",
        ),
        (
            MINIMAL.replace("\"orders\"", "\"a b\""),
            "lanes[a b/billing].lane",
        ),
        (format!("{MINIMAL}{MINIMAL}"), "lanes[orders/billing]"),
        (
            format!("shutdown_timeout = \"0s\"\n{MINIMAL}"),
            "shutdown_timeout",
        ),
        (
            format!("[supervisor]\nrestart_window = \"0s\"\n{MINIMAL}"),
            "supervisor.restart_window",
        ),
        (
            format!(
                "[supervisor]\nrestart_backoff = \"2s\"\nrestart_backoff_max = \"1s\"\n{MINIMAL}"
            ),
            "supervisor.restart_backoff.max",
        ),
    ];
    for (text, field) in cases {
        let error = error(&text);
        assert_eq!(error.field(), Some(field), "{error}");
        assert!(error.to_string().contains(field), "{error}");
    }
}

#[test]
fn key_run_defaults_to_16_and_is_read_per_lane() {
    let config = parse(MINIMAL).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!(lane.key_run, crate::config::DEFAULT_KEY_RUN);
    let config = parse(&MINIMAL.replace("sink =", "key_run = 1\nsink =")).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!(lane.key_run, 1);
}

#[test]
fn the_prefetch_follows_the_concurrency_unless_set() {
    let config = parse(&MINIMAL.replace("sink =", "concurrency = 12\nsink =")).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!((lane.concurrency, lane.prefetch), (12, 12));
    let config =
        parse(&MINIMAL.replace("sink =", "prefetch = 0\nconcurrency = 12\nsink =")).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!((lane.concurrency, lane.prefetch), (12, 0));
    assert_eq!(lane.most_held(), 12 + crate::config::DEFAULT_PREFETCH_MAX);
    let config =
        parse(&MINIMAL.replace("sink =", "prefetch_max = 100\nconcurrency = 12\nsink =")).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!((lane.prefetch_max, lane.most_held()), (100, 112));
}

#[test]
fn claims_in_flight_is_the_stores_unless_set_and_bounded() {
    let config = parse(MINIMAL).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!(lane.claims_in_flight, None);
    assert_eq!(lane.claims_in_flight_or(2), 2, "the store's default");
    assert_eq!(lane.claims_in_flight_or(0), 1, "no store default");
    let config = parse(&MINIMAL.replace("sink =", "claims_in_flight = 3\nsink =")).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!(lane.claims_in_flight_or(2), 3, "the lane's own");
    assert!(lane.keep_delivered, "history is kept unless asked");
    let config = parse(&MINIMAL.replace("sink =", "keep_delivered = false\nsink =")).unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!(lane.ack_mode(), crate::store::AckMode::Delete);
}

/// The example file's commented "Sinks" blocks, uncommented: each parses as a lane with
/// that sink, and shows every key the sink's config has.
#[cfg(all(
    feature = "webhook-sink",
    feature = "nats-sink",
    feature = "rabbitmq-sink",
    feature = "redis-sink",
    feature = "kafka-sink"
))]
#[test]
fn the_example_files_sink_blocks_parse_and_show_every_key() {
    let text = include_str!("../../../examples/relay.toml");
    let mut kinds = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("# -- sink: ") {
        let after = &rest[start + "# -- sink: ".len()..];
        let kind = &after[..after.find(" --").unwrap()];
        let end = after.find("# -- end --").expect("every block ends");
        let block: String = after[..end]
            .lines()
            .skip(1)
            .map(|line| {
                let line = line.strip_prefix('#').unwrap_or(line);
                format!("{}\n", line.strip_prefix(' ').unwrap_or(line))
            })
            .collect();
        let config = parse(&format!("database_url = \"sqlite:x.db\"\n{block}"))
            .unwrap_or_else(|error| panic!("the {kind} block does not parse: {error}\n{block}"));
        let lanes = config.lanes().unwrap();
        assert_eq!(lanes[0].1.kind(), kind, "{block}");
        let keys = serde_json::to_value(&lanes[0].1).unwrap();
        for key in keys.as_object().unwrap().keys() {
            assert!(
                block.contains(&format!("\n{key} =")),
                "the {kind} block does not show `{key}`"
            );
        }
        kinds.push(kind.to_owned());
        rest = &after[end..];
    }
    assert_eq!(kinds, ["webhook", "nats", "rabbitmq", "redis", "kafka"]);
}

#[test]
fn retention_per_lane_takes_defaults_and_refuses_an_age_under_a_minute_naming_the_lane() {
    use crate::retention::{
        RetentionConfig, DEFAULT_DEAD_LETTER_RETENTION, DEFAULT_DELIVERED_RETENTION,
    };
    let config = parse(
        r#"
[[lanes]]
lane = "orders"
target = "billing"
retention = { delivered = "2d", dead_letter = "90d" }
sink = { kind = "log" }

[[lanes]]
lane = "orders"
target = "audit"
retention = { delivered = "12h" }
sink = { kind = "log" }

[[lanes]]
lane = "quiet"
target = "audit"
sink = { kind = "log" }

[[lanes]]
lane = "ledger"
target = "audit"
ordering = "block"
retention = { delivered = "forever", dead_letter = false }
sink = { kind = "log" }
"#,
    )
    .unwrap();
    let day = Duration::from_secs(24 * 3600);
    let retention: Vec<(String, RetentionConfig)> = config
        .lanes()
        .unwrap()
        .into_iter()
        .map(|(lane, _)| (lane.key().to_string(), lane.retention_in_force()))
        .collect();
    assert_eq!(
        retention,
        [
            (
                "orders/billing".to_owned(),
                RetentionConfig {
                    delivered: Some(2 * day),
                    dead_letter: Some(90 * day),
                    ordering: OrderingPolicy::Skip,
                }
            ),
            (
                "orders/audit".to_owned(),
                RetentionConfig {
                    delivered: Some(day / 2),
                    dead_letter: Some(DEFAULT_DEAD_LETTER_RETENTION),
                    ordering: OrderingPolicy::Skip,
                }
            ),
            (
                "quiet/audit".to_owned(),
                RetentionConfig {
                    delivered: Some(DEFAULT_DELIVERED_RETENTION),
                    dead_letter: Some(DEFAULT_DEAD_LETTER_RETENTION),
                    ordering: OrderingPolicy::Skip,
                }
            ),
            (
                "ledger/audit".to_owned(),
                RetentionConfig {
                    delivered: None,
                    dead_letter: None,
                    ordering: OrderingPolicy::Block,
                }
            ),
        ]
    );

    let short = MINIMAL.replace("sink = ", "retention = { dead_letter = \"30s\" }\nsink = ");
    let error = parse(&short).unwrap_err();
    assert_eq!(
        error.field(),
        Some("lanes[orders/billing].retention.dead_letter")
    );
    let unknown = MINIMAL.replace("sink = ", "retention = { delivred = \"7d\" }\nsink = ");
    assert!(error_text(&unknown).contains("delivred"));
    let truthy = MINIMAL.replace("sink = ", "retention = { dead_letter = true }\nsink = ");
    assert!(
        error_text(&truthy).contains("forever"),
        "{}",
        error_text(&truthy)
    );
}

fn error_text(text: &str) -> String {
    error(text).to_string()
}

#[test]
fn gates_read_a_rate_a_burst_and_a_breaker_on_a_ratio_alone() {
    let config = parse(&MINIMAL.replace(
        "sink =",
        "rate_limit = \"5/10s\"\nbreaker = { failure_ratio = 0.5, window = \"30s\", min_requests = 8 }\nsink =",
    ))
    .unwrap();
    let (lane, _) = &config.lanes().unwrap()[0];
    assert_eq!(
        lane.rate_limit,
        Some(RateLimit::new(5, Duration::from_secs(10)).burst(5))
    );
    let breaker = lane.circuit_breaker.unwrap();
    assert_eq!(breaker.consecutive_failures, None);
    assert_eq!(
        breaker.failure_ratio,
        Some(FailureRatio {
            permille: 500,
            window: Duration::from_secs(30),
            min_requests: 8
        })
    );
    assert_eq!(breaker.cool_down, crate::config::DEFAULT_BREAKER_COOL_DOWN);
    assert!(!lane.retry_after_holds_lane);
}

#[test]
fn bad_gate_values_name_their_field() {
    let with = |line: &str| error(&MINIMAL.replace("sink =", &format!("{line}\nsink =")));
    for (line, field, reason) in [
        ("rate_limit = \"200\"", "rate_limit", "not a rate"),
        ("rate_limit = \"0/s\"", "rate_limit", "between 1 and"),
        ("rate_limit = \"200/fortnight\"", "rate_limit", "not a rate"),
        (
            "rate_burst = 3",
            "lanes[orders/billing].rate_burst",
            "without a rate_limit",
        ),
        (
            "rate_limit = \"200/s\"\nrate_burst = 0",
            "lanes[orders/billing].rate_limit",
            "burst 0",
        ),
        (
            "breaker = { consecutive_failures = 0 }",
            "lanes[orders/billing].breaker.consecutive_failures",
            "at least 1",
        ),
        (
            "breaker = { failure_ratio = 1.5 }",
            "lanes[orders/billing].breaker.failure_ratio",
            "at most 1",
        ),
        (
            "breaker = { cool_down = \"1m\", max_cool_down = \"10s\" }",
            "lanes[orders/billing].breaker.max_cool_down",
            "below the cool-down",
        ),
        (
            "breaker = { cooldown = \"1m\" }",
            "",
            "unknown field `cooldown`",
        ),
    ] {
        let error = with(line);
        if !field.is_empty() {
            assert_eq!(error.field(), Some(field), "{line}: {error}");
        }
        assert!(error.message().contains(reason), "{line}: {error}");
    }
}

const TENANTS: &str = r#"
[[lane_patterns]]
lane = "tenant-*"
target = "billing"
max_lanes = 500
idle_stop = "30m"
concurrency = 2
sink = { kind = "log" }
"#;

#[test]
fn a_lane_pattern_takes_a_lanes_settings_its_limit_and_its_idle_stop() {
    let config = parse(TENANTS).unwrap();
    assert!(
        config.lanes().unwrap().is_empty(),
        "a pattern alone is a config"
    );
    let patterns = config.lane_patterns().unwrap();
    let (pattern, sink) = &patterns[0];
    assert_eq!(pattern.pattern(), "tenant-*");
    assert_eq!(pattern.prefix(), "tenant-");
    assert_eq!(pattern.max_lanes, 500);
    assert_eq!(pattern.idle_stop, Some(Duration::from_secs(30 * 60)));
    assert_eq!(pattern.lane.concurrency, 2);
    assert!(
        pattern.lane.shared_histograms,
        "a pattern's lanes share histograms"
    );
    assert_eq!(sink, &SinkConfig::Log(LogSinkConfig::default()));
    assert_eq!(
        config.ordering_of("tenant-7", "billing"),
        Some(OrderingPolicy::Skip)
    );
    assert_eq!(config.ordering_of("tenant-7", "audit"), None);

    let defaults = parse(&TENANTS.replace("max_lanes = 500\nidle_stop = \"30m\"\n", ""))
        .unwrap()
        .lane_patterns()
        .unwrap();
    assert_eq!(
        defaults[0].0.max_lanes,
        crate::config::DEFAULT_MAX_PATTERN_LANES
    );
    assert_eq!(
        defaults[0].0.idle_stop,
        Some(crate::config::DEFAULT_PATTERN_IDLE_STOP)
    );
    let never = parse(&TENANTS.replace(
        "idle_stop = \"30m\"",
        "idle_stop = false\nshared_histograms = false",
    ))
    .unwrap()
    .lane_patterns()
    .unwrap();
    assert_eq!(never[0].0.idle_stop, None);
    assert!(!never[0].0.lane.shared_histograms);
}

#[test]
fn a_bad_lane_pattern_is_refused_naming_what_is_wrong() {
    for (bad, field, reason) in [
        (
            "tenant-*-eu",
            "lane_patterns[tenant-*-eu/billing].lane",
            "not a pattern",
        ),
        (
            "tenant-",
            "lane_patterns[tenant-/billing].lane",
            "not a pattern",
        ),
        (
            "ten ant-*",
            "lane_patterns[ten ant-*/billing].lane",
            "its prefix contains",
        ),
    ] {
        let error = error(&TENANTS.replace("tenant-*", bad));
        assert_eq!(error.field(), Some(field), "{error}");
        assert!(error.to_string().contains(reason), "{error}");
    }
    let zero = error(&TENANTS.replace("max_lanes = 500", "max_lanes = 0"));
    assert_eq!(
        zero.field(),
        Some("lane_patterns[tenant-*/billing].max_lanes")
    );
    assert!(zero.to_string().contains("greater than zero"), "{zero}");
    let setting = error(&TENANTS.replace("concurrency = 2", "concurrency = 0"));
    assert_eq!(
        setting.field(),
        Some("lane_patterns[tenant-*/billing].concurrency")
    );

    let overlap = error(&format!(
        "{TENANTS}{}",
        TENANTS.replace("tenant-*", "tenant-1*")
    ));
    assert_eq!(overlap.field(), Some("lane_patterns[tenant-1*/billing]"));
    assert!(
        overlap
            .to_string()
            .contains("overlaps lane_patterns[tenant-*/billing]"),
        "{overlap}"
    );
    // Another target does not overlap.
    parse(&format!(
        "{TENANTS}{}",
        TENANTS
            .replace("tenant-*", "tenant-1*")
            .replace("billing", "audit")
    ))
    .unwrap();

    let in_lanes = error(&MINIMAL.replace("sink =", "max_lanes = 3\nsink ="));
    assert_eq!(in_lanes.field(), Some("lanes[orders/billing].max_lanes"));
    assert!(
        in_lanes
            .to_string()
            .contains("only a [[lane_patterns]] entry"),
        "{in_lanes}"
    );
}
