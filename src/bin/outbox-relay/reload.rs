//! SIGHUP: the daemon reads its config file again and brings the running lanes in line with
//! its `[[lanes]]`, through the relay's runtime commands: a lane no longer in the file is
//! removed (drained first), a new one added, a changed one (any lane setting or its sink)
//! removed and added again, paused again if it was paused.
//!
//! All or nothing up front: a file that does not parse or validate, or a new sink that
//! cannot be built, changes nothing (the error is logged and the running lanes go on).
//! Reading the file and building the sinks ([`RunningLanes::prepare`]) touches nothing
//! that runs, so a SIGTERM or SIGINT meanwhile abandons the reload and stops the daemon at
//! once; the lane changes ([`RunningLanes::apply`]) then run to their end.
//! Only `[[lanes]]` are reloaded (their retention included); the database, the metrics
//! listener, the supervisor, the shutdown timeout and the `[[lane_patterns]]` need a
//! restart, which the log says. A lane removed from `[[lanes]]` that a pattern matches is
//! the pattern's at its next pass; one added that a pattern runs takes over from it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use outbox_relay::config::file::FileConfig;
use outbox_relay::relay::{LaneKey, RelayHandle};
use outbox_relay::sinks::SinkConfig;
use outbox_relay::{DeliveryHandler, LaneConfig};

/// The lanes the daemon runs, as the config file last described them.
pub(crate) struct RunningLanes {
    lanes: Vec<(LaneConfig, SinkConfig)>,
}

/// A reload read and built, not yet applied: the lanes the file wants, and the handlers of
/// the new (`false`) and changed (`true`) ones.
pub(crate) struct Reload {
    path: PathBuf,
    wanted: Vec<(LaneConfig, SinkConfig)>,
    starting: Vec<(LaneConfig, Arc<dyn DeliveryHandler>, bool)>,
}

/// What a reload changed, by lane name.
#[derive(Debug, Default)]
struct Changes {
    added: Vec<String>,
    removed: Vec<String>,
    changed: Vec<String>,
}

fn key(config: &LaneConfig) -> LaneKey {
    LaneKey::new(&config.name, &config.target)
}

impl RunningLanes {
    /// The lanes the daemon started with.
    pub(crate) fn new(lanes: Vec<(LaneConfig, SinkConfig)>) -> Self {
        Self { lanes }
    }

    /// The first half of a reload from `path` (None: the daemon runs the embedded default,
    /// which cannot change): reads and validates the file and builds the sinks of new and
    /// changed lanes, touching nothing that runs, so it may be abandoned at any point (a
    /// signal does). `None` when there is nothing to apply; the reason is logged.
    pub(crate) async fn prepare(&self, path: Option<&Path>) -> Option<Reload> {
        let Some(path) = path else {
            tracing::warn!("SIGHUP: no --config file to reload (the embedded default cannot change); lanes unchanged");
            return None;
        };
        let wanted = match FileConfig::load(path)
            .map_err(|e| e.to_string())
            .and_then(|config| {
                config
                    .lanes()
                    .map_err(|error| format!("{}: {error}", path.display()))
            }) {
            Ok(lanes) => lanes,
            Err(error) => {
                tracing::error!(%error, "SIGHUP: the config file was refused; lanes unchanged");
                return None;
            }
        };
        let running: HashMap<LaneKey, &(LaneConfig, SinkConfig)> =
            self.lanes.iter().map(|lane| (key(&lane.0), lane)).collect();
        // The sinks of new and changed lanes are built before anything is touched: one that
        // cannot be built refuses the whole reload.
        let mut starting: Vec<(LaneConfig, Arc<dyn DeliveryHandler>, bool)> = Vec::new();
        for (config, sink) in &wanted {
            let replacing = match running.get(&key(config)) {
                Some((old_config, old_sink)) if old_config == config && old_sink == sink => {
                    continue
                }
                Some(_) => true,
                None => false,
            };
            match sink.build(&format!("lanes[{}].sink", config.key())).await {
                Ok(handler) => starting.push((config.clone(), handler, replacing)),
                Err(error) => {
                    tracing::error!(%error, "SIGHUP: reload failed; lanes unchanged");
                    return None;
                }
            }
        }
        Some(Reload {
            path: path.to_owned(),
            wanted,
            starting,
        })
    }

