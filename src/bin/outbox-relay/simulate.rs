//! `outbox-relay simulate`: each lane of the config file, with its real settings, against a
//! stated load and target behaviour, in virtual time (`outbox_relay::simulate`). No
//! database is opened and nothing is delivered.

use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use outbox_relay::config::duration::parse_duration;
use outbox_relay::simulate::{lane, Keys, LaneReport, Load};

use crate::{Failure, Setup};

#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// How long messages are enqueued, in virtual time; a drain follows, with the target
    /// answering every delivery.
    #[arg(long, value_parser = parse_duration, default_value = "1h", value_name = "DURATION")]
    duration: Duration,
    /// Messages per second per lane (N, N/s, N/m or N/h).
    #[arg(long, value_parser = parse_rate, default_value = "50/s", value_name = "RATE")]
    rate: f64,
    /// Ordering keys: `none`, N (uniform over N keys), or `hot` (one key takes half).
    #[arg(long, value_parser = parse_keys, default_value = "none", value_name = "none|N|hot")]
    keys: Keys,
    /// Each message's max_attempts.
    #[arg(long, default_value_t = outbox_relay::message::DEFAULT_MAX_ATTEMPTS,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: u32,
    /// Share of deliveries that fail (retryable), 0 to 1.
    #[arg(long, value_parser = parse_share, default_value = "0.1", value_name = "SHARE")]
    failure_rate: f64,
    /// How long each delivery takes.
    #[arg(long, value_parser = parse_duration, default_value = "20ms", value_name = "DURATION")]
    latency: Duration,
    /// The Retry-After the target asks for (with --retry-after-rate).
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "DURATION")]
    retry_after: Duration,
    /// Share of deliveries answered with a Retry-After, 0 to 1.
    #[arg(long, value_parser = parse_share, default_value = "0.0", value_name = "SHARE")]
    retry_after_rate: f64,
    /// The target is down for LENGTH starting at START (e.g. 10m@20m); repeatable.
    #[arg(long = "outage", value_parser = parse_outage, value_name = "LENGTH@START")]
    outages: Vec<(Duration, Duration)>,
    /// The seed of every draw: one seed, one report.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let (count, per) = s.split_once('/').unwrap_or((s, "s"));
    let seconds = match per.trim() {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        other => return Err(format!("unknown unit {other:?} (use /s, /m or /h)")),
    };
    match count.trim().parse::<f64>() {
        Ok(count) if count.is_finite() && count > 0.0 && count / seconds <= 10_000.0 => {
            Ok(count / seconds)
        }
        _ => Err(format!(
            "{s:?} is not a rate above 0 and at most 10000/s (e.g. 50/s)"
        )),
    }
}

fn parse_keys(s: &str) -> Result<Keys, String> {
    match s.trim() {
        "none" => Ok(Keys::None),
        "hot" => Ok(Keys::Hot),
        n => match n.parse::<u32>() {
            Ok(n) if n > 0 => Ok(Keys::Spread(n)),
            _ => Err(format!(
                "{s:?} is not `none`, `hot` or a number of keys above 0"
            )),
        },
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("{s:?} is not a share from 0 to 1 (e.g. 0.1)")),
    }
}

fn parse_outage(s: &str) -> Result<(Duration, Duration), String> {
    let (length, start) = s
        .split_once('@')
        .ok_or_else(|| format!("{s:?} is not LENGTH@START (e.g. 10m@20m)"))?;
    let length = parse_duration(length).map_err(|error| error.to_string())?;
    let start = parse_duration(start).map_err(|error| error.to_string())?;
    Ok((start, length))
}

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
