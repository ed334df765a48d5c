//! The benchmark's flags. Every section and size can be chosen, so a quick proof run and the
//! official run are the same program.

use std::time::Duration;

/// The PostgreSQL URL used unless `--pg` says otherwise.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The MySQL server used unless `OUTBOX_BENCH_MYSQL_URL` says otherwise.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// The MySQL server's URL: `OUTBOX_BENCH_MYSQL_URL`, or [`DEFAULT_MYSQL_URL`].
pub fn mysql_url() -> String {
    std::env::var("OUTBOX_BENCH_MYSQL_URL").unwrap_or_else(|_| DEFAULT_MYSQL_URL.to_owned())
}

/// Which store a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Postgres,
    Sqlite,
    /// MySQL or MariaDB, at `OUTBOX_BENCH_MYSQL_URL` (default [`DEFAULT_MYSQL_URL`]); each
    /// scenario in a database of its own.
    Mysql,
    /// The in-memory reference store: what the relay itself costs, with next to no store
    /// work behind it (no raw ceiling, no single loop, no crash or pickup case).
    Memory,
}

impl StoreKind {
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Postgres => "PostgreSQL",
            StoreKind::Sqlite => "SQLite",
            StoreKind::Mysql => "MySQL",
            StoreKind::Memory => "memory",
        }
    }
}

/// How a backlog's messages are spread over ordering keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// No ordering key.
    None,
    /// Round-robin over this many keys.
    Many(usize),
    /// One hot key holding `min(backlog, HOT_KEY_CAP)` messages, enqueued first, then the
    /// measured backlog round-robin over 1,000 cold keys. Enqueued first because a claim
    /// that walks the due rows in order meets every hot row before the first cold one: the
    /// worst case for a claim that checks per-key order by scanning.
    Hot,
}

/// The most messages the hot key holds: 100 k at the 100 k and 1 M backlogs, so that the
/// hot key is as large as the whole 100 k backlog beside it.
pub const HOT_KEY_CAP: usize = 100_000;
/// Cold keys beside the hot one, and the key count of the "many keys" case.
pub const COLD_KEYS: usize = 1_000;

impl Keys {
    pub fn label(self) -> String {
        match self {
            Keys::None => "no keys".to_owned(),
            Keys::Many(n) => format!("{n} keys"),
            Keys::Hot => format!("hot + {COLD_KEYS}"),
        }
    }
}

/// The parts of the benchmark; all run unless `--sections` picks some.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The seed's single loop against the relay, with a simulated target latency.
    Single,
    /// The raw-SQL claim + ack loop on one connection, per backlog size.
    Ceiling,
    /// No-op drains through the relay.
    Drain,
    /// A relay aborted while holding claims, a second one redelivering.
    Crash,
    /// One message at a time on an idle PostgreSQL lane.
    Pickup,
    /// A 10 ms handler at concurrency 64.
    Slow,
    /// The webhook sink to a local HTTP receiver against the log sink, c=64.
    Webhook,
    /// The Kafka sink to a local tansu broker against the log sink, c=64.
    Kafka,
    /// The web UI's pages on a 1 M-row PostgreSQL table: p50, p95, max per page.
    Ui,
    /// Delete on ack against keep history, each beside its raw ceiling; claims in flight.
    History,
    /// 1, 2, 3 relay processes on one PostgreSQL lane.
    Replicas,
    /// Many lanes in one relay on PostgreSQL: ready, idle costs, pickup, drain.
    Lanes,
}

