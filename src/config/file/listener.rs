//! `[listener]`: the HTTP listener's limits and where its control token comes from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::MetricsListen;
use crate::config::duration::HumanDuration;
use crate::config::{
    ConfigError, ControlToken, ListenerConfig, DEFAULT_API_STORE_CALLS, DEFAULT_API_STORE_TIMEOUT,
    MAX_API_STORE_CALLS,
};

/// `[listener]`: where the HTTP listener binds, its limits, its control token, its route
/// groups, the hosts its API and UI answer and the bound of their store calls; absent
/// fields keep their defaults. Without `token_env` or `token_file` the mutating routes
/// (`POST /api/v1/…`) and the reads of messages are off. Binding any address but loopback
/// is refused while `api`, `control` or `ui` is served without a token.
///
/// Older names, still read (the daemon warns when it meets them): the top-level
/// `metrics_listen` for `address`, `control_token_env` for `token_env` and
/// `control_token_file` for `token_file`. Setting a key and its older name together is an
/// error naming the key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerSection {
    /// Where the listener binds, e.g. `"127.0.0.1:9464"` (the default) or `"0.0.0.0:9464"`
    /// in a pod; `false` for no listener.
    pub address: Option<MetricsListen>,
    /// How long a client may take to send a request's headers. Default 5s.
    pub header_read_timeout: Option<HumanDuration>,
    /// How long a request may take once its headers are in (its body, its answer); past
    /// it, `408` and closed. Default 10s.
    pub request_timeout: Option<HumanDuration>,
    /// How long a connection may go without a byte read or written. Default 60s.
    pub idle_timeout: Option<HumanDuration>,
    /// How many connections are served at once; past it, `503` and closed. Default 64.
    pub max_connections: Option<usize>,
    /// The environment variable holding the control token.
    pub token_env: Option<String>,
    /// A file holding the control token (its surrounding whitespace dropped).
    pub token_file: Option<PathBuf>,
    /// The older name of `token_env`.
    pub control_token_env: Option<String>,
    /// The older name of `token_file`.
    pub control_token_file: Option<PathBuf>,
    /// The route groups served: any of `metrics`, `probes`, `api`, `control`, `ui`.
    /// Default: all.
    pub routes: Option<Vec<String>>,
    /// Host names the API (`/api/v1/…`) and the web UI (`/ui`) answer to besides IP
    /// addresses and `localhost`: the name operators reach the listener by (behind a proxy,
    /// a cluster DNS name). A request to either with any other `Host` gets 403 (DNS
    /// rebinding); `/metrics` and the probes answer any. Default: none.
    pub allowed_hosts: Option<Vec<String>>,
    /// Whether `GET /api/v1/lanes` (the lanes' status, no message) answers without the
    /// token. Reads of messages and every mutation still need it. Default false.
    pub open_lane_reads: Option<bool>,
    /// Whether the UI's cookies are always marked `Secure` (a UI behind a proxy that
    /// terminates TLS); without it, only when the request says `X-Forwarded-Proto: https`.
    /// Default false.
    pub secure_cookies: Option<bool>,
    /// How many store calls the API and the UI run at once; past it, `503` at once.
    /// Default 2.
    pub api_store_calls: Option<usize>,
    /// How long one API or UI request's store work may take; past it, `503`. Default 10s.
    pub api_store_timeout: Option<HumanDuration>,
}

/// The route groups `routes` may name (`http::RouteGroup`'s names; the config parses
/// without the `http` feature).
const ROUTE_GROUPS: [&str; 5] = ["metrics", "probes", "api", "control", "ui"];

/// The settings of `[listener]` that the router takes (who may read, the hosts, the
/// bound of the API's store calls), defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiSettings {
    /// Host names the API and the UI answer besides IP addresses and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// Whether `GET /api/v1/lanes` answers without the token.
    pub open_lane_reads: bool,
    /// Whether the UI's cookies are always `Secure`.
    pub secure_cookies: bool,
    /// Store calls the API and the UI run at once.
    pub api_store_calls: usize,
    /// How long one request's store work may take.
    pub api_store_timeout: std::time::Duration,
}

