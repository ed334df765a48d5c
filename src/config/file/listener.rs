//! `[listener]`: the HTTP listener's limits and where its control token comes from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::duration::HumanDuration;
use crate::config::{ConfigError, ControlToken, ListenerConfig};

/// `[listener]`: absent fields keep their defaults. Without `control_token_env` or
/// `control_token_file` the mutating routes (`POST /api/v1/…`) are off.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSection {
    /// How long a client may take to send a request's headers. Default 5s.
    pub header_read_timeout: Option<HumanDuration>,
    /// How long a connection may go without a byte read or written. Default 60s.
    pub idle_timeout: Option<HumanDuration>,
    /// How many connections are served at once; past it, `503` and closed. Default 64.
    pub max_connections: Option<usize>,
    /// The environment variable holding the control token.
    pub control_token_env: Option<String>,
    /// A file holding the control token (its surrounding whitespace dropped).
    pub control_token_file: Option<PathBuf>,
    /// The route groups served: any of `metrics`, `probes`, `api`, `control`, `ui`.
    /// Default: all.
    pub routes: Option<Vec<String>>,
    /// Host names the web UI (`/ui`) answers to besides IP addresses and `localhost`: the
    /// name operators reach the listener by (behind a proxy, a cluster DNS name). A
    /// request with any other `Host` gets 403 (DNS rebinding). Default: none.
    pub ui_hosts: Option<Vec<String>>,
}

/// The route groups `routes` may name (`http::RouteGroup`'s names; the config parses
/// without the `http` feature).
const ROUTE_GROUPS: [&str; 5] = ["metrics", "probes", "api", "control", "ui"];

impl ListenerSection {
    /// The limits, defaults filled in (not validated: see [`Self::validate`]).
    pub fn to_config(&self) -> ListenerConfig {
        let defaults = ListenerConfig::default();
        ListenerConfig {
            header_read_timeout: self
                .header_read_timeout
                .map_or(defaults.header_read_timeout, |d| d.0),
            idle_timeout: self.idle_timeout.map_or(defaults.idle_timeout, |d| d.0),
            max_connections: self.max_connections.unwrap_or(defaults.max_connections),
        }
    }

    /// Checks the section without reading the token; the error names the field
    /// (`listener.…`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.to_config()
            .validate()
            .map_err(|error| ConfigError::new(format!("listener.{}", error.field), error.reason))?;
        match (&self.control_token_env, &self.control_token_file) {
            (Some(_), Some(_)) => Err(ConfigError::new(
                "listener.control_token_file",
                "set control_token_env or control_token_file, not both",
            )),
            (Some(variable), None) if variable.trim().is_empty() => Err(ConfigError::new(
                "listener.control_token_env",
                "must name an environment variable",
            )),
            (None, Some(path)) if path.as_os_str().is_empty() => Err(ConfigError::new(
                "listener.control_token_file",
                "must name a file",
            )),
            _ => Ok(()),
        }?;
        for host in self.ui_hosts.iter().flatten() {
            let name_like = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if !name_like {
                return Err(ConfigError::new(
                    "listener.ui_hosts",
                    format!("{host:?} is not a host name (letters, digits, '-' and '.'; no port)"),
                ));
            }
        }
        for group in self.routes.iter().flatten() {
            if !ROUTE_GROUPS.contains(&group.as_str()) {
                return Err(ConfigError::new(
                    "listener.routes",
                    format!("unknown route group {group:?}; expected any of metrics, probes, api, control, ui"),
                ));
            }
        }
        Ok(())
    }

    /// The control token, read from the environment variable or the file the section
    /// names; `None` when it names neither. The error names the field and the variable or
    /// file, never the token.
    pub fn control_token(&self) -> Result<Option<ControlToken>, ConfigError> {
        if let Some(variable) = &self.control_token_env {
            let field = "listener.control_token_env";
            let text = std::env::var(variable).map_err(|error| {
                let why = match error {
                    std::env::VarError::NotPresent => "is not set",
                    std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                };
                ConfigError::new(field, format!("the environment variable {variable} {why}"))
            })?;
            return ControlToken::new(&text).map(Some).map_err(|reason| {
                ConfigError::new(
                    field,
                    format!("the environment variable {variable}: {reason}"),
                )
            });
        }
        if let Some(path) = &self.control_token_file {
            let field = "listener.control_token_file";
            let text = std::fs::read_to_string(path).map_err(|error| {
                ConfigError::new(field, format!("cannot read {}: {error}", path.display()))
            })?;
            return ControlToken::new(&text).map(Some).map_err(|reason| {
                ConfigError::new(field, format!("{}: {reason}", path.display()))
            });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::file::FileConfig;

    #[test]
    fn the_listener_section_names_its_bad_field_and_reads_the_token() {
        let with = |table: &str| {
            format!(
                "{table}\n[[lanes]]\nlane = \"orders\"\ntarget = \"audit\"\nsink = {{ kind = \"log\" }}\n"
            )
        };
        for (table, field) in [
            (
                "[listener]\nmax_connections = 0",
                "listener.max_connections",
            ),
            (
                "[listener]\nheader_read_timeout = \"0s\"",
                "listener.header_read_timeout",
            ),
            ("[listener]\nidle_timeout = \"0s\"", "listener.idle_timeout"),
            (
                "[listener]\ncontrol_token_env = \"A\"\ncontrol_token_file = \"b\"",
                "listener.control_token_file",
            ),
            (
                "[listener]\ncontrol_token_env = \" \"",
                "listener.control_token_env",
            ),
            (
                "[listener]\nroutes = [\"metrics\", \"admin\"]",
                "listener.routes",
            ),
            (
                "[listener]\nui_hosts = [\"relay.internal:9464\"]",
                "listener.ui_hosts",
            ),
            ("[listener]\nui_hosts = [\"\"]", "listener.ui_hosts"),
        ] {
            let error = FileConfig::from_toml_str("test", &with(table)).expect_err(table);
            assert_eq!(error.field(), Some(field), "{table}: {error}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "file-control-token-0123456789\n").unwrap();
        let config = FileConfig::from_toml_str(
            "test",
            &with(&format!(
                "[listener]\nmax_connections = 8\ncontrol_token_file = {:?}",
                path.display().to_string()
            )),
        )
        .unwrap();
        assert_eq!(config.listener.to_config().max_connections, 8);
        let hosts = FileConfig::from_toml_str(
            "test",
            &with("[listener]\nroutes = [\"ui\"]\nui_hosts = [\"relay.internal\"]"),
        )
        .unwrap();
        assert_eq!(
            hosts.listener.ui_hosts.as_deref(),
            Some(&["relay.internal".to_owned()][..])
        );
        let token = config.listener.control_token().unwrap().expect("a token");
        assert_eq!(token.as_str(), "file-control-token-0123456789");
        std::fs::write(&path, "short").unwrap();
        let refused = config.listener.control_token().unwrap_err();
        assert_eq!(refused.field, "listener.control_token_file");
        assert!(!refused.reason.contains("short"), "{}", refused.reason);
        let unset = FileConfig::from_toml_str(
            "test",
            &with("[listener]\ncontrol_token_env = \"OUTBOX_TEST_SURELY_UNSET_CONTROL_TOKEN\""),
        )
        .unwrap();
        let refused = unset.listener.control_token().unwrap_err();
        assert_eq!(refused.field, "listener.control_token_env");
        assert!(
            refused
                .reason
                .contains("OUTBOX_TEST_SURELY_UNSET_CONTROL_TOKEN"),
            "{}",
            refused.reason
        );
    }
}
