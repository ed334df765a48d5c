//! The admin commands: `status`, `enqueue`, `dead-letters …`, `purge`, `migrate`. Each
//! opens the same database the relay uses, does one thing, and prints what it did. Only
//! `migrate` and `enqueue` may create the outbox; the others write no DDL and report a
//! missing one.

use std::io::{IsTerminal, Read};
use std::time::Duration;

use outbox_relay::config::duration::format_duration;
use outbox_relay::database::CreateMode;
use outbox_relay::message::Payload;
use outbox_relay::store::{LaneCount, LaneStats, MessageFilter, PageRequest, PurgeRequest};
use outbox_relay::{OrderingPolicy, OutboxMessage, OutboxMessageDraft, OutboxStatus};
use serde_json::json;

use crate::cli::{
    AdminCommand, DeadLettersCommand, EnqueueArgs, ListArgs, MigrateArgs, PurgeArgs, Selector,
    StatusArgs,
};
use crate::{Failure, Setup};

/// Library warnings (a store retrying, say) go to stderr; the command's output to stdout.
pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .compact()
        .try_init();
}

pub(crate) async fn run(setup: Setup, command: AdminCommand) -> Result<(), Failure> {
    match command {
        AdminCommand::Status(args) => status(&setup, args).await,
        AdminCommand::Enqueue(args) => enqueue(&setup, args).await,
        AdminCommand::DeadLetters(DeadLettersCommand::List(args)) => list(&setup, args).await,
        AdminCommand::DeadLetters(DeadLettersCommand::Show { id }) => show(&setup, id).await,
        AdminCommand::DeadLetters(DeadLettersCommand::Requeue(selector)) => {
            requeue_or_discard(&setup, selector, Action::Requeue).await
        }
        AdminCommand::DeadLetters(DeadLettersCommand::Discard(selector)) => {
            requeue_or_discard(&setup, selector, Action::Discard).await
        }
        AdminCommand::Purge(args) => purge(&setup, args).await,
        AdminCommand::Migrate(args) => migrate(&setup, args).await,
    }
}

/// The one admin command that writes DDL: opening with `CreateIfMissing` migrates. With
/// `--print-sql` it prints the SQL instead, and with `--check` it compares versions.
async fn migrate(setup: &Setup, args: MigrateArgs) -> Result<(), Failure> {
    let options = setup.config.store_options();
    if args.print_sql {
        let sql = outbox_relay::database::migration_sql(&setup.url, &options, args.from, args.to)?;
        print!("{sql}");
        return Ok(());
    }
    if args.check {
        let state = outbox_relay::database::schema_state(&setup.url, &options).await?;
        let line = format!("the outbox at {}: {state}", setup.url.address());
        if state.is_current() {
            println!("{line}");
            return Ok(());
        }
        let code = if state.is_ahead() { 4 } else { 3 };
        return Err(Failure {
            code,
            message: line,
        });
    }
    setup.open(CreateMode::CreateIfMissing).await?;
    println!("the outbox at {} is up to date", setup.url.address());
    Ok(())
}

fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|error| Failure::failed(format!("cannot encode the output: {error}")))?;
    println!("{text}");
    Ok(())
}

async fn status(setup: &Setup, args: StatusArgs) -> Result<(), Failure> {
    let store = setup.open(CreateMode::MustExist).await?;
    let filter = MessageFilter {
        lane: args.lane,
        target: args.target,
        ..MessageFilter::default()
    };
    let mut stats = store.stats(&filter).await?;
    for lane in &mut stats {
        // The store counts keys behind a dead letter whatever the lane's policy; only a
        // `block` lane holds them back. Report as the relay does for lanes this config
        // declares `skip`; unknown lanes keep the store's count.
        if setup.config.ordering_of(&lane.lane, &lane.target) == Some(OrderingPolicy::Skip) {
            lane.blocked_keys = 0;
        }
    }
    let gates = crate::gates::lane_gates(&setup.config).await;
    let gates_of = |lane: &LaneStats| {
        gates
            .get(&(lane.lane.clone(), lane.target.clone()))
            .cloned()
            .unwrap_or_default()
    };
    if args.json {
        let rows: Vec<_> = stats
            .iter()
            .map(|lane| {
                let mut row = status_json(lane);
                row["gates"] = gates_of(lane).json();
                row
            })
            .collect();
        return print_json(&rows);
    }
    if stats.is_empty() {
        println!("no messages");
        return Ok(());
    }
    let mut table = Table::new([
        "LANE",
        "TARGET",
        "PENDING",
        "CLAIMED",
        "DELIVERED",
        "DEAD_LETTER",
        "OLDEST_PENDING",
        "BLOCKED_KEYS",
        "GATES",
    ]);
    for lane in &stats {
        table.row([
            lane.lane.clone(),
            lane.target.clone(),
            lane.pending.to_string(),
            lane.claimed.to_string(),
            lane.delivered.to_string(),
            lane.dead_letter.to_string(),
            lane.oldest_pending_age.map_or("-".to_owned(), age),
            lane.blocked_keys.to_string(),
            gates_of(lane).cell(),
        ]);
    }
    table.print();
    Ok(())
}

