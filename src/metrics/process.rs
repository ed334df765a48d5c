//! What one relay process says about itself, whatever its lanes: which build it runs
//! (`outbox_build_info`) and what it costs the machine (`process_*`, Prometheus' standard
//! process metrics).
//!
//! These carry no `lane` or `target` label, so they are listed apart from [`ALL`] in
//! [`PROCESS`]. The Prometheus exporter records both: the build info once at install, the
//! process metrics at install and then every few seconds (Linux; elsewhere the collector
//! reads what the platform offers).

use super::*;

/// Gauge: always 1, labelled with the running build's [`LABEL_VERSION`],
/// [`LABEL_GIT_SHA`] and [`LABEL_FEATURES`]: "which version runs where?" is
/// `outbox_build_info` by `instance`.
pub const BUILD_INFO: &str = "outbox_build_info";

/// Label of [`BUILD_INFO`]: the crate's version, [`VERSION`].
pub const LABEL_VERSION: &str = "version";
/// Label of [`BUILD_INFO`]: the commit the build came from, [`GIT_SHA`].
pub const LABEL_GIT_SHA: &str = "git_sha";
/// Label of [`BUILD_INFO`]: the cargo features compiled in, [`features`].
pub const LABEL_FEATURES: &str = "features";

/// The crate's version, as in `Cargo.toml`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit this build came from (12 hex digits), as `build.rs` read it from git or
/// from `OUTBOX_RELAY_GIT_SHA` at build time (for an image built without `.git`);
/// `unknown` when neither was there (a published crate, a source tarball).
pub const GIT_SHA: &str = match option_env!("OUTBOX_RELAY_GIT_SHA") {
    Some(sha) => sha,
    None => "unknown",
};

/// Counter: CPU time, user and system, in whole seconds.
pub const PROCESS_CPU_SECONDS_TOTAL: &str = "process_cpu_seconds_total";
/// Gauge: open file descriptors (sockets included).
pub const PROCESS_OPEN_FDS: &str = "process_open_fds";
/// Gauge: the file descriptor limit.
pub const PROCESS_MAX_FDS: &str = "process_max_fds";
/// Gauge, bytes: resident memory.
pub const PROCESS_RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
/// Gauge, bytes: virtual memory.
pub const PROCESS_VIRTUAL_MEMORY_BYTES: &str = "process_virtual_memory_bytes";
/// Gauge, bytes: the virtual memory limit.
pub const PROCESS_VIRTUAL_MEMORY_MAX_BYTES: &str = "process_virtual_memory_max_bytes";
/// Gauge: OS threads.
pub const PROCESS_THREADS: &str = "process_threads";
/// Gauge, seconds since the Unix epoch: when the process started.
pub const PROCESS_START_TIME_SECONDS: &str = "process_start_time_seconds";

/// Every metric of the process as a whole, each once: [`BUILD_INFO`] and the `process_*`
/// metrics (named and described by the `metrics-process` crate, which reads `/proc`).
#[rustfmt::skip] // one metric per line reads as a table
pub const PROCESS: &[MetricInfo] = &[
    info(BUILD_INFO, Gauge, Unit::Count, "Always 1, labelled with the running build's version, git commit and cargo features.", &[LABEL_VERSION, LABEL_GIT_SHA, LABEL_FEATURES]),
    info(PROCESS_CPU_SECONDS_TOTAL, Counter, Unit::Seconds, "Total user and system CPU time spent in seconds.", &[]),
    info(PROCESS_OPEN_FDS, Gauge, Unit::Count, "Number of open file descriptors.", &[]),
    info(PROCESS_MAX_FDS, Gauge, Unit::Count, "Maximum number of open file descriptors.", &[]),
    info(PROCESS_RESIDENT_MEMORY_BYTES, Gauge, Unit::Bytes, "Resident memory size in bytes.", &[]),
    info(PROCESS_VIRTUAL_MEMORY_BYTES, Gauge, Unit::Bytes, "Virtual memory size in bytes.", &[]),
    info(PROCESS_VIRTUAL_MEMORY_MAX_BYTES, Gauge, Unit::Bytes, "Maximum amount of virtual memory available in bytes.", &[]),
    info(PROCESS_THREADS, Gauge, Unit::Count, "Number of OS threads in the process.", &[]),
    info(PROCESS_START_TIME_SECONDS, Gauge, Unit::Seconds, "Start time of the process since unix epoch in seconds.", &[]),
];

