//! Configuration: the TOML file, `MDPROXY_*` environment overrides and validation.
//! `Config::default()` is the demo set-up. Every scalar key of the file can be
//! overridden by `MDPROXY_<SECTION>_<KEY>`; the names are derived from the defaults, so
//! the list in README and the code cannot drift apart (see [`env_keys`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::catalog::{FreshnessClass, catalog};

/// Prefix of every environment override.
pub const ENV_PREFIX: &str = "MDPROXY";

/// A secret string (a token). Its `Debug` and `Display` never show the value.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }
    /// The secret itself; call only where it is used (a header, a comparison).
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// True when no secret is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub auth: AuthConfig,
    pub upstream: UpstreamConfig,
    pub cache: CacheConfig,
    pub freshness: FreshnessConfig,
}

/// `[server]`: the client listener.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the client listener.
    pub listen: String,
    /// Most client connections open at once; further ones wait in the kernel backlog.
    pub max_connections: usize,
    /// How long shutdown waits for open connections before closing them.
    pub shutdown_grace_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            max_connections: 10_000,
            shutdown_grace_ms: 5_000,
        }
    }
}

/// `[auth]`: who may call the proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Client bearer tokens accepted by the proxy. Secrets: never logged.
    pub tokens: Vec<Secret>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens: vec![Secret::new("demo-token")],
        }
    }
}

/// `[upstream]`: the real API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The upstream's base URL, ending with `/api/v1`.
    pub base_url: String,
    /// The upstream's bearer token; a different secret from client tokens, never sent
    /// to clients nor logged.
    pub token: Secret,
    /// TCP (and TLS) connect timeout.
    pub connect_timeout_ms: u64,
    /// Whole-request timeout; past it the client gets 504 (or a stale answer).
    pub timeout_ms: u64,
    /// Idle keep-alive connections kept per upstream host.
    pub pool_max_idle_per_host: usize,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            base_url: "http://127.0.0.1:9090/api/v1".into(),
            token: Secret::new(""),
            // DOMAIN.md §6.2/§6.4: connect ~3 s, total ~10–15 s.
            connect_timeout_ms: 3_000,
            timeout_ms: 10_000,
            pool_max_idle_per_host: 64,
        }
    }
}

/// `[cache]`: memory bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Upper bound of cached bytes (bodies plus keys and bookkeeping).
    pub max_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_bytes: 256 * 1024 * 1024,
        }
    }
}

/// Fresh and stale lifetimes of one class or endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ttl {
    /// Seconds an answer is served as fresh (`X-Cache: HIT`).
    pub fresh_secs: u64,
    /// Seconds after that during which it may still be served when the upstream fails.
    pub stale_secs: u64,
}

/// `[freshness]`: TTLs per class, and overrides per endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FreshnessConfig {
    /// One table per class, e.g. `[freshness.classes.live]`.
    pub classes: BTreeMap<FreshnessClass, Ttl>,
    /// Overrides by endpoint path template, e.g. `[freshness.endpoints."/market/indices"]`.
    pub endpoints: BTreeMap<String, Ttl>,
}

