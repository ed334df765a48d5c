//! `outbox-relay simulate`: each lane of the config file, with its real settings, against a
//! stated load and target behaviour, in virtual time (`outbox_relay::simulate`). No
//! database is opened and nothing is delivered.

use std::fmt::Write as _;
use std::time::Duration;

use outbox_relay::simulate::{lane, Keys, LaneReport, Load};

use crate::cli::SimulateArgs;
use crate::{Failure, Setup};

/// A duration for the report: milliseconds under 10 s, else seconds, else minutes.
fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 10_000 {
        format!("{ms}ms")
    } else if ms < 600_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

pub(crate) fn run(setup: Setup, args: SimulateArgs) -> Result<(), Failure> {
    let lanes = setup
        .config
        .lanes()
        .map_err(|error| Failure::input(format!("config error: {error}")))?;
    let load = Load {
        duration: args.duration,
        rate: args.rate,
        keys: args.keys,
        max_attempts: args.max_attempts,
        failure_rate: args.failure_rate,
        latency: args.latency,
        retry_after: args.retry_after,
        retry_after_rate: args.retry_after_rate,
        outages: args.outages,
        seed: args.seed,
    };
    let outages = if load.outages.is_empty() {
        "none".to_owned()
    } else {
        load.outages
            .iter()
            .map(|(start, length)| format!("{}@{}", show(*length), show(*start)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let keys = match load.keys {
        Keys::None => "none".to_owned(),
        Keys::Spread(n) => format!("{n}"),
        Keys::Hot => "hot".to_owned(),
    };
    let store = setup.url.capabilities();
    println!(
        "simulated on the {} store (a lane that leaves claims_in_flight unset keeps {} out), \
         {} of load at {}/s per lane, keys {keys}, max_attempts {}, failure rate {}, \
         latency {}, retry-after {} at rate {}, outages {outages}, seed {}; then a drain \
         with the target answering every delivery",
        setup.url.kind(),
        config_claims(store.claims_in_flight),
        show(load.duration),
        load.rate,
        load.max_attempts,
        load.failure_rate,
        show(load.latency),
        show(load.retry_after),
        load.retry_after_rate,
        load.seed
    );
    for (config, _) in lanes {
        let report = lane(&config, &load, store).map_err(|error| {
            Failure::failed(format!(
                "lane {} -> {}: {error}",
                config.name, config.target
            ))
        })?;
        print!("{}", render(&config.name, &config.target, &report));
    }
    Ok(())
}

/// The claims in flight a store gives a lane that leaves them unset.
fn config_claims(store_default: usize) -> usize {
    outbox_relay::LaneConfig::new("lane", "target").claims_in_flight_or(store_default)
}

fn render(lane: &str, target: &str, r: &LaneReport) -> String {
    let mut out = String::new();
    let [p50, p90, p99, max] = r.latency.map(show);
    let _ = writeln!(out, "lane {lane} -> {target}");
    let _ = writeln!(
        out,
        "  claims in flight  {} ({} sent while another was out)",
        r.claims_in_flight, r.overlapping_claims
    );
    let _ = writeln!(out, "  enqueued          {}", r.enqueued);
    let _ = writeln!(out, "  delivered         {}", r.delivered);
    let _ = writeln!(out, "  retried           {}", r.retried);
    let _ = writeln!(out, "  dead-lettered     {}", r.dead_lettered);
    let _ = writeln!(
        out,
        "  latency           p50 {p50}  p90 {p90}  p99 {p99}  max {max}"
    );
    let _ = writeln!(out, "  longest key wait  {}", show(r.longest_key_wait));
    let _ = writeln!(out, "  rate limited      {}", show(r.rate_limited));
    let _ = writeln!(out, "  gated (all)       {}", show(r.throttled));
    let _ = writeln!(out, "  breaker open      {}", show(r.breaker_open));
    let _ = writeln!(out, "  all settled at    {}", show(r.settled_at));
    out
}