/// The cargo features this build was compiled with, comma-separated in `Cargo.toml`'s
/// order (the value of [`LABEL_FEATURES`]).
pub fn features() -> String {
    let compiled = [
        ("sqlite", cfg!(feature = "sqlite")),
        ("postgres", cfg!(feature = "postgres")),
        ("prometheus", cfg!(feature = "prometheus")),
        ("otel", cfg!(feature = "otel")),
        ("otlp", cfg!(feature = "otlp")),
        ("file-config", cfg!(feature = "file-config")),
        ("cli", cfg!(feature = "cli")),
        ("simulate", cfg!(feature = "simulate")),
        ("testing", cfg!(feature = "testing")),
        ("webhook-sink", cfg!(feature = "webhook-sink")),
        ("nats-sink", cfg!(feature = "nats-sink")),
        ("rabbitmq-sink", cfg!(feature = "rabbitmq-sink")),
        ("redis-sink", cfg!(feature = "redis-sink")),
    ];
    let on: Vec<&str> = compiled
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect();
    on.join(",")
}

/// Describes [`BUILD_INFO`] and sets it to 1 with this build's labels, on the current
/// recorder. The Prometheus exporter calls it at install; call it yourself after
/// installing another recorder.
pub fn record_build_info() {
    let build_info = &PROCESS[0];
    metrics::describe_gauge!(build_info.name, build_info.unit, build_info.help);
    metrics::gauge!(
        BUILD_INFO,
        LABEL_VERSION => VERSION,
        LABEL_GIT_SHA => GIT_SHA,
        LABEL_FEATURES => features()
    )
    .set(1.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn build_info_is_one_with_version_sha_and_features() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, record_build_info);
        let snapshot = snapshotter.snapshot().into_vec();
        assert_eq!(snapshot.len(), 1, "{snapshot:?}");
        let (key, unit, help, value) = &snapshot[0];
        let key = key.key();
        assert_eq!(key.name(), BUILD_INFO);
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let features = features();
        assert_eq!(
            labels,
            [
                (LABEL_VERSION, VERSION),
                (LABEL_GIT_SHA, GIT_SHA),
                (LABEL_FEATURES, features.as_str())
            ]
        );
        assert_eq!(*value, DebugValue::Gauge(1.0.into()));
        assert_eq!(*unit, Some(Unit::Count));
        assert_eq!(help.as_deref(), Some(PROCESS[0].help));
    }

    #[test]
    fn the_git_sha_is_a_commit_or_unknown() {
        // Tests run from a git checkout (CI clones): build.rs must have found the commit.
        let sha = GIT_SHA;
        assert!(
            sha.len() == 12 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "GIT_SHA is {GIT_SHA:?}: build.rs found no commit in this checkout"
        );
    }

    #[test]
    fn features_name_what_the_build_has() {
        let features = features();
        let listed: Vec<&str> = features.split(',').filter(|f| !f.is_empty()).collect();
        assert_eq!(listed.contains(&"sqlite"), cfg!(feature = "sqlite"));
        assert_eq!(listed.contains(&"postgres"), cfg!(feature = "postgres"));
        assert!(listed.iter().all(|f| !f.contains(' ')), "{features}");
    }

    #[test]
    fn process_metrics_follow_the_prometheus_convention() {
        for metric in &PROCESS[1..] {
            assert!(metric.name.starts_with("process_"), "{}", metric.name);
            assert!(metric.labels.is_empty(), "{}", metric.name);
            assert_eq!(
                metric.kind == MetricKind::Counter,
                metric.name.ends_with("_total"),
                "{}",
                metric.name
            );
        }
    }
}
