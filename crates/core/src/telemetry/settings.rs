//! What the trace exporter is set to: `[telemetry]` with the standard `OTEL_*`
//! variables laid over it (as `MDPROXY_*` ones are laid over the file), resolved
//! once at start and checked; a bad value stops the start naming its key or
//! variable, never a header's value.

use std::fmt;
use std::time::Duration;

use http::{HeaderName, HeaderValue};

use mdproxy_config::{At, Config, Env, Problem, TelemetryConfig};

/// The standard variables read, most specific first where two name one setting.
const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
const SAMPLER: &str = "OTEL_TRACES_SAMPLER";
const SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
const TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";

/// Where OTLP/HTTP takes spans under a base URL.
const TRACES_PATH: &str = "/v1/traces";

/// The one protocol this build exports with.
pub const HTTP_PROTOBUF: &str = "http/protobuf";

/// Which spans are kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    AlwaysOn,
    AlwaysOff,
    /// This fraction of traces, by trace ID.
    Ratio(f64),
}

/// The exporter's settings, resolved.
#[derive(Clone, PartialEq)]
pub struct Settings {
    /// Where spans are posted: the whole `…/v1/traces` URL.
    pub endpoint: String,
    /// Headers sent with every export; their values are secrets (marked sensitive).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `service.name`.
    pub service_name: String,
    /// The sampler of root spans.
    pub root: Sampling,
    /// Whether a parent's decision (an incoming `traceparent`'s sampled flag, or the
    /// request span's for its children) is followed.
    pub parent_based: bool,
    /// How long one export may take.
    pub timeout: Duration,
}

impl fmt::Debug for Settings {
    /// Header names only: their values carry the backend's key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("endpoint", &mdproxy_config::redacted_url(&self.endpoint))
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("service_name", &self.service_name)
            .field("root", &self.root)
            .field("parent_based", &self.parent_based)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What is wrong with `[telemetry]` and the `OTEL_*` variables, each placed at its
/// key or its variable (a configuration check: `check-config`, start and reload).
pub fn check(config: &Config, env: &dyn Env) -> Vec<Problem> {
    let messages = Settings::resolve(&config.telemetry, env)
        .err()
        .unwrap_or_default();
    messages.into_iter().map(|m| placed(&m)).collect()
}

/// A message that starts with its key (`telemetry.timeout_ms must ...`) or its
/// variable (`OTEL_EXPORTER_OTLP_TIMEOUT: not a number`) as a [`Problem`].
fn placed(message: &str) -> Problem {
    let end = message.find([' ', ':']).unwrap_or(message.len());
    let (name, rest) = message.split_at(end);
    let rest = rest.trim_start_matches(':').trim_start();
    if name.starts_with("OTEL_") {
        Problem::general(At::Var(name.to_owned()), rest)
    } else if name.starts_with("telemetry.") {
        Problem::new(name, rest)
    } else {
        Problem::new("telemetry", message)
    }
}

impl Settings {
    /// The settings `config` and the `OTEL_*` variables of `env` make; `None` when
    /// traces are off (no endpoint, `OTEL_SDK_DISABLED=true` or
    /// `OTEL_TRACES_EXPORTER=none`).
    ///
    /// # Errors
    /// Every problem found, each naming its key or variable.
    pub fn resolve(
        config: &TelemetryConfig,
        env: &dyn Env,
    ) -> Result<Option<Settings>, Vec<String>> {
        let mut r = Resolver {
            config,
            env,
            problems: Vec::new(),
        };
        if r.var(SDK_DISABLED)
            .is_some_and(|(_, v)| v.eq_ignore_ascii_case("true"))
        {
            return Ok(None);
        }
        match r.var(TRACES_EXPORTER) {
            None => {}
            Some((_, v)) if v == "otlp" => {}
            Some((_, v)) if v == "none" => return Ok(None),
            Some((name, v)) => r.problems.push(format!(
                "{name}: {v:?} is not an exporter this build has (otlp, or none)"
            )),
        }
        let Some(endpoint) = r.endpoint() else {
            return if r.problems.is_empty() {
                Ok(None)
            } else {
                Err(r.problems)
            };
        };
        r.check_protocol();
        let headers = r.headers();
        let service_name = r.service_name();
        let (parent_based, root) = r.sampling();
        let timeout = r.timeout();
        if !r.problems.is_empty() {
            return Err(r.problems);
        }
        Ok(Some(Settings {
            endpoint,
            headers,
            service_name,
            root,
            parent_based,
            timeout,
        }))
    }
}

/// Reads `[telemetry]` with the `OTEL_*` variables laid over it, collecting every
/// problem.
struct Resolver<'a> {
    config: &'a TelemetryConfig,
    env: &'a dyn Env,
    problems: Vec<String>,
}