impl Section {
    const ALL: [Section; 12] = [
        Section::Single,
        Section::Ceiling,
        Section::Drain,
        Section::Crash,
        Section::Pickup,
        Section::Slow,
        Section::Webhook,
        Section::Kafka,
        Section::Ui,
        Section::History,
        Section::Replicas,
        Section::Lanes,
    ];

    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "single" => Section::Single,
            "ceiling" => Section::Ceiling,
            "drain" => Section::Drain,
            "crash" => Section::Crash,
            "pickup" => Section::Pickup,
            "slow" => Section::Slow,
            "webhook" => Section::Webhook,
            "kafka" => Section::Kafka,
            "ui" => Section::Ui,
            "history" => Section::History,
            "replicas" => Section::Replicas,
            "lanes" => Section::Lanes,
            other => {
                return Err(format!(
                    "--sections: unknown section {other:?} (single, ceiling, drain, crash, pickup, slow, webhook, kafka, ui, history, replicas, lanes)"
                ))
            }
        })
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub pg_url: String,
    pub stores: Vec<StoreKind>,
    pub sizes: Vec<usize>,
    pub concurrency: Vec<usize>,
    pub keys: Vec<Keys>,
    pub sections: Vec<Section>,
    pub out: std::path::PathBuf,
    /// The longest one drain may run; past it the drain reports what it managed.
    pub drain_timeout: Duration,
    pub crash_backlog: usize,
    pub crash_lease: Duration,
    pub pickup_messages: usize,
    pub slow_messages: usize,
    pub slow_latency: Duration,
    pub slow_concurrency: usize,
    pub single_messages: usize,
    pub single_latency: Duration,
    pub single_concurrency: usize,
    pub webhook_messages: usize,
    pub webhook_rounds: usize,
    /// The Kafka row's brokers; none: it starts a private tansu broker.
    pub kafka_brokers: Option<String>,
    pub kafka_messages: usize,
    pub kafka_rounds: usize,
    /// Rows of the UI row's table, and requests per page.
    pub ui_rows: usize,
    pub ui_requests: usize,
    /// How many times each raw ceiling and no-op drain runs, rounds interleaved (every
    /// case once, then every case again), and the slow handler after them: the report
    /// gives each case's median.
    pub rounds: usize,
    /// The replicas row's backlog, and the lane's concurrency (split or full each).
    pub replica_backlog: usize,
    pub replica_concurrency: usize,
    /// The concurrencies of the history rows (each row is five drains of a fresh backlog).
    pub history_concurrency: Vec<usize>,
    /// The lane counts of the `lanes` rows, the idle window of each, the messages per
    /// lane of its drain, whether the Prometheus recorder is installed, and each lane's
    /// concurrency.
    pub lanes: Vec<usize>,
    pub lanes_window: Duration,
    pub lanes_per_lane: usize,
    pub lanes_metrics: bool,
    pub lanes_shared_histograms: bool,
    pub lanes_concurrency: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            pg_url: DEFAULT_PG_URL.to_owned(),
            stores: vec![StoreKind::Postgres, StoreKind::Sqlite],
            sizes: vec![10_000, 100_000],
            concurrency: vec![16, 64],
            keys: vec![Keys::None, Keys::Many(COLD_KEYS), Keys::Hot],
            sections: Section::ALL.to_vec(),
            out: "bench-results".into(),
            drain_timeout: Duration::from_secs(120),
            crash_backlog: 100_000,
            crash_lease: Duration::from_secs(2),
            pickup_messages: 200,
            slow_messages: 20_000,
            slow_latency: Duration::from_millis(10),
            slow_concurrency: 64,
            single_messages: 2_000,
            single_latency: Duration::from_millis(2),
            single_concurrency: 16,
            webhook_messages: 5_000,
            webhook_rounds: 3,
            kafka_brokers: None,
            kafka_messages: 5_000,
            kafka_rounds: 3,
            ui_rows: 1_000_000,
            ui_requests: 200,
            rounds: 1,
            replica_backlog: 50_000,
            replica_concurrency: 64,
            history_concurrency: vec![64],
            lanes: vec![1, 100, 1_000, 10_000],
            lanes_window: Duration::from_secs(60),
            lanes_per_lane: 20,
            lanes_metrics: true,
            lanes_shared_histograms: false,
            lanes_concurrency: 2,
        }
    }
}

