//! The daemon's settings from the environment: each file key but the lanes has a variable
//! (`OUTBOX_…`) that overrides it, so a container can run the relay from an image's config
//! file and its environment alone. [`ENV_SETTINGS`] lists the ones this module applies;
//! the binary's flags read the rest (`OUTBOX_CONFIG`, `OUTBOX_DATABASE_URL`,
//! `OUTBOX_PG_…`, `OUTBOX_METRICS_LISTEN`, `OUTBOX_LOG_FORMAT`). The guide's table
//! "Settings from the environment" names them all, and a test holds the two together.
//!
//! Precedence: a flag, then its variable, then the file, then the default. An empty
//! variable counts as unset (an unset variable in a compose file).

use toml::{Table, Value};

use super::{parse_error, FileConfig, FileConfigError};

/// How a variable's text becomes the key's TOML value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvKind {
    /// Text as it is (a name, a path, a URL, a duration such as `30s`).
    Text,
    /// A whole number.
    Integer,
    /// An address such as `0.0.0.0:9464`, or `false`/`off` for none.
    Address,
    /// A duration such as `5m`, or `false`/`off` for none.
    DurationOrOff,
    /// A comma-separated list (`metrics,probes,api`).
    List,
    /// `true` or `false`.
    Boolean,
}

/// One setting read from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvSetting {
    /// The variable, e.g. `OUTBOX_LISTENER_ADDRESS`.
    pub variable: &'static str,
    /// The file key it overrides, dotted, e.g. `listener.address`.
    pub key: &'static str,
    /// How its text is read.
    pub kind: EnvKind,
}

const fn setting(variable: &'static str, key: &'static str, kind: EnvKind) -> EnvSetting {
    EnvSetting {
        variable,
        key,
        kind,
    }
}

/// Every file key [`FileConfig::from_toml_str_with_env`] overrides from the environment.
pub const ENV_SETTINGS: &[EnvSetting] = &[
    setting("OUTBOX_TABLE_PREFIX", "table_prefix", EnvKind::Text),
    setting("OUTBOX_SCHEMA", "schema", EnvKind::Text),
    setting("OUTBOX_CONNECT_TIMEOUT", "connect_timeout", EnvKind::Text),
    setting("OUTBOX_SHUTDOWN_TIMEOUT", "shutdown_timeout", EnvKind::Text),
    setting("OUTBOX_CONSUMER_ID", "consumer_id", EnvKind::Text),
    setting("OUTBOX_OTLP_ENDPOINT", "otlp_endpoint", EnvKind::Text),
    setting("OUTBOX_OTLP_CA_FILE", "otlp_ca_file", EnvKind::Text),
    setting(
        "OUTBOX_LISTENER_ADDRESS",
        "listener.address",
        EnvKind::Address,
    ),
    setting(
        "OUTBOX_LISTENER_TOKEN_ENV",
        "listener.token_env",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_LISTENER_TOKEN_FILE",
        "listener.token_file",
        EnvKind::Text,
    ),
    setting("OUTBOX_LISTENER_ROUTES", "listener.routes", EnvKind::List),
    setting(
        "OUTBOX_LISTENER_ALLOWED_HOSTS",
        "listener.allowed_hosts",
        EnvKind::List,
    ),
    setting(
        "OUTBOX_LISTENER_OPEN_LANE_READS",
        "listener.open_lane_reads",
        EnvKind::Boolean,
    ),
    setting(
        "OUTBOX_LISTENER_SECURE_COOKIES",
        "listener.secure_cookies",
        EnvKind::Boolean,
    ),
    setting(
        "OUTBOX_LISTENER_API_STORE_CALLS",
        "listener.api_store_calls",
        EnvKind::Integer,
    ),
    setting(
        "OUTBOX_LISTENER_API_STORE_TIMEOUT",
        "listener.api_store_timeout",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_LISTENER_HEADER_READ_TIMEOUT",
        "listener.header_read_timeout",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_LISTENER_REQUEST_TIMEOUT",
        "listener.request_timeout",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_LISTENER_IDLE_TIMEOUT",
        "listener.idle_timeout",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_LISTENER_MAX_CONNECTIONS",
        "listener.max_connections",
        EnvKind::Integer,
    ),
    setting(
        "OUTBOX_SUPERVISOR_MAX_RESTARTS",
        "supervisor.max_restarts",
        EnvKind::Integer,
    ),
    setting(
        "OUTBOX_SUPERVISOR_RESTART_WINDOW",
        "supervisor.restart_window",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_SUPERVISOR_RESTART_BACKOFF",
        "supervisor.restart_backoff",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_SUPERVISOR_RESTART_BACKOFF_MAX",
        "supervisor.restart_backoff_max",
        EnvKind::Text,
    ),
    setting(
        "OUTBOX_SUPERVISOR_FAIL_LIVENESS_AFTER",
        "supervisor.fail_liveness_after",
        EnvKind::DurationOrOff,
    ),
];