impl Resolver<'_> {
    /// The variable `name`, trimmed, when set and not empty.
    fn var(&self, name: &'static str) -> Option<(&'static str, String)> {
        self.env
            .var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .map(|v| (name, v))
    }

    /// The traces URL (the traces variable as it is; a base with the path added),
    /// checked to be http(s); `None` when none is set.
    fn endpoint(&mut self) -> Option<String> {
        let config = self.config;
        let (from, endpoint) = match (self.var(TRACES_ENDPOINT), self.var(ENDPOINT)) {
            (Some((name, url)), _) => (name, url),
            (None, Some((name, base))) => (name, join(&base)),
            (None, None) if !config.endpoint.trim().is_empty() => {
                ("telemetry.endpoint", join(config.endpoint.trim()))
            }
            (None, None) => return None,
        };
        match reqwest::Url::parse(&endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
            _ => self.problems.push(format!(
                "{from}: {:?} is not an http:// or https:// URL",
                mdproxy_config::redacted_url(&endpoint)
            )),
        }
        Some(endpoint)
    }

    /// The protocol must be the one this build exports.
    fn check_protocol(&mut self) {
        let (from, protocol) = self
            .var(TRACES_PROTOCOL)
            .or(self.var(PROTOCOL))
            .unwrap_or(("telemetry.protocol", self.config.protocol.trim().to_owned()));
        if protocol != HTTP_PROTOBUF {
            self.problems.push(format!(
                "{from}: {protocol:?} is not supported: this build exports {HTTP_PROTOBUF} (the collector's port 4318)"
            ));
        }
    }

    /// The headers of every export: the key's, then the variables' over them.
    fn headers(&mut self) -> Vec<(HeaderName, HeaderValue)> {
        let mut headers = Vec::new();
        let sources = [
            Some(("telemetry.headers", self.config.headers.expose().to_owned())),
            self.var(HEADERS),
            self.var(TRACES_HEADERS),
        ];
        for (from, text) in sources.into_iter().flatten() {
            if let Err(problem) = parse_headers(&text, &mut headers) {
                self.problems.push(format!("{from}: {problem}"));
            }
        }
        headers
    }

    /// `service.name`, which must not be empty.
    fn service_name(&mut self) -> String {
        let name = self
            .var(SERVICE_NAME)
            .map(|(_, v)| v)
            .unwrap_or_else(|| self.config.service_name.trim().to_owned());
        if name.is_empty() {
            self.problems
                .push("telemetry.service_name must not be empty".into());
        }
        name
    }

    /// The sampler: whether it follows a parent's flag, and its root decision.
    fn sampling(&mut self) -> (bool, Sampling) {
        let (sampler_from, sampler) = self
            .var(SAMPLER)
            .unwrap_or(("telemetry.sampler", self.config.sampler.trim().to_owned()));
        let ratio = match self.var(SAMPLER_ARG) {
            Some((name, v)) => v.parse::<f64>().map_err(|_| name),
            None => Ok(self.config.sampler_arg),
        }
        .and_then(|r| {
            (0.0..=1.0)
                .contains(&r)
                .then_some(r)
                .ok_or(if self.var(SAMPLER_ARG).is_some() {
                    SAMPLER_ARG
                } else {
                    "telemetry.sampler_arg"
                })
        });
        let (parent_based, root) = match sampler.as_str() {
            "always_on" => (false, Some(Sampling::AlwaysOn)),
            "always_off" => (false, Some(Sampling::AlwaysOff)),
            "traceidratio" => (false, None),
            "parentbased_always_on" => (true, Some(Sampling::AlwaysOn)),
            "parentbased_always_off" => (true, Some(Sampling::AlwaysOff)),
            "parentbased_traceidratio" => (true, None),
            other => {
                self.problems.push(format!(
                    "{sampler_from}: {other:?} is not one of parentbased_always_on, parentbased_always_off, parentbased_traceidratio, always_on, always_off, traceidratio"
                ));
                (true, Some(Sampling::AlwaysOn))
            }
        };
        let root = match (root, ratio) {
            (Some(root), _) => root,
            (None, Ok(ratio)) => Sampling::Ratio(ratio),
            (None, Err(from)) => {
                self.problems.push(format!(
                    "{from}: the sampler's ratio must be a number from 0.0 to 1.0"
                ));
                Sampling::AlwaysOn
            }
        };
        (parent_based, root)
    }

    /// How long one export may take.
    fn timeout(&mut self) -> Duration {
        let timeout_ms = match self.var(TRACES_TIMEOUT).or(self.var(TIMEOUT)) {
            Some((name, v)) => v.parse::<u64>().map_err(|_| name),
            None => Ok(self.config.timeout_ms),
        };
        match timeout_ms {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            Ok(_) => {
                self.problems
                    .push("telemetry.timeout_ms must be at least 1".into());
                Duration::ZERO
            }
            Err(name) => {
                self.problems
                    .push(format!("{name}: not a number of milliseconds"));
                Duration::ZERO
            }
        }
    }
}