impl Options {
    pub fn runs(&self, section: Section) -> bool {
        self.sections.contains(&section)
    }

    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut options = Options::default();
        let mut million = false;
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            if flag == "--million" {
                million = true;
                continue;
            }
            if flag == "--help" || flag == "-h" {
                return Err(USAGE.to_owned());
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number = |v: &str| {
                v.trim()
                    .replace('_', "")
                    .parse::<usize>()
                    .map_err(|e| format!("{flag} {v:?}: {e}"))
            };
            let list =
                |v: &str| -> Result<Vec<usize>, String> { v.split(',').map(number).collect() };
            match flag.as_str() {
                "--pg" => options.pg_url = value,
                "--stores" => {
                    options.stores = value
                        .split(',')
                        .map(|s| match s {
                            "pg" | "postgres" => Ok(StoreKind::Postgres),
                            "sqlite" => Ok(StoreKind::Sqlite),
                            "mysql" => Ok(StoreKind::Mysql),
                            "memory" | "mem" => Ok(StoreKind::Memory),
                            other => Err(format!(
                                "--stores: unknown store {other:?} (pg, sqlite, mysql, memory)"
                            )),
                        })
                        .collect::<Result<_, _>>()?
                }
                "--sizes" => options.sizes = list(&value)?,
                "--concurrency" => options.concurrency = list(&value)?,
                "--keys" => {
                    options.keys = value
                        .split(',')
                        .map(|s| match s {
                            "none" => Ok(Keys::None),
                            "hot" => Ok(Keys::Hot),
                            n => number(n).map(Keys::Many),
                        })
                        .collect::<Result<_, _>>()?
                }
                "--sections" => {
                    options.sections = value
                        .split(',')
                        .map(Section::parse)
                        .collect::<Result<_, _>>()?
                }
                "--out" => options.out = value.into(),
                "--drain-timeout-s" => {
                    options.drain_timeout = Duration::from_secs(number(&value)? as u64)
                }
                "--crash-backlog" => options.crash_backlog = number(&value)?,
                "--crash-lease-ms" => {
                    options.crash_lease = Duration::from_millis(number(&value)? as u64)
                }
                "--pickup-messages" => options.pickup_messages = number(&value)?.max(1),
                "--slow-messages" => options.slow_messages = number(&value)?,
                "--slow-latency-ms" => {
                    options.slow_latency = Duration::from_millis(number(&value)? as u64)
                }
                "--slow-concurrency" => options.slow_concurrency = number(&value)?.max(1),
                "--single-messages" => options.single_messages = number(&value)?,
                "--single-latency-ms" => {
                    options.single_latency = Duration::from_millis(number(&value)? as u64)
                }
                "--single-concurrency" => options.single_concurrency = number(&value)?.max(1),
                "--webhook-messages" => options.webhook_messages = number(&value)?.max(1),
                "--webhook-rounds" => options.webhook_rounds = number(&value)?.max(1),
                "--kafka-brokers" => options.kafka_brokers = Some(value.clone()),
                "--kafka-messages" => options.kafka_messages = number(&value)?.max(1),
                "--kafka-rounds" => options.kafka_rounds = number(&value)?.max(1),
                "--rounds" => options.rounds = number(&value)?.max(1),
                "--ui-rows" => options.ui_rows = number(&value)?.max(1_000),
                "--ui-requests" => options.ui_requests = number(&value)?.max(1),
                "--history-concurrency" => options.history_concurrency = list(&value)?,
                "--replica-backlog" => options.replica_backlog = number(&value)?.max(1),
                "--replica-concurrency" => options.replica_concurrency = number(&value)?.max(3),
                "--lanes" => options.lanes = list(&value)?,
                "--lanes-window-s" => {
                    options.lanes_window = Duration::from_secs(number(&value)?.max(1) as u64)
                }
                "--lanes-concurrency" => options.lanes_concurrency = number(&value)?.max(1),
                "--lanes-per-lane" => options.lanes_per_lane = number(&value)?.max(1),
                "--lanes-metrics" => {
                    (options.lanes_metrics, options.lanes_shared_histograms) = match value.as_str()
                    {
                        "on" => (true, false),
                        "shared" => (true, true),
                        "off" => (false, false),
                        other => {
                            return Err(format!(
                                "--lanes-metrics: on, shared or off, not {other:?}"
                            ))
                        }
                    }
                }
                other => return Err(format!("unknown flag {other}\n\n{USAGE}")),
            }
        }
        if options.concurrency.contains(&0) {
            return Err("--concurrency: every value must be at least 1".to_owned());
        }
        if options.lanes.contains(&0) {
            return Err("--lanes: every lane count must be at least 1".to_owned());
        }
        if options.sizes.contains(&0) {
            return Err("--sizes: every size must be at least 1".to_owned());
        }
        if million {
            options.sizes.push(1_000_000);
        }
        options.sizes.sort_unstable();
        options.sizes.dedup();
        Ok(options)
    }
}

