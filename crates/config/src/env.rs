//! `MDPROXY_*` environment overrides: every scalar key of the file has a variable
//! `MDPROXY_<SECTION>_<KEY>`, named from the defaults so the list in docs/configuration.md and the
//! code cannot drift apart; all set variables are laid over the file's table in one
//! pass, and a variable that names no key is a problem rather than ignored.

use std::collections::{BTreeMap, HashMap};

use super::problem::{At, Problem, Seg, did_you_mean, dotted, suggest};
use super::secret::is_secret;

/// Prefix of every environment override.
pub const ENV_PREFIX: &str = "MDPROXY";

/// Keys whose values are tables of the operator's own naming or lists of tables:
/// set in the file only.
pub(super) const FILE_ONLY: &[&str] = &[
    "auth.clients",
    "scheduler.jobs",
    "freshness.endpoints",
    "upstream.endpoint_timeouts_ms",
    "upstream.fallback",
];

/// Where overrides come from: normally the process environment ([`ProcessEnv`]);
/// injected, so that tests never touch the real one.
pub trait Env {
    /// The value of variable `name`, if set.
    fn var(&self, name: &str) -> Option<String>;

    /// The names of the variables set, so that a misspelt `MDPROXY_*` one is refused
    /// rather than ignored. A bare lookup function lists none, and so checks none.
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}

impl<F: Fn(&str) -> Option<String>> Env for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// Variables given by name and value (tests, embedding).
impl Env for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }

    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// The process environment, less the `MDPROXY_*` variables the command line reads
/// itself (`MDPROXY_LOG`), which are not configuration keys but not mistakes either.
#[derive(Clone, Debug, Default)]
pub struct ProcessEnv {
    command_line: Vec<String>,
}

impl ProcessEnv {
    /// The environment; `command_line` names the variables read elsewhere.
    pub fn new(command_line: impl IntoIterator<Item = String>) -> ProcessEnv {
        ProcessEnv {
            command_line: command_line.into_iter().collect(),
        }
    }
}

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn names(&self) -> Vec<String> {
        std::env::vars_os()
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .filter(|name| !self.command_line.contains(name))
            .collect()
    }
}

/// One overridable key: its dotted path and its environment variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvKey {
    /// The key's path, `["upstream", "timeout_ms"]`.
    pub path: Vec<String>,
    /// Its variable, `MDPROXY_UPSTREAM_TIMEOUT_MS`.
    pub var: String,
    /// The default, as TOML.
    pub default: String,
}

/// Every overridable key with its `MDPROXY_...` name, derived from the defaults.
pub fn env_keys() -> Vec<EnvKey> {
    fn collect(table: &toml::Table, path: &mut Vec<String>, out: &mut Vec<EnvKey>) {
        for (key, value) in table {
            path.push(key.clone());
            if !FILE_ONLY.contains(&path.join(".").as_str()) {
                match value {
                    toml::Value::Table(inner) => collect(inner, path, out),
                    _ => out.push(EnvKey {
                        var: env_var(path),
                        path: path.clone(),
                        default: value.to_string(),
                    }),
                }
            }
            path.pop();
        }
    }
    let mut out = Vec::new();
    collect(&super::Config::defaults_table(), &mut Vec::new(), &mut out);
    out
}

/// `MDPROXY_` and the path, upper case, every other character an underscore.
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

/// What the environment set: which key came from which variable, and the
/// variables whose values could not be read.
#[derive(Debug, Default)]
pub(super) struct Overlay {
    /// Dotted key to variable name.
    pub from_env: HashMap<String, String>,
    pub problems: Vec<Problem>,
}

/// Lays every set override over `table` (the defaults with the file on them), each
/// value parsed as the type of its default; then the whole is deserialised once.
pub(super) fn overlay(table: &mut toml::Table, env: &dyn Env) -> Overlay {
    let defaults = super::Config::defaults_table();
    let mut overlay = Overlay::default();
    for key in env_keys() {
        let Some(raw) = env.var(&key.var) else {
            continue;
        };
        let dotted_key = key.path.join(".");
        let mut like = &defaults;
        for segment in &key.path[..key.path.len() - 1] {
            like = like[segment].as_table().expect("env_keys() walked tables");
        }
        let leaf = &like[key.path.last().expect("keys are non-empty")];
        match parse_like(leaf, &raw) {
            Ok(value) => {
                set(table, &key.path, value);
                overlay.from_env.insert(dotted_key, key.var);
            }
            Err(message) => {
                let path: Vec<Seg> = key.path.iter().cloned().map(Seg::Key).collect();
                let message = if is_secret(&path) {
                    "not a valid value".to_owned()
                } else {
                    message
                };
                overlay.problems.push(Problem {
                    at: At::Var(key.var),
                    ..Problem::new(dotted(&path), message)
                });
            }
        }
    }
    overlay
}