fn status_json(lane: &LaneStats) -> serde_json::Value {
    json!({
        "lane": lane.lane,
        "target": lane.target,
        "pending": lane.pending,
        "claimed": lane.claimed,
        "delivered": lane.delivered,
        "dead_letter": lane.dead_letter,
        "oldest_pending_age_seconds": lane.oldest_pending_age.map(|d| d.as_secs_f64()),
        "blocked_keys": lane.blocked_keys,
    })
}

/// An age for a table: whole seconds (sub-second ages read `0s`).
fn age(duration: Duration) -> String {
    format_duration(Duration::from_secs(duration.as_secs()))
}

async fn enqueue(setup: &Setup, args: EnqueueArgs) -> Result<(), Failure> {
    // Everything the user typed is checked before the database is opened (or created).
    let payload = read_payload(args.payload.as_deref())?;
    let mut draft = OutboxMessageDraft::from_payload(&args.lane, &args.target, payload)
        .map_err(|error| Failure::input(error.to_string()))?
        .with_max_attempts(args.max_attempts);
    for (name, value) in args.headers {
        draft = draft.with_header(name, value);
    }
    if let Some(key) = args.ordering_key {
        draft = draft.with_ordering_key(key);
    }
    if let Some(key) = args.dedupe_key {
        draft = draft.with_dedupe_key(key);
    }
    if let Some(delay) = args.delay {
        draft = draft.with_delay(delay);
    }
    draft
        .validate(&Default::default())
        .map_err(|error| Failure::input(error.to_string()))?;
    if setup.config.ordering_of(&args.lane, &args.target).is_none() {
        eprintln!(
            "note: lane {}/{} is not in this config; a relay configured for it will deliver it",
            args.lane, args.target
        );
    }
    let store = setup.open(CreateMode::CreateIfMissing).await?;
    let enqueued = store.enqueue(draft).await?;
    let message = &enqueued.message;
    if args.json {
        return print_json(&json!({
            "outbox_id": message.outbox_id,
            "lane": message.lane,
            "target": message.target,
            "duplicate": enqueued.duplicate,
        }));
    }
    if enqueued.duplicate {
        println!(
            "duplicate: {} is already enqueued with this dedupe key in {}/{}; nothing written",
            message.outbox_id, message.lane, message.target
        );
    } else {
        println!(
            "enqueued {} to {}/{}",
            message.outbox_id, message.lane, message.target
        );
    }
    Ok(())
}

/// The `--payload` JSON, or JSON piped on stdin, kept as typed: the relay delivers these bytes.
fn read_payload(arg: Option<&str>) -> Result<Payload, Failure> {
    let (text, source) = match arg {
        Some(text) => (text.to_owned(), "--payload"),
        None => {
            if std::io::stdin().is_terminal() {
                return Err(Failure::input(
                    "no payload: pass --payload JSON, or pipe JSON on stdin",
                ));
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|error| Failure::input(format!("cannot read stdin: {error}")))?;
            (text, "stdin")
        }
    };
    // The reason reads "is not valid JSON: …", so the line names what the user typed.
    Payload::from_json(text).map_err(|error| Failure::input(format!("{source} {}", error.reason)))
}