/// The keys a variable's key replaces besides itself: the older name of the same setting,
/// and the other source of the token (a token from the environment's choice of source
/// replaces the file's, whichever it was).
fn replaced(key: &str) -> &'static [&'static str] {
    match key {
        "listener.address" => &["metrics_listen"],
        "listener.token_env" | "listener.token_file" => &[
            "listener.token_env",
            "listener.token_file",
            "listener.control_token_env",
            "listener.control_token_file",
        ],
        _ => &[],
    }
}

impl FileConfig {
    /// Parses TOML `text`, overrides its keys with the variables of [`ENV_SETTINGS`] that
    /// `lookup` finds set, and validates. An error in a value that came from a variable
    /// names the variable.
    pub fn from_toml_str_with_env(
        origin: &str,
        text: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, FileConfigError> {
        let file: Table =
            toml::from_str(text).map_err(|error| parse_error(origin, text, &error))?;
        let mut given = Vec::new();
        for setting in ENV_SETTINGS {
            let Some(text) = lookup(setting.variable).filter(|v| !v.trim().is_empty()) else {
                continue;
            };
            given.push((setting, setting.value(&text)?));
        }
        // The file with the variables applied, but the one at `skip`.
        let overlay = |skip: Option<usize>| {
            let mut table = file.clone();
            for (i, (setting, value)) in given.iter().enumerate() {
                if Some(i) == skip {
                    continue;
                }
                for key in replaced(setting.key) {
                    remove(&mut table, key);
                }
                insert(&mut table, setting.key, value.clone());
            }
            table
        };
        let read = |table: Table| -> Result<FileConfig, toml::de::Error> {
            Value::Table(table).try_into()
        };
        let config = read(overlay(None)).map_err(|error| {
            // The value that does not read is the variable whose absence makes it read.
            let culprit = (0..given.len()).find(|&i| read(overlay(Some(i))).is_ok());
            match culprit {
                Some(i) => FileConfigError::new(
                    given[i].0.variable,
                    Some(given[i].0.key.to_owned()),
                    error.message(),
                ),
                // The file's own mistake: read it alone for the line and column.
                None => match toml::from_str::<FileConfig>(text) {
                    Err(error) => parse_error(origin, text, &error),
                    Ok(_) => FileConfigError::new(origin, None, error.message()),
                },
            }
        })?;
        config.validate().map_err(|error| {
            let variable = given
                .iter()
                .find(|(setting, _)| setting.key == error.field)
                .map(|(setting, _)| setting.variable);
            FileConfigError::new(variable.unwrap_or(origin), Some(error.field), error.reason)
        })?;
        Ok(config)
    }

    /// [`Self::load`], with the environment's overrides (see
    /// [`Self::from_toml_str_with_env`]).
    pub fn load_with_env(
        path: &std::path::Path,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, FileConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| {
            FileConfigError::new(&origin, None, format!("cannot read the file: {error}"))
        })?;
        Self::from_toml_str_with_env(&origin, &text, lookup)
    }
}

impl EnvSetting {
    /// The TOML value of the variable's `text`; the error names the variable.
    fn value(&self, text: &str) -> Result<Value, FileConfigError> {
        let text = text.trim();
        Ok(match self.kind {
            EnvKind::Text => Value::String(text.to_owned()),
            EnvKind::Integer => Value::Integer(text.parse().map_err(|_| {
                FileConfigError::new(
                    self.variable,
                    Some(self.key.to_owned()),
                    format!("{text:?} is not a whole number"),
                )
            })?),
            EnvKind::Address | EnvKind::DurationOrOff => match text {
                "false" | "off" => Value::Boolean(false),
                address => Value::String(address.to_owned()),
            },
            EnvKind::Boolean => match text {
                "true" => Value::Boolean(true),
                "false" => Value::Boolean(false),
                other => {
                    return Err(FileConfigError::new(
                        self.variable,
                        Some(self.key.to_owned()),
                        format!("{other:?} is not true or false"),
                    ))
                }
            },
            EnvKind::List => Value::Array(
                text.split(',')
                    .map(str::trim)
                    .filter(|item| !item.is_empty())
                    .map(|item| Value::String(item.to_owned()))
                    .collect(),
            ),
        })
    }
}