impl ListenerSection {
    /// The router's settings, defaults filled in (not validated: see [`Self::validate`]).
    pub fn api_settings(&self) -> ApiSettings {
        ApiSettings {
            allowed_hosts: self.allowed_hosts.clone().unwrap_or_default(),
            open_lane_reads: self.open_lane_reads.unwrap_or(false),
            secure_cookies: self.secure_cookies.unwrap_or(false),
            api_store_calls: self.api_store_calls.unwrap_or(DEFAULT_API_STORE_CALLS),
            api_store_timeout: self
                .api_store_timeout
                .map_or(DEFAULT_API_STORE_TIMEOUT, |timeout| timeout.0),
        }
    }

    /// The limits, defaults filled in (not validated: see [`Self::validate`]).
    pub fn to_config(&self) -> ListenerConfig {
        let defaults = ListenerConfig::default();
        ListenerConfig {
            header_read_timeout: self
                .header_read_timeout
                .map_or(defaults.header_read_timeout, |d| d.0),
            request_timeout: self
                .request_timeout
                .map_or(defaults.request_timeout, |d| d.0),
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
        let (env, file) = self.token_source()?;
        match (env, file) {
            (Some(_), Some((field, _))) => Err(ConfigError::new(
                format!("listener.{field}"),
                "set token_env or token_file, not both",
            )),
            (Some((field, variable)), None) if variable.trim().is_empty() => Err(ConfigError::new(
                format!("listener.{field}"),
                "must name an environment variable",
            )),
            (None, Some((field, path))) if path.as_os_str().is_empty() => Err(ConfigError::new(
                format!("listener.{field}"),
                "must name a file",
            )),
            _ => Ok(()),
        }?;
        for host in self.allowed_hosts.iter().flatten() {
            let name_like = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            if !name_like {
                return Err(ConfigError::new(
                    "listener.allowed_hosts",
                    format!("{host:?} is not a host name (letters, digits, '-' and '.'; no port)"),
                ));
            }
        }
        if let Some(calls) = self.api_store_calls {
            if calls == 0 || calls > MAX_API_STORE_CALLS {
                return Err(ConfigError::new(
                    "listener.api_store_calls",
                    format!("must be between 1 and {MAX_API_STORE_CALLS}"),
                ));
            }
        }
        if self.api_store_timeout.is_some_and(|d| d.0.is_zero()) {
            return Err(ConfigError::new(
                "listener.api_store_timeout",
                "must be greater than zero",
            ));
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

    /// Where the token comes from: the environment variable and the file, each with the
    /// name of the key that set it. A key set together with its older name is an error.
    #[allow(clippy::type_complexity)]
    fn token_source(
        &self,
    ) -> Result<
        (
            Option<(&'static str, &String)>,
            Option<(&'static str, &PathBuf)>,
        ),
        ConfigError,
    > {
        let env = match (&self.token_env, &self.control_token_env) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "listener.token_env",
                    "set token_env or its older name control_token_env, not both",
                ))
            }
            (Some(variable), None) => Some(("token_env", variable)),
            (None, Some(variable)) => Some(("control_token_env", variable)),
            (None, None) => None,
        };
        let file = match (&self.token_file, &self.control_token_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "listener.token_file",
                    "set token_file or its older name control_token_file, not both",
                ))
            }
            (Some(path), None) => Some(("token_file", path)),
            (None, Some(path)) => Some(("control_token_file", path)),
            (None, None) => None,
        };
        Ok((env, file))
    }

    /// The older keys this section sets, with the keys that replace them.
    pub fn deprecated_keys(&self) -> Vec<(&'static str, &'static str)> {
        let mut keys = Vec::new();
        if self.control_token_env.is_some() {
            keys.push(("listener.control_token_env", "listener.token_env"));
        }
        if self.control_token_file.is_some() {
            keys.push(("listener.control_token_file", "listener.token_file"));
        }
        keys
    }

    /// Whether a control token is configured (by any of its keys).
    pub fn has_token(&self) -> bool {
        self.token_env.is_some()
            || self.token_file.is_some()
            || self.control_token_env.is_some()
            || self.control_token_file.is_some()
    }

    /// Whether the route group `group` is served (`routes` absent: all are).
    pub fn serves(&self, group: &str) -> bool {
        self.routes
            .as_ref()
            .is_none_or(|groups| groups.iter().any(|served| served == group))
    }

    /// The groups served that read or change the store: `api`, `control`, `ui`.
    fn store_groups(&self) -> Vec<&'static str> {
        ["api", "control", "ui"]
            .into_iter()
            .filter(|group| self.serves(group))
            .collect()
    }

    /// Refuses to bind `address` to anything but loopback while the API, the lane control
    /// routes or the UI are on and no token is set: every other address (every interface,
    /// a pod's, a host's) is reachable by others, and without a token the lane reads are
    /// open to them (the messages and mutations are off, but an unguarded group on a
    /// shared network is a mistake waiting to be made worse). `field` names the setting
    /// that chose the address (`listener.address`, `metrics_listen`, `--metrics-listen`,
    /// or its environment variable).
    pub fn check_exposure(&self, address: &MetricsListen, field: &str) -> Result<(), ConfigError> {
        let MetricsListen::Listen(addr) = address else {
            return Ok(());
        };
        let exposed = !addr.ip().is_loopback();
        let groups = self.store_groups();
        if exposed && !groups.is_empty() && !self.has_token() {
            return Err(ConfigError::new(
                field,
                format!(
                    "{addr} is not a loopback address, and the listener serves {} without a \
                     token: set listener.token_env or listener.token_file, or serve only \
                     metrics and probes there (listener.routes = [\"metrics\", \"probes\"])",
                    groups.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The control token, read from the environment variable or the file the section
    /// names; `None` when it names neither. The error names the field and the variable or
    /// file, never the token.
    pub fn control_token(&self) -> Result<Option<ControlToken>, ConfigError> {
        let (env, file) = self.token_source()?;
        if let Some((key, variable)) = env {
            let field = format!("listener.{key}");
            let text = std::env::var(variable).map_err(|error| {
                let why = match error {
                    std::env::VarError::NotPresent => "is not set",
                    std::env::VarError::NotUnicode(_) => "is not valid UTF-8",
                };
                ConfigError::new(
                    field.clone(),
                    format!("the environment variable {variable} {why}"),
                )
            })?;
            return ControlToken::new(&text).map(Some).map_err(|reason| {
                ConfigError::new(
                    field,
                    format!("the environment variable {variable}: {reason}"),
                )
            });
        }
        if let Some((key, path)) = file {
            let field = format!("listener.{key}");
            let text = std::fs::read_to_string(path).map_err(|error| {
                ConfigError::new(
                    field.clone(),
                    format!("cannot read {}: {error}", path.display()),
                )
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
                "[listener]\nallowed_hosts = [\"relay.internal:9464\"]",
                "listener.allowed_hosts",
            ),
            (
                "[listener]\nallowed_hosts = [\"\"]",
                "listener.allowed_hosts",
            ),
            (
                "[listener]\napi_store_calls = 0",
                "listener.api_store_calls",
            ),
            (
                "[listener]\napi_store_timeout = \"0s\"",
                "listener.api_store_timeout",
            ),
            (
                "[listener]\nrequest_timeout = \"0s\"",
                "listener.request_timeout",
            ),
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
            &with("[listener]\nroutes = [\"ui\"]\nallowed_hosts = [\"relay.internal\"]"),
        )
        .unwrap();
        assert_eq!(
            hosts.listener.allowed_hosts.as_deref(),
            Some(&["relay.internal".to_owned()][..])
        );
        // Never shipped under its older name: refused as any unknown key is, naming it.
        let old =
            FileConfig::from_toml_str("test", &with("[listener]\nui_hosts = [\"relay.internal\"]"))
                .expect_err("ui_hosts is not a key");
        assert!(old.to_string().contains("ui_hosts"), "{old}");
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

    #[test]
    fn every_address_but_loopback_needs_a_token_or_only_metrics_and_probes() {
        let with = |table: &str| {
            format!(
                "{table}\n[[lanes]]\nlane = \"orders\"\ntarget = \"audit\"\nsink = {{ kind = \"log\" }}\n"
            )
        };
        for (table, field) in [
            ("[listener]\naddress = \"0.0.0.0:9464\"", "listener.address"),
            ("[listener]\naddress = \"[::]:9464\"", "listener.address"),
            ("metrics_listen = \"0.0.0.0:9464\"", "metrics_listen"),
            // A pod's or a host's address is as reachable as every interface.
            ("[listener]\naddress = \"10.0.0.7:9464\"", "listener.address"),
            // Each group that reads or changes the store counts.
            (
                "[listener]\naddress = \"0.0.0.0:9464\"\nroutes = [\"metrics\", \"probes\", \"api\"]",
                "listener.address",
            ),
            (
                "[listener]\naddress = \"0.0.0.0:9464\"\nroutes = [\"metrics\", \"ui\"]",
                "listener.address",
            ),
            (
                "[listener]\naddress = \"0.0.0.0:9464\"\nroutes = [\"metrics\", \"control\"]",
                "listener.address",
            ),
            (
                "metrics_listen = \"127.0.0.1:9464\"\n[listener]\naddress = \"127.0.0.1:9465\"",
                "listener.address",
            ),
            (
                "[listener]\ntoken_env = \"A\"\ncontrol_token_env = \"B\"",
                "listener.token_env",
            ),
            (
                "[listener]\ntoken_file = \"a\"\ncontrol_token_file = \"b\"",
                "listener.token_file",
            ),
            (
                "[listener]\ntoken_env = \"A\"\ntoken_file = \"b\"",
                "listener.token_file",
            ),
        ] {
            let error = FileConfig::from_toml_str("test", &with(table)).expect_err(table);
            assert_eq!(error.field(), Some(field), "{table}: {error}");
        }
        let refused =
            FileConfig::from_toml_str("test", &with("[listener]\naddress = \"0.0.0.0:9464\""))
                .expect_err("every interface without a token");
        let text = refused.to_string();
        assert!(
            text.contains("token_env")
                && text.contains("api, control, ui")
                && text.contains("routes"),
            "{refused}"
        );
        for table in [
            "[listener]\naddress = \"0.0.0.0:9464\"\ntoken_env = \"OUTBOX_CONTROL_TOKEN\"",
            "[listener]\naddress = \"0.0.0.0:9464\"\ntoken_file = \"/run/secrets/token\"",
            "[listener]\naddress = \"0.0.0.0:9464\"\ncontrol_token_env = \"OUTBOX_CONTROL_TOKEN\"",
            "[listener]\naddress = \"0.0.0.0:9464\"\nroutes = [\"metrics\", \"probes\"]",
            "[listener]\naddress = \"10.0.0.7:9464\"\nroutes = [\"metrics\", \"probes\"]",
            "[listener]\naddress = \"127.0.0.1:9464\"",
            "[listener]\naddress = \"[::1]:9464\"",
            "[listener]\naddress = false",
        ] {
            FileConfig::from_toml_str("test", &with(table)).expect(table);
        }
    }

    #[test]
    fn the_older_keys_are_read_and_named_for_a_warning() {
        use crate::config::file::MetricsListen;
        let config = FileConfig::from_toml_str(
            "test",
            "metrics_listen = \"127.0.0.1:9470\"\n[listener]\ncontrol_token_env = \"X\"\n\
             [[lanes]]\nlane = \"orders\"\ntarget = \"audit\"\nsink = { kind = \"log\" }\n",
        )
        .unwrap();
        assert_eq!(
            config.listen_address(),
            MetricsListen::Listen("127.0.0.1:9470".parse().unwrap())
        );
        assert_eq!(
            config.deprecated_keys(),
            [
                ("metrics_listen", "listener.address"),
                ("listener.control_token_env", "listener.token_env"),
            ]
        );
        let current = FileConfig::from_toml_str(
            "test",
            "[listener]\naddress = \"127.0.0.1:9471\"\ntoken_env = \"X\"\n\
             [[lanes]]\nlane = \"orders\"\ntarget = \"audit\"\nsink = { kind = \"log\" }\n",
        )
        .unwrap();
        assert_eq!(
            current.listen_address(),
            MetricsListen::Listen("127.0.0.1:9471".parse().unwrap())
        );
        assert!(current.deprecated_keys().is_empty());
        let default = FileConfig::from_toml_str(
            "test",
            "[[lanes]]\nlane = \"orders\"\ntarget = \"audit\"\nsink = { kind = \"log\" }\n",
        )
        .unwrap();
        assert_eq!(default.listen_address(), MetricsListen::default());
    }
}