pub const USAGE: &str = "\
usage: benchmark [flags]
  --pg URL                 PostgreSQL (default postgres://postgres@127.0.0.1:5432/test);
                           every store gets a fresh schema, dropped at the end
  --stores pg,sqlite       which stores (default both); `mysql` adds MySQL/MariaDB at
                           OUTBOX_BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306/test,
                           a database of its own per scenario); `memory` adds the in-memory
                           store's drains: the relay's own cost, keyed or not
  --sizes 10000,100000     backlog sizes of the no-op drains and raw ceilings
  --million                adds the 1,000,000 backlog to --sizes
  --concurrency 16,64      relay concurrencies of the no-op drains
  --keys none,1000,hot     key distributions: none, a key count, or hot (one hot key
                           among 1,000 cold keys)
  --sections LIST          single,ceiling,drain,crash,pickup,slow,webhook,kafka,ui,
                           history,replicas,lanes (default all)
  --rounds N               runs every raw ceiling and no-op drain N times, rounds
                           interleaved, then the slow handler N times; the report
                           gives each case's median (default 1)
  --out DIR                results.md and throughput.svg go here (default bench-results)
  --drain-timeout-s N      a drain still running after N s reports what it did (default 120)
  --crash-backlog N        backlog pending during the crash (default 100000)
  --crash-lease-ms N       lease of the aborted relay (default 2000)
  --pickup-messages N      idle pickups on PostgreSQL (default 200)
  --slow-messages N        messages of the 10 ms handler run (default 20000)
  --slow-latency-ms N      its handler latency (default 10)
  --slow-concurrency N     its concurrency (default 64)
  --single-messages N      messages of the single-loop comparison (default 2000)
  --single-latency-ms N    its simulated target latency (default 2)
  --single-concurrency N   the relay's concurrency in it (default 16)
  --webhook-messages N     messages per sink and round of the webhook row (default 5000)
  --webhook-rounds N       its rounds; the report gives the medians (default 3)
  --kafka-brokers ADDR     the Kafka row's brokers (default: a private tansu broker it
                           starts, from PATH or ~/.cargo/bin)
  --kafka-messages N       messages per sink and round of the Kafka row (default 5000)
  --kafka-rounds N         its rounds; the report gives the medians (default 3)
  --history-concurrency L  concurrencies of the history rows (default 64)
  --replica-backlog N      rows of each replicas case (default 50000)
  --replica-concurrency N  the lane's concurrency in the replicas row, split over the
                           processes or full each (default 64)
  --lanes 1,100,1000,10000 lane counts of the lanes rows (PostgreSQL, one relay, lanes
                           of concurrency 2, a no-op handler, a database of their own)
  --lanes-window-s N       the idle window of each lanes row: CPU, commits/s (from
                           pg_stat_database), store calls and RSS over it (default 60;
                           PostgreSQL publishes counts up to 10 s late: short is a smoke run)
  --lanes-concurrency N    each lane's concurrency in the lanes rows (default 2)
  --lanes-per-lane K       messages per lane of the lanes rows' drain (default 20)
  --lanes-metrics on|shared|off  the lanes rows with the Prometheus recorder installed, as
                           the daemon runs; shared: the lanes share their histograms
                           (LaneConfig::shared_histograms); off: none (default on; once
                           on, on for the process)
environment:
  OUTBOX_BENCH_RELAY_BIN=PATH       the outbox-relay binary of the replicas row (default:
                           target/release/outbox-relay beside this program)
  OUTBOX_BENCH_CLAIMS_IN_FLIGHT=N   the relays' LaneConfig::claims_in_flight (default:
                           the store's: PostgreSQL 2, the others 1)
  OUTBOX_BENCH_CYCLE_FUNCTION=off   PostgreSQL relays run the cycle's statements instead
                           of the cycle function (PostgresConfig::cycle_function), to
                           compare the two
  OUTBOX_BENCH_CLAIM_LINGER_US=N    the relays' LaneConfig::claim_linger in µs (default
                           500; 0 claims at once)
  OUTBOX_BENCH_KEY_RUN=N            the relays' LaneConfig::key_run (default 16; 1
                           claims heads only), to compare key runs with heads only
  OUTBOX_BENCH_SQLITE_CACHE=BYTES   SQLite stores' page cache per connection
                           (SqliteStoreBuilder::cache_size; default 2,000 KiB)
  OUTBOX_BENCH_SQLITE_MMAP=BYTES    SQLite stores' memory map (SqliteStoreBuilder::mmap_size;
                           default 0, none)
  OUTBOX_BENCH_SQLITE_SYNC=full     SQLite relay commits sync the WAL
                           (SqliteStoreBuilder::synchronous_commit; default NORMAL)
  OUTBOX_BENCH_SQLITE_CHECKPOINTS=off  SQLite checkpoints in the writer, as SQLite's own
                           (SqliteStoreBuilder::background_checkpoints; default on)
  OUTBOX_BENCH_PREFETCH=N           the relays' LaneConfig::prefetch (default: the
                           concurrency), to compare prefetch depths
  OUTBOX_BENCH_PREFETCH_MAX=N       the relays' LaneConfig::prefetch_max (default
                           128; 0: the prefetch never grows), to compare ceilings
  OUTBOX_BENCH_PERF_CTL=CTL,ACK     fifos of `perf record --control=fifo:CTL,ACK -D -1`:
                           sampling is enabled for each drain only
  OUTBOX_BENCH_VACUUM_EVERY=N       PostgreSQL stores vacuum after N retired rows
                           (PostgresConfig::vacuum_every; default 50,000; 0 never), to
                           compare vacuum cadences
  OUTBOX_BENCH_RELAYS=N             each drain runs N relays on its lane, each at the
                           drain's concurrency (default 1), as N processes on one
                           database would: N claims out at once
  OUTBOX_BENCH_ANALYZE=1            PostgreSQL stores get ANALYZE after each fill (as
                           autovacuum would give them), to compare plans with
                           statistics against a fresh table's";