/// Sets `path` in `table` to `value`, making tables on the way.
fn set(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let (last, parents) = path.split_last().expect("a leaf has a key");
    let mut node = table;
    for key in parents {
        let entry = node
            .entry(key.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        node = entry.as_table_mut().expect("made a table");
    }
    node.insert(last.clone(), value);
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

/// Every `MDPROXY_*` variable in `names` that is not a configuration key.
pub(super) fn unknown_vars(names: &[String]) -> Vec<Problem> {
    let known: Vec<String> = env_keys().into_iter().map(|k| k.var).collect();
    let prefix = format!("{ENV_PREFIX}_");
    let mut problems = Vec::new();
    for name in names {
        if !name.starts_with(&prefix) || known.contains(name) || service_link(name) {
            continue;
        }
        let file_only = FILE_ONLY.iter().find(|key| {
            let path: Vec<String> = key.split('.').map(str::to_owned).collect();
            let var = env_var(&path);
            *name == var || name.starts_with(&format!("{var}_"))
        });
        let message = match file_only {
            Some(key) => format!("not a variable: {key} can be set in the file only"),
            None => {
                let near: Vec<String> = suggest(name, known.iter().map(String::as_str))
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
                if near.is_empty() {
                    "unknown variable: no configuration key has this name (docs/configuration.md lists them)".to_owned()
                } else {
                    format!("unknown variable{}", did_you_mean(&near))
                }
            }
        };
        problems.push(Problem::general(At::Var(name.clone()), message));
    }
    problems
}

/// Whether `name` is one of the variables Kubernetes puts into every pod for each
/// Service of the namespace (unless `enableServiceLinks: false`): a Service called
/// `mdproxy` gives `MDPROXY_SERVICE_HOST`, `MDPROXY_PORT_8080_TCP_ADDR` and so on.
/// They are not configuration keys, and a pod must not refuse to start over them.
fn service_link(name: &str) -> bool {
    let rest = |marker: &str| name.find(marker).map(|i| &name[i + marker.len()..]);
    if name.ends_with("_SERVICE_HOST") || name.ends_with("_PORT") {
        return true;
    }
    if let Some(port_name) = rest("_SERVICE_PORT") {
        return port_name.is_empty() || port_name.starts_with('_');
    }
    // `_PORT_<number>_<protocol>`, then nothing or `_PROTO`, `_PORT` or `_ADDR`.
    name.match_indices("_PORT_").any(|(i, marker)| {
        let mut parts = name[i + marker.len()..].split('_');
        let number = parts.next().unwrap_or_default();
        let protocol = parts.next().unwrap_or_default();
        let field: Vec<&str> = parts.collect();
        !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit())
            && matches!(protocol, "TCP" | "UDP" | "SCTP")
            && matches!(field.as_slice(), [] | ["PROTO" | "PORT" | "ADDR"])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_service_links_are_not_mistakes() {
        for name in [
            "MDPROXY_SERVICE_HOST",
            "MDPROXY_SERVICE_PORT",
            "MDPROXY_SERVICE_PORT_HTTP",
            "MDPROXY_PORT",
            "MDPROXY_PORT_8080_TCP",
            "MDPROXY_PORT_8080_TCP_ADDR",
            "MDPROXY_REDIS_PORT_6379_TCP_PROTO",
        ] {
            assert!(service_link(name), "{name}");
            assert!(unknown_vars(&[name.to_owned()]).is_empty(), "{name}");
        }
        for name in [
            "MDPROXY_SERVER_LISTN",
            "MDPROXY_PORT_X_TCP",
            "MDPROXY_PORTS",
        ] {
            assert!(!service_link(name), "{name}");
        }
    }

    /// Defect: every variable deserialised the whole configuration once more. The
    /// overlay only parses each value as its default's type and sets it; the one
    /// deserialisation comes after.
    #[test]
    fn every_variable_is_laid_over_the_table_in_one_pass() {
        let env = |k: &str| match k {
            "MDPROXY_UPSTREAM_TIMEOUT_MS" => Some("1500".to_owned()),
            "MDPROXY_AUTH_TOKENS" => Some("a, b,".to_owned()),
            "MDPROXY_SERVER_KEEP_ALIVE" => Some("maybe".to_owned()),
            "MDPROXY_UPSTREAM_TOKEN" => Some(String::new()),
            _ => None,
        };
        let mut table = super::super::Config::defaults_table();
        let overlay = overlay(&mut table, &env);
        assert_eq!(table["upstream"]["timeout_ms"].as_integer(), Some(1500));
        assert_eq!(
            table["auth"]["tokens"],
            toml::Value::Array(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            overlay.from_env["upstream.timeout_ms"],
            "MDPROXY_UPSTREAM_TIMEOUT_MS"
        );
        assert_eq!(
            overlay.problems,
            [Problem {
                at: At::Var("MDPROXY_SERVER_KEEP_ALIVE".into()),
                ..Problem::new("server.keep_alive", "\"maybe\" is not true or false")
            }]
        );
        assert!(overlay.from_env.contains_key("upstream.token"));
    }
}