/// `base` with OTLP/HTTP's traces path (the base variable's rule: always appended).
fn join(base: &str) -> String {
    format!("{}{TRACES_PATH}", base.trim_end_matches('/'))
}

/// Reads `name=value,name2=value2` (W3C baggage's form: values percent-encoded)
/// into `into`, a later name replacing an earlier one.
///
/// # Errors
/// What is wrong, naming the entry by position or the header by name, never a value.
fn parse_headers(text: &str, into: &mut Vec<(HeaderName, HeaderValue)>) -> Result<(), String> {
    for (i, entry) in text.split(',').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("entry {} is not name=value", i + 1));
        };
        let name = HeaderName::try_from(name.trim())
            .map_err(|_| format!("entry {} has no valid header name", i + 1))?;
        let decoded = percent_encoding::percent_decode_str(value.trim()).decode_utf8_lossy();
        let mut value = HeaderValue::try_from(decoded.as_ref())
            .map_err(|_| format!("the value of {name} is not a valid header value"))?;
        value.set_sensitive(true);
        into.retain(|(n, _)| *n != name);
        into.push((name, value));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        vars.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn resolve(
        config: &TelemetryConfig,
        vars: &[(&str, &str)],
    ) -> Result<Option<Settings>, Vec<String>> {
        Settings::resolve(config, &env(vars))
    }

    /// Off unless an endpoint is set, in the file or in either standard variable;
    /// the variables win over the file, the traces-only one over the general one.
    #[test]
    fn an_endpoint_turns_traces_on() {
        let none = TelemetryConfig::default();
        assert_eq!(resolve(&none, &[]), Ok(None));
        let on = resolve(&none, &[(ENDPOINT, "http://collector:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(on.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(on.service_name, "mdproxy");
        assert!(on.parent_based && on.root == Sampling::AlwaysOn);
        assert_eq!(on.timeout, Duration::from_secs(10));
        let file = TelemetryConfig {
            endpoint: "https://otel.example:4318".into(),
            ..TelemetryConfig::default()
        };
        let s = resolve(&file, &[]).unwrap().unwrap();
        assert_eq!(s.endpoint, "https://otel.example:4318/v1/traces");
        let s = resolve(&file, &[(ENDPOINT, "http://a:4318")])
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://a:4318/v1/traces");
        let s = resolve(
            &file,
            &[
                (ENDPOINT, "http://a:4318"),
                (TRACES_ENDPOINT, "http://b:9/spans"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            s.endpoint, "http://b:9/spans",
            "the traces URL is used as it is"
        );
        assert_eq!(resolve(&file, &[(SDK_DISABLED, "true")]), Ok(None));
        assert_eq!(resolve(&file, &[(TRACES_EXPORTER, "none")]), Ok(None));
    }

    #[test]
    fn the_standard_variables_set_the_rest() {
        let file = TelemetryConfig {
            endpoint: "http://c:4318".into(),
            headers: mdproxy_config::Secret::new("x-team=file, keep=1"),
            ..TelemetryConfig::default()
        };
        let s = resolve(
            &file,
            &[
                (HEADERS, "x-team=env%20key,other=2"),
                (TRACES_HEADERS, "other=3"),
                (SERVICE_NAME, "md-eu"),
                (SAMPLER, "parentbased_traceidratio"),
                (SAMPLER_ARG, "0.25"),
                (TIMEOUT, "2500"),
            ],
        )
        .unwrap()
        .unwrap();
        let headers: Vec<(String, String)> = s
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            headers,
            [
                ("keep".to_owned(), "1".to_owned()),
                ("x-team".to_owned(), "env key".to_owned()),
                ("other".to_owned(), "3".to_owned()),
            ]
        );
        assert!(s.headers.iter().all(|(_, v)| v.is_sensitive()));
        assert_eq!(s.service_name, "md-eu");
        assert!(s.parent_based);
        assert_eq!(s.root, Sampling::Ratio(0.25));
        assert_eq!(s.timeout, Duration::from_millis(2500));
        let s = resolve(&file, &[(SAMPLER, "always_off")]).unwrap().unwrap();
        assert!(!s.parent_based && s.root == Sampling::AlwaysOff);
    }

    /// Every problem at once, named by key or variable; a header's value never
    /// appears, in a problem or in `Debug`.
    #[test]
    fn bad_values_are_refused_by_name_and_secrets_stay_hidden() {
        let file = TelemetryConfig {
            endpoint: "collector:4318".into(),
            protocol: "grpc".into(),
            headers: mdproxy_config::Secret::new("authorization=Bearer s3cr3t,broken"),
            sampler: "sometimes".into(),
            sampler_arg: 3.0,
            timeout_ms: 0,
            ..TelemetryConfig::default()
        };
        let problems = resolve(&file, &[(TRACES_EXPORTER, "zipkin")]).unwrap_err();
        let text = problems.join("\n");
        for key in [
            "OTEL_TRACES_EXPORTER:",
            "telemetry.endpoint:",
            "telemetry.protocol:",
            "telemetry.headers: entry 2",
            "telemetry.sampler:",
            "telemetry.timeout_ms",
        ] {
            assert!(text.contains(key), "{key} in {text}");
        }
        assert!(!text.contains("s3cr3t"), "{text}");
        let problems = resolve(
            &TelemetryConfig::default(),
            &[
                (ENDPOINT, "http://c:4318"),
                (SAMPLER, "traceidratio"),
                (SAMPLER_ARG, "1.5"),
                (PROTOCOL, "http/json"),
                (HEADERS, "api-key=%ZZs3cr3t\u{1}"),
            ],
        )
        .unwrap_err();
        let text = problems.join("\n");
        assert!(text.contains("OTEL_TRACES_SAMPLER_ARG:"), "{text}");
        assert!(text.contains("OTEL_EXPORTER_OTLP_PROTOCOL:"), "{text}");
        assert!(
            text.contains("OTEL_EXPORTER_OTLP_HEADERS: the value of api-key"),
            "{text}"
        );
        assert!(!text.contains("s3cr3t"), "{text}");
        let s = resolve(
            &TelemetryConfig::default(),
            &[
                (ENDPOINT, "http://u:pw@c:4318"),
                (HEADERS, "api-key=s3cr3t"),
            ],
        )
        .unwrap()
        .unwrap();
        let shown = format!("{s:?}");
        assert!(
            shown.contains("api-key") && !shown.contains("s3cr3t") && !shown.contains("pw"),
            "{shown}"
        );
    }
}