async fn list(setup: &Setup, args: ListArgs) -> Result<(), Failure> {
    let store = setup.open(CreateMode::MustExist).await?;
    let filter = MessageFilter {
        lane: args.lane,
        target: args.target,
        status: Some(OutboxStatus::DeadLetter),
        ..MessageFilter::default()
    };
    let page = store
        .list(
            &filter,
            PageRequest {
                after: None,
                limit: args.limit,
            },
        )
        .await?;
    if args.json {
        return print_json(&page.messages);
    }
    if page.messages.is_empty() {
        println!("no dead letters");
        return Ok(());
    }
    let mut table = Table::new([
        "ID",
        "LANE",
        "TARGET",
        "ORDERING_KEY",
        "ATTEMPTS",
        "LAST_ERROR",
    ]);
    for message in &page.messages {
        table.row([
            message.outbox_id.to_string(),
            message.lane.clone(),
            message.target.clone(),
            message
                .ordering_key
                .clone()
                .unwrap_or_else(|| "-".to_owned()),
            format!("{}/{}", message.attempt_count, message.max_attempts),
            shorten(message.last_error.as_deref().unwrap_or("-"), 60),
        ]);
    }
    table.print();
    if page.next_cursor.is_some() {
        println!("(more: raise --limit, now {})", args.limit);
    }
    Ok(())
}

/// `dead-letters show`: one dead letter, every field. A message in any other status is
/// refused (exit 2, naming its status), so the command never passes a pending or delivered
/// message off as dead.
async fn show(setup: &Setup, id: uuid::Uuid) -> Result<(), Failure> {
    let store = setup.open(CreateMode::MustExist).await?;
    let message: OutboxMessage = store
        .get(id)
        .await?
        .ok_or_else(|| Failure::failed(format!("no message {id}")))?;
    if message.status != OutboxStatus::DeadLetter {
        return Err(Failure::input(format!(
            "message {id} is {}, not a dead letter: `dead-letters show` shows dead letters only",
            message.status
        )));
    }
    print_json(&message)
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Requeue,
    Discard,
}

async fn requeue_or_discard(
    setup: &Setup,
    selector: Selector,
    action: Action,
) -> Result<(), Failure> {
    // No selector is refused, never read as "all": --all must be typed.
    let filter = if !selector.ids.is_empty() {
        MessageFilter::all().with_ids(selector.ids.iter().copied())
    } else if let Some(lane) = selector.lane {
        MessageFilter {
            lane: Some(lane),
            target: selector.target,
            ..MessageFilter::default()
        }
    } else if selector.all {
        MessageFilter::all()
    } else {
        return Err(Failure::input(
            "say which dead letters: give IDs, --lane LANE [--target TARGET], or --all",
        ));
    }
    .with_status(OutboxStatus::DeadLetter);
    let store = setup.open(CreateMode::MustExist).await?;
    let (count, verb) = match action {
        Action::Requeue => (store.requeue_dead_letters(&filter).await?, "requeued"),
        Action::Discard => (store.discard_dead_letters(&filter).await?, "discarded"),
    };
    println!("{verb} {count} dead letter{}", plural(count));
    let asked = selector.ids.len() as u64;
    if asked > count {
        eprintln!(
            "note: {} of the {asked} ids were not dead letters (or do not exist)",
            asked - count
        );
    }
    Ok(())
}

async fn purge(setup: &Setup, args: PurgeArgs) -> Result<(), Failure> {
    if args.batch_size == 0 {
        return Err(Failure::input("--batch-size must be greater than zero"));
    }
    let store = setup.open(CreateMode::MustExist).await?;
    let mut request = PurgeRequest::older_than(args.older_than, args.batch_size);
    request.dry_run = args.dry_run;
    let count = LaneCount::total(&store.purge(&request).await?);
    println!(
        "{} {count} delivered or dead-lettered message{} older than {}",
        if args.dry_run {
            "would purge"
        } else {
            "purged"
        },
        plural(count),
        format_duration(args.older_than)
    );
    Ok(())
}

fn plural(count: u64) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

fn shorten(text: &str, max: usize) -> String {
    let one_line = text.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// A plain text table: columns padded to their widest cell.
struct Table<const N: usize> {
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    fn new(header: [&str; N]) -> Self {
        Self {
            rows: vec![header.map(str::to_owned)],
        }
    }

    fn row(&mut self, row: [String; N]) {
        self.rows.push(row);
    }

    fn print(&self) {
        let mut widths = [0; N];
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in &self.rows {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            println!("{}", line.join("  ").trim_end());
        }
    }
}
