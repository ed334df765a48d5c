//! `outbox-relay pause|resume --lane L --target T [--reason …]`: the fleet-wide pause of a
//! lane, written to the store. Every relay on that database applies it within a second
//! (`outbox_relay::store::lane_control`), a relay started later starts the lane paused,
//! and no relay needs to be running: the database URL is all it takes.

use outbox_relay::database::CreateMode;
use outbox_relay::store::LanePauseRequest;

use crate::cli::ControlArgs;
use crate::{Failure, Setup};

/// Who a pause from this command is recorded as, unless `--by` says: `cli:USER@HOST`.
fn default_author() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!("cli:{user}@{host}")
}

/// Pauses (`pause` true) or resumes the lane in `args` for every relay on the database.
pub(crate) async fn run(setup: Setup, pause: bool, args: ControlArgs) -> Result<(), Failure> {
    let store = setup.open(CreateMode::MustExist).await?;
    let lane = format!("{}/{}", args.lane, args.target);
    if pause {
        let mut request = LanePauseRequest::new(
            &args.lane,
            &args.target,
            args.by.unwrap_or_else(default_author),
        );
        if let Some(reason) = args.reason {
            request = request.reason(reason);
        }
        let pause = store.pause_lane(&request).await?;
        println!(
            "paused {lane} for every relay on {} (by {}, at {})",
            setup.url, pause.paused_by, pause.paused_at
        );
    } else {
        if args.reason.is_some() {
            return Err(Failure::input("resume takes no --reason"));
        }
        match store.resume_lane(&args.lane, &args.target).await? {
            Some(lifted) => println!(
                "resumed {lane} for every relay on {} (paused by {} at {})",
                setup.url, lifted.paused_by, lifted.paused_at
            ),
            None => println!("{lane} was not paused on {}", setup.url),
        }
    }
    Ok(())
}