    /// The second half of a reload: brings the running lanes in line with `reload`. Lanes
    /// being removed are given `drain` to finish their deliveries. Logs what it did or why
    /// it stopped; never stops the daemon.
    pub(crate) async fn apply(&mut self, reload: Reload, relay: &RelayHandle, drain: Duration) {
        let path = reload.path.clone();
        match self.change(reload, relay, drain).await {
            Ok(changes) => tracing::info!(
                added = ?changes.added,
                removed = ?changes.removed,
                changed = ?changes.changed,
                "SIGHUP: lanes reloaded from {} (other settings take effect at a restart)",
                path.display()
            ),
            Err(error) => {
                tracing::error!(%error, "SIGHUP: reload failed");
            }
        }
    }

    async fn change(
        &mut self,
        reload: Reload,
        relay: &RelayHandle,
        drain: Duration,
    ) -> Result<Changes, String> {
        let Reload {
            wanted, starting, ..
        } = reload;
        let running: HashMap<LaneKey, &(LaneConfig, SinkConfig)> =
            self.lanes.iter().map(|lane| (key(&lane.0), lane)).collect();
        let wanted_keys: Vec<LaneKey> = wanted.iter().map(|(config, _)| key(config)).collect();
        let mut changes = Changes::default();
        let paused: Vec<LaneKey> = relay
            .status()
            .await
            .map_err(|error| format!("the relay does not answer: {error}"))?
            .into_iter()
            // Only this process's pause is carried over: a fleet-wide one holds the new
            // lane by itself, and copying it here would outlive its `resume`.
            .filter(|status| status.paused_here)
            .map(|status| status.lane)
            .collect();
        let replaced: Vec<LaneKey> = starting
            .iter()
            .filter(|(_, _, replacing)| *replacing)
            .map(|(config, _, _)| key(config))
            .collect();
        let leaving: Vec<LaneKey> = running
            .keys()
            .filter(|lane_key| !wanted_keys.contains(lane_key) || replaced.contains(lane_key))
            .cloned()
            .collect();
        let sinks: HashMap<LaneKey, SinkConfig> = wanted
            .iter()
            .map(|(config, sink)| (key(config), sink.clone()))
            .collect();
        // From here on `self.lanes` follows each step, so a step that fails leaves it true
        // to what runs, and the next SIGHUP starts from there.
        for lane_key in leaving {
            relay
                .remove_lane(&lane_key.name, &lane_key.target, drain)
                .await
                .map_err(|error| format!("removing {lane_key}: {error}"))?;
            self.lanes.retain(|(config, _)| key(config) != lane_key);
            if !wanted_keys.contains(&lane_key) {
                changes.removed.push(lane_key.to_string());
            }
        }
        for (config, handler, replacing) in starting {
            let lane_key = key(&config);
            relay
                .add_lane(config.clone(), handler)
                .await
                .map_err(|error| format!("adding {lane_key}: {error}"))?;
            if let Some(sink) = sinks.get(&lane_key) {
                self.lanes.push((config, sink.clone()));
            }
            if replacing && paused.contains(&lane_key) {
                relay
                    .pause(&lane_key.name, &lane_key.target)
                    .await
                    .map_err(|error| format!("pausing {lane_key} again: {error}"))?;
            }
            if replacing {
                changes.changed.push(lane_key.to_string());
            } else {
                changes.added.push(lane_key.to_string());
            }
        }
        changes.removed.sort();
        Ok(changes)
    }
}