/// Sets the dotted `key` in `table`, making the tables on its way.
fn insert(table: &mut Table, key: &str, value: Value) {
    match key.split_once('.') {
        Some((section, rest)) => {
            let entry = table
                .entry(section)
                .or_insert_with(|| Value::Table(Table::new()));
            if !entry.is_table() {
                *entry = Value::Table(Table::new());
            }
            if let Value::Table(inner) = entry {
                insert(inner, rest, value);
            }
        }
        None => {
            table.insert(key.to_owned(), value);
        }
    }
}

/// Removes the dotted `key` from `table`, if there.
fn remove(table: &mut Table, key: &str) {
    match key.split_once('.') {
        Some((section, rest)) => {
            if let Some(Value::Table(inner)) = table.get_mut(section) {
                remove(inner, rest);
            }
        }
        None => {
            table.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::MetricsListen;
    use std::collections::HashMap;

    const FILE: &str = "metrics_listen = \"127.0.0.1:9464\"\n\
        [listener]\ncontrol_token_env = \"FROM_FILE\"\n\
        [[lanes]]\nlane = \"orders\"\ntarget = \"audit\"\nsink = { kind = \"log\" }\n";

    fn with(vars: &[(&str, &str)]) -> Result<FileConfig, FileConfigError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        FileConfig::from_toml_str_with_env("relay.toml", FILE, &|name| vars.get(name).cloned())
    }

    #[test]
    fn every_variable_overrides_its_key() {
        let config = with(&[
            ("OUTBOX_TABLE_PREFIX", "shop"),
            ("OUTBOX_SCHEMA", "outbox"),
            ("OUTBOX_CONNECT_TIMEOUT", "3s"),
            ("OUTBOX_SHUTDOWN_TIMEOUT", "7s"),
            ("OUTBOX_CONSUMER_ID", "relay-7"),
            ("OUTBOX_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OUTBOX_OTLP_CA_FILE", "/etc/ca.pem"),
            ("OUTBOX_LISTENER_ADDRESS", "0.0.0.0:9470"),
            ("OUTBOX_LISTENER_TOKEN_ENV", "OUTBOX_CONTROL_TOKEN"),
            ("OUTBOX_LISTENER_ROUTES", "metrics, probes,api,control"),
            (
                "OUTBOX_LISTENER_ALLOWED_HOSTS",
                "relay.internal, ops.example",
            ),
            ("OUTBOX_LISTENER_OPEN_LANE_READS", "true"),
            ("OUTBOX_LISTENER_SECURE_COOKIES", "true"),
            ("OUTBOX_LISTENER_API_STORE_CALLS", "3"),
            ("OUTBOX_LISTENER_API_STORE_TIMEOUT", "4s"),
            ("OUTBOX_LISTENER_HEADER_READ_TIMEOUT", "2s"),
            ("OUTBOX_LISTENER_REQUEST_TIMEOUT", "8s"),
            ("OUTBOX_LISTENER_IDLE_TIMEOUT", "9s"),
            ("OUTBOX_LISTENER_MAX_CONNECTIONS", "12"),
            ("OUTBOX_SUPERVISOR_MAX_RESTARTS", "4"),
            ("OUTBOX_SUPERVISOR_RESTART_WINDOW", "2m"),
            ("OUTBOX_SUPERVISOR_RESTART_BACKOFF", "200ms"),
            ("OUTBOX_SUPERVISOR_RESTART_BACKOFF_MAX", "20s"),
            ("OUTBOX_SUPERVISOR_FAIL_LIVENESS_AFTER", "10m"),
        ])
        .expect("a config from the environment");
        assert_eq!(config.table_prefix.as_deref(), Some("shop"));
        assert_eq!(config.schema.as_deref(), Some("outbox"));
        assert_eq!(config.connect_timeout.map(|d| d.0.as_secs()), Some(3));
        assert_eq!(config.shutdown_timeout.map(|d| d.0.as_secs()), Some(7));
        assert_eq!(config.consumer_id.as_deref(), Some("relay-7"));
        assert_eq!(
            config.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4318")
        );
        assert_eq!(
            config.otlp_ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        // The variable replaces the file's older key for the same setting.
        assert_eq!(config.metrics_listen, None);
        assert_eq!(
            config.listen_address(),
            MetricsListen::Listen("0.0.0.0:9470".parse().unwrap())
        );
        assert_eq!(
            config.listener.token_env.as_deref(),
            Some("OUTBOX_CONTROL_TOKEN")
        );
        assert_eq!(config.listener.control_token_env, None);
        assert_eq!(
            config.listener.routes,
            Some(vec![
                "metrics".into(),
                "probes".into(),
                "api".into(),
                "control".into()
            ])
        );
        assert_eq!(
            config.listener.allowed_hosts,
            Some(vec!["relay.internal".into(), "ops.example".into()])
        );
        assert_eq!(config.listener.open_lane_reads, Some(true));
        assert_eq!(config.listener.secure_cookies, Some(true));
        assert_eq!(config.listener.api_store_calls, Some(3));
        assert_eq!(
            config.listener.api_store_timeout.map(|d| d.0.as_secs()),
            Some(4)
        );
        let limits = config.listener.to_config();
        assert_eq!(limits.header_read_timeout.as_secs(), 2);
        assert_eq!(limits.request_timeout.as_secs(), 8);
        assert_eq!(limits.idle_timeout.as_secs(), 9);
        assert_eq!(limits.max_connections, 12);
        assert_eq!(config.supervisor.max_restarts, Some(4));
        assert_eq!(
            config.supervisor.restart_window.map(|d| d.0.as_secs()),
            Some(120)
        );
        assert_eq!(
            config.supervisor.restart_backoff.map(|d| d.0.as_millis()),
            Some(200)
        );
        assert_eq!(
            config.supervisor.restart_backoff_max.map(|d| d.0.as_secs()),
            Some(20)
        );
        assert_eq!(
            config.supervisor.to_config().fail_liveness_after,
            Some(std::time::Duration::from_secs(600))
        );
        let never = with(&[("OUTBOX_SUPERVISOR_FAIL_LIVENESS_AFTER", "off")])
            .expect("a config from the environment");
        assert_eq!(never.supervisor.to_config().fail_liveness_after, None);
        // Every setting of the list was given above.
        assert_eq!(ENV_SETTINGS.len(), 25);
    }

    #[test]
    fn a_bad_value_names_its_variable_and_an_empty_one_is_unset() {
        for (vars, named) in [
            (
                vec![("OUTBOX_LISTENER_MAX_CONNECTIONS", "many")],
                "OUTBOX_LISTENER_MAX_CONNECTIONS",
            ),
            (
                vec![("OUTBOX_LISTENER_MAX_CONNECTIONS", "0")],
                "OUTBOX_LISTENER_MAX_CONNECTIONS",
            ),
            (
                vec![("OUTBOX_SHUTDOWN_TIMEOUT", "0s")],
                "OUTBOX_SHUTDOWN_TIMEOUT",
            ),
            (
                vec![("OUTBOX_LISTENER_ROUTES", "metrics,admin")],
                "OUTBOX_LISTENER_ROUTES",
            ),
            (
                vec![("OUTBOX_CONNECT_TIMEOUT", "soon")],
                "OUTBOX_CONNECT_TIMEOUT",
            ),
        ] {
            let error = with(&vars).expect_err(&format!("{vars:?}"));
            assert!(error.to_string().starts_with(named), "{vars:?}: {error}");
        }
        // The file's token (control_token_env) stays when the variable is empty, so every
        // interface is allowed.
        let config = with(&[
            ("OUTBOX_LISTENER_ADDRESS", "0.0.0.0:9464"),
            ("OUTBOX_LISTENER_TOKEN_ENV", " "),
        ])
        .expect("the file's token");
        assert_eq!(
            config.listener.control_token_env.as_deref(),
            Some("FROM_FILE")
        );
        let off = with(&[("OUTBOX_LISTENER_ADDRESS", "off")]).expect("no listener");
        assert_eq!(off.listen_address(), MetricsListen::Off);
    }
}