impl Default for FreshnessConfig {
    fn default() -> Self {
        // Values follow DOMAIN.md §8.1 (in-session figures).
        let ttl = |fresh_secs, stale_secs| Ttl {
            fresh_secs,
            stale_secs,
        };
        let classes = FreshnessClass::ALL
            .into_iter()
            .map(|class| {
                let t = match class {
                    FreshnessClass::Live => ttl(3, 60),
                    FreshnessClass::Intraday => ttl(15, 300),
                    FreshnessClass::Daily => ttl(3_600, 86_400),
                    FreshnessClass::Reference => ttl(600, 86_400),
                    FreshnessClass::Periodic => ttl(43_200, 7 * 86_400),
                    FreshnessClass::Macro => ttl(21_600, 7 * 86_400),
                    FreshnessClass::Immutable => ttl(21_600, 7 * 86_400),
                };
                (class, t)
            })
            .collect();
        FreshnessConfig {
            classes,
            endpoints: BTreeMap::new(),
        }
    }
}

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("invalid configuration:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

impl Config {
    /// Reads `path`, applies overrides from `lookup` (normally the environment) and
    /// validates the result.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, the key or the variable.
    pub fn load(
        path: &Path,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_toml(&text, &path.display().to_string(), lookup)
    }

    /// Parses TOML text (named `origin` in errors), applies overrides and validates.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key or the variable.
    pub fn from_toml(
        text: &str,
        origin: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let file: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        // The file is laid over the defaults table by table, so a file that sets
        // one class's `fresh_secs` keeps every other default.
        let mut value = toml::Table::try_from(Config::default()).expect("defaults serialise");
        merge(&mut value, file);
        apply_env(&mut value, lookup)?;
        let config: Config =
            Config::deserialize(toml::Value::Table(value)).map_err(|e| ConfigError::Parse {
                path: origin.to_owned(),
                message: e.to_string(),
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every value; reports all problems at once.
    ///
    /// # Errors
    /// `ConfigError::Invalid` listing each bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        if self.server.listen.parse::<SocketAddr>().is_err() {
            problems.push(format!(
                "server.listen: {:?} is not an address such as 127.0.0.1:8080",
                self.server.listen
            ));
        }
        if self.server.max_connections == 0 {
            problems.push("server.max_connections must be at least 1".into());
        }
        if self.auth.tokens.is_empty() {
            problems.push("auth.tokens: at least one client token is required".into());
        }
        if self.auth.tokens.iter().any(Secret::is_empty) {
            problems.push("auth.tokens: a token must not be empty".into());
        }
        match reqwest::Url::parse(&self.upstream.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => problems.push(format!(
                "upstream.base_url: {:?} is not an http(s) URL",
                self.upstream.base_url
            )),
        }
        if self.upstream.connect_timeout_ms == 0 {
            problems.push("upstream.connect_timeout_ms must be at least 1".into());
        }
        if self.upstream.timeout_ms == 0 {
            problems.push("upstream.timeout_ms must be at least 1".into());
        }
        if self.cache.max_bytes < 1024 * 1024 {
            problems.push("cache.max_bytes must be at least 1048576 (1 MiB)".into());
        }
        for class in FreshnessClass::ALL {
            if !self.freshness.classes.contains_key(&class) {
                problems.push(format!(
                    "freshness.classes.{}: missing (every class needs fresh_secs and stale_secs)",
                    class.as_str()
                ));
            }
        }
        for path in self.freshness.endpoints.keys() {
            if catalog().by_path(path).is_none() {
                problems.push(format!(
                    "freshness.endpoints.\"{path}\": no such endpoint (use a path template such as /stock/detail/{{code}})"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// The TTL of an endpoint for a request of `class`: the endpoint's override, else
    /// the class's.
    pub fn ttl(&self, endpoint_path: &str, class: FreshnessClass) -> Ttl {
        self.freshness
            .endpoints
            .get(endpoint_path)
            .copied()
            .or_else(|| self.freshness.classes.get(&class).copied())
            .expect("validate() requires every class")
    }
}

/// One overridable key: its dotted path and its environment variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvKey {
    pub path: Vec<String>,
    pub var: String,
    /// The default, as TOML.
    pub default: String,
}

/// Every overridable key with its `MDPROXY_...` name, derived from the defaults.
pub fn env_keys() -> Vec<EnvKey> {
    let defaults = toml::Table::try_from(Config::default()).expect("defaults serialise");
    let mut out = Vec::new();
    collect(&defaults, &mut Vec::new(), &mut out);
    out
}

fn collect(table: &toml::Table, path: &mut Vec<String>, out: &mut Vec<EnvKey>) {
    for (key, value) in table {
        path.push(key.clone());
        match value {
            toml::Value::Table(inner) => collect(inner, path, out),
            _ => out.push(EnvKey {
                var: env_var(path),
                path: path.clone(),
                default: value.to_string(),
            }),
        }
        path.pop();
    }
}

/// Lays `over` onto `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

fn env_var(path: &[String]) -> String {
    let mut var = String::from(ENV_PREFIX);
    for segment in path {
        var.push('_');
        var.extend(segment.chars().map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        }));
    }
    var
}

fn apply_env(
    table: &mut toml::Table,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let defaults = toml::Table::try_from(Config::default()).expect("defaults serialise");
    for key in env_keys() {
        let Some(raw) = lookup(&key.var) else {
            continue;
        };
        let mut default = &defaults;
        for segment in &key.path[..key.path.len() - 1] {
            default = default[segment]
                .as_table()
                .expect("collect() walked tables");
        }
        let leaf = &default[key.path.last().expect("keys are non-empty")];
        let value = parse_like(leaf, &raw).map_err(|message| ConfigError::Env {
            var: key.var.clone(),
            message,
        })?;
        let mut node = &mut *table;
        for segment in &key.path[..key.path.len() - 1] {
            node = node
                .entry(segment.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .ok_or_else(|| ConfigError::Env {
                    var: key.var.clone(),
                    message: format!("{segment} in the file is not a table"),
                })?;
        }
        node.insert(key.path.last().expect("keys are non-empty").clone(), value);
    }
    Ok(())
}

/// Parses an environment string as a value of the same type as `like`.
fn parse_like(like: &toml::Value, raw: &str) -> Result<toml::Value, String> {
    Ok(match like {
        toml::Value::String(_) => toml::Value::String(raw.to_owned()),
        toml::Value::Integer(_) => toml::Value::Integer(
            raw.trim()
                .parse()
                .map_err(|_| format!("{raw:?} is not an integer"))?,
        ),
        toml::Value::Float(_) => toml::Value::Float(
            raw.trim()
                .parse()
                .map_err(|_| format!("{raw:?} is not a number"))?,
        ),
        toml::Value::Boolean(_) => toml::Value::Boolean(
            raw.trim()
                .parse()
                .map_err(|_| format!("{raw:?} is not true or false"))?,
        ),
        toml::Value::Array(_) => toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_owned()))
                .collect(),
        ),
        other => {
            return Err(format!(
                "cannot override a {} from the environment",
                other.type_str()
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_validate() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn env_overrides_apply_by_type() {
        let env = |k: &str| match k {
            "MDPROXY_UPSTREAM_BASE_URL" => Some("https://api.example.com/api/v1".to_owned()),
            "MDPROXY_UPSTREAM_TIMEOUT_MS" => Some("1500".to_owned()),
            "MDPROXY_AUTH_TOKENS" => Some("a, b".to_owned()),
            "MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS" => Some("7".to_owned()),
            _ => None,
        };
        let c = Config::from_toml("[upstream]\ntimeout_ms = 99\n", "test", env).unwrap();
        assert_eq!(c.upstream.base_url, "https://api.example.com/api/v1");
        assert_eq!(c.upstream.timeout_ms, 1500);
        assert_eq!(c.auth.tokens, vec![Secret::new("a"), Secret::new("b")]);
        assert_eq!(c.freshness.classes[&FreshnessClass::Live].fresh_secs, 7);
    }

    #[test]
    fn bad_env_names_the_variable() {
        let env = |k: &str| (k == "MDPROXY_UPSTREAM_TIMEOUT_MS").then(|| "soon".to_owned());
        let err = Config::from_toml("", "test", env).unwrap_err().to_string();
        assert!(err.contains("MDPROXY_UPSTREAM_TIMEOUT_MS"), "{err}");
    }

    #[test]
    fn errors_name_the_key() {
        let err = Config::from_toml("[server]\nlisten = \"nowhere\"\n", "f.toml", no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.listen"), "{err}");
        let err = Config::from_toml("[upstream]\nbogus = 1\n", "f.toml", no_env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
        let err = Config::from_toml(
            "[freshness.endpoints.\"/nope\"]\nfresh_secs = 1\nstale_secs = 1\n",
            "f.toml",
            no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/nope"), "{err}");
    }

    #[test]
    fn secrets_do_not_debug_print() {
        let mut c = Config::default();
        c.upstream.token = Secret::new("upstream-secret-123");
        let shown = format!("{c:?}");
        assert!(!shown.contains("upstream-secret-123"));
        assert!(!shown.contains("demo-token"));
    }

    #[test]
    fn partial_tables_keep_other_defaults() {
        let c = Config::from_toml(
            "[freshness.classes.live]\nfresh_secs = 9\n",
            "f.toml",
            no_env,
        )
        .unwrap();
        assert_eq!(c.freshness.classes[&FreshnessClass::Live].fresh_secs, 9);
        assert_eq!(c.freshness.classes[&FreshnessClass::Live].stale_secs, 60);
        assert_eq!(c.freshness.classes.len(), FreshnessClass::ALL.len());
    }

    #[test]
    fn endpoint_override_wins_over_class() {
        let c = Config::from_toml(
            "[freshness.endpoints.\"/market/indices\"]\nfresh_secs = 1\nstale_secs = 2\n",
            "f.toml",
            no_env,
        )
        .unwrap();
        assert_eq!(c.ttl("/market/indices", FreshnessClass::Live).fresh_secs, 1);
        assert_eq!(c.ttl("/stock/list", FreshnessClass::Live).fresh_secs, 3);
    }
}
