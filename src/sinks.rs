//! Ready-made [`DeliveryHandler`]s, and [`SinkConfig`], the `sink = { kind = … }` table of a
//! lane in the config file.
//!
//! Every sink lives in its own module with the same shape, in the same order: its config
//! struct (what the file says), its handler (what delivers), its errors. Adding a sink
//! (webhook, NATS, RabbitMQ) is a module of that shape and one variant of [`SinkConfig`].
//!
//! - [`log`]: one JSON line per message on stdout (or any writer). The default sink of the
//!   binary, and a way to watch a lane without a broker.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::delivery::DeliveryHandler;

pub mod log;

pub use self::log::{LogSink, LogSinkConfig};

/// Which sink delivers a lane, as the config file names it:
/// `sink = { kind = "log" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum SinkConfig {
    /// [`LogSink`]: a JSON line per message.
    Log(LogSinkConfig),
}

impl SinkConfig {
    /// The `kind` word of this sink.
    pub fn kind(&self) -> &'static str {
        match self {
            SinkConfig::Log(_) => "log",
        }
    }

    /// Checks the sink's settings; `field` is where the sink sits in the config
    /// (e.g. `lanes[orders/billing].sink`), so the error can name it.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        match self {
            SinkConfig::Log(config) => config.validate(field),
        }
    }

    /// Builds the handler.
    pub fn build(&self) -> Arc<dyn DeliveryHandler> {
        match self {
            SinkConfig::Log(config) => Arc::new(LogSink::from_config(config)),
        }
    }
}
