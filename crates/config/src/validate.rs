//! The value checks of the configuration's own keys: ranges, addresses, URLs and
//! the rules between keys. Pure: no file is read and no other module asked (the TLS
//! files are checked by `edge::tls`, the probe's target by `ops::probe`, the jobs by
//! `ops::scheduler`, each where the value is used).

use std::net::SocketAddr;

use mdproxy_api::catalog::{FreshnessClass, catalog};

use super::problem::{Problem, Problems, suggest};
use super::secret::redacted_url;
use super::{Config, Secret};

/// The path every upstream base URL ends with (the API's root).
const API_ROOT: &str = "/api/v1";

impl Config {
    /// Checks every value of a configuration built in code (the demo, tests);
    /// reports all problems at once. A loaded file gets these checks and more from
    /// [`super::load`].
    ///
    /// # Errors
    /// [`Problems`] naming each bad key.
    pub fn validate(&self) -> Result<(), Problems> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Problems::new("configuration", problems))
        }
    }

    /// What is wrong with the values, each problem with its key.
    pub(super) fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        self.zero_problems(&mut problems);
        self.bound_problems(&mut problems);
        self.server_problems(&mut problems);
        self.auth_problems(&mut problems);
        if !self.admin.listen.is_empty() && self.admin.listen.parse::<SocketAddr>().is_err() {
            problems.push(Problem::new(
                "admin.listen",
                format!(
                    "{:?} is not an address such as 127.0.0.1:9091 (or empty)",
                    self.admin.listen
                ),
            ));
        }
        self.hub_problems(&mut problems);
        self.upstream_problems(&mut problems);
        self.limits_problems(&mut problems);
        self.cluster.problems(&mut problems);
        self.mcp.problems(&mut problems);
        self.cache_problems(&mut problems);
        self.freshness_problems(&mut problems);
        problems
    }

    /// The counts, sizes and durations that must not be 0.
    fn zero_problems(&self, problems: &mut Vec<Problem>) {
        let mut at_least_one = |key: &str, value: u64| {
            if value == 0 {
                problems.push(Problem::new(key, "must be at least 1"));
            }
        };
        let (server, hub, upstream) = (&self.server, &self.hub, &self.upstream);
        at_least_one("server.max_connections", server.max_connections as u64);
        at_least_one(
            "server.header_read_timeout_ms",
            server.header_read_timeout_ms,
        );
        at_least_one("server.send_timeout_ms", server.send_timeout_ms);
        at_least_one("server.max_headers", server.max_headers as u64);
        at_least_one("server.h2_max_streams", u64::from(server.h2_max_streams));
        at_least_one("hub.session_interval_ms", hub.session_interval_ms);
        at_least_one("hub.closed_interval_ms", hub.closed_interval_ms);
        at_least_one("hub.batch_size", hub.batch_size as u64);
        at_least_one("hub.keepalive_secs", hub.keepalive_secs);
        at_least_one("hub.max_codes_per_stream", hub.max_codes_per_stream as u64);
        at_least_one("hub.stall_timeout_secs", hub.stall_timeout_secs);
        at_least_one(
            "passthrough.max_target_bytes",
            self.passthrough.max_target_bytes as u64,
        );
        at_least_one("mcp.max_result_chars", self.mcp.max_result_chars as u64);
        at_least_one("upstream.connect_timeout_ms", upstream.connect_timeout_ms);
        at_least_one("upstream.timeout_ms", upstream.timeout_ms);
        at_least_one("upstream.long_timeout_ms", upstream.long_timeout_ms);
        at_least_one(
            "limits.adaptive_floor_rps",
            u64::from(self.limits.adaptive_floor_rps),
        );
        at_least_one("cluster.timeout_ms", self.cluster.timeout_ms);
        at_least_one("cluster.expected_nodes", self.cluster.expected_nodes);
        if self.limits.upstream_rps > 0 {
            at_least_one(
                "limits.upstream_burst",
                u64::from(self.limits.upstream_burst),
            );
        }
        if self.limits.client_rps > 0 {
            at_least_one("limits.client_burst", u64::from(self.limits.client_burst));
        }
    }

    /// The client listener: its address, limits, TLS pair and CORS origins.
    fn server_problems(&self, problems: &mut Vec<Problem>) {
        let server = &self.server;
        if server.listen.parse::<SocketAddr>().is_err() {
            problems.push(Problem::new(
                "server.listen",
                format!(
                    "{:?} is not an address such as 127.0.0.1:8080",
                    server.listen
                ),
            ));
        }
        if server.max_connections_per_client_percent == 0 {
            problems.push(Problem::new(
                "server.max_connections_per_client_percent",
                "must be at least 1",
            ));
        }
        if server.max_header_bytes < 8192 {
            problems.push(Problem::new(
                "server.max_header_bytes",
                "must be at least 8192",
            ));
        }
        match (server.tls_cert.is_empty(), server.tls_key.is_empty()) {
            (false, true) => problems.push(Problem::new(
                "server.tls_key",
                "missing: server.tls_cert and server.tls_key go together (both for TLS, or neither)",
            )),
            (true, false) => problems.push(Problem::new(
                "server.tls_cert",
                "missing: server.tls_cert and server.tls_key go together (both for TLS, or neither)",
            )),
            _ => {}
        }
        for origin in &server.cors_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                problems.push(Problem::new(
                    "server.cors_origins",
                    format!("{origin:?} is neither \"*\" nor an http(s) origin"),
                ));
            }
        }
    }

    /// The hub's source path and its keepalive against its stall timeout.
    fn hub_problems(&self, problems: &mut Vec<Problem>) {
        let hub = &self.hub;
        if !hub.source.is_empty() && !hub.source.starts_with('/') {
            problems.push(Problem::new(
                "hub.source",
                format!(
                    "{:?} must be an upstream path such as /stock/list, or empty",
                    hub.source
                ),
            ));
        }
        if hub.keepalive_secs >= hub.stall_timeout_secs {
            problems.push(Problem::new(
                "hub.keepalive_secs",
                "must be shorter than hub.stall_timeout_secs (keepalives are how an idle stream shows it is alive)",
            ));
        }
    }

    /// Memory's size, and the disk tier's path and size together.
    fn cache_problems(&self, problems: &mut Vec<Problem>) {
        if self.cache.max_bytes < 1024 * 1024 {
            problems.push(Problem::new(
                "cache.max_bytes",
                "must be at least 1048576 (1 MiB)",
            ));
        }
        match (self.cache.disk_path.is_empty(), self.cache.disk_bytes) {
            (true, 0) => {}
            (true, _) => problems.push(Problem::new(
                "cache.disk_bytes",
                "is set but cache.disk_path is empty (set both for a disk tier, or neither)",
            )),
            (false, 0) => problems.push(Problem::new(
                "cache.disk_path",
                "is set but cache.disk_bytes is 0 (set both for a disk tier, or neither)",
            )),
            (false, n) if n < super::MIN_DISK_BYTES => problems.push(Problem::new(
                "cache.disk_bytes",
                format!("must be at least {} (16 MiB)", super::MIN_DISK_BYTES),
            )),
            _ => {}
        }
    }

    /// Every freshness class present, and every endpoint override naming an endpoint.
    fn freshness_problems(&self, problems: &mut Vec<Problem>) {
        for class in FreshnessClass::ALL {
            if !self.freshness.classes.contains_key(&class) {
                problems.push(Problem::new(
                    format!("freshness.classes.{}", class.as_str()),
                    "missing",
                ));
            }
        }
        for path in self.freshness.endpoints.keys() {
            if catalog().by_path(path).is_none() {
                let near = suggest(path, catalog().endpoints().iter().map(|e| e.path.as_str()));
                let hint = match near.first() {
                    Some(near) => format!("did you mean {near}?"),
                    None => "use a path template such as /stock/detail/{code}".to_owned(),
                };
                problems.push(Problem::new(
                    format!("freshness.endpoints.{path:?}"),
                    format!("no such endpoint ({hint})"),
                ));
            }
        }
    }

    fn auth_problems(&self, problems: &mut Vec<Problem>) {
        if self.auth.tokens.is_empty() && self.auth.clients.is_empty() {
            problems.push(Problem::new(
                "auth.tokens",
                "at least one client token is required (or an [[auth.clients]] entry; MDPROXY_AUTH_TOKENS)",
            ));
        }
        if self.auth.tokens.iter().any(Secret::is_empty) {
            problems.push(Problem::new("auth.tokens", "a token must not be empty"));
        }
        // What a client can send in a header, and what the edge compares as bytes.
        let unsendable = |t: &Secret| !t.expose().bytes().all(|b| b.is_ascii_graphic());
        const VISIBLE: &str = "must be visible ASCII (no spaces, controls or non-ASCII letters)";
        if self.auth.tokens.iter().any(unsendable) {
            problems.push(Problem::new("auth.tokens", format!("a token {VISIBLE}")));
        }
        for (i, client) in self.auth.clients.iter().enumerate() {
            if client.name.is_empty() {
                problems.push(Problem::new(
                    format!("auth.clients[{i}].name"),
                    "must not be empty",
                ));
            }
            if client.token.is_empty() {
                problems.push(Problem::new(
                    format!("auth.clients[{i}].token"),
                    "must not be empty",
                ));
            } else if unsendable(&client.token) {
                problems.push(Problem::new(
                    format!("auth.clients[{i}].token"),
                    format!("the token {VISIBLE}"),
                ));
            }
        }
    }

    fn upstream_problems(&self, problems: &mut Vec<Problem>) {
        let upstream = &self.upstream;
        if let Some(problem) = base_url_problem(&upstream.base_url, upstream.allow_plain_http) {
            problems.push(Problem::new("upstream.base_url", problem));
        }
        for (i, fallback) in upstream.fallback.iter().enumerate() {
            if let Some(problem) = base_url_problem(&fallback.base_url, upstream.allow_plain_http) {
                problems.push(Problem::new(
                    format!("upstream.fallback[{i}].base_url"),
                    problem,
                ));
            }
        }
        // Each is sent as `Authorization: Bearer <token>`: a header holds visible
        // ASCII only (a space or a non-ASCII letter was refused by the upstream
        // client after validation had passed it).
        let unsendable = |t: &Secret| !t.expose().bytes().all(|b| b.is_ascii_graphic());
        let tokens = std::iter::once(("upstream.token".to_owned(), &upstream.token)).chain(
            upstream
                .fallback
                .iter()
                .enumerate()
                .map(|(i, f)| (format!("upstream.fallback[{i}].token"), &f.token)),
        );
        for (key, token) in tokens {
            if unsendable(token) {
                problems.push(Problem::new(
                    key,
                    "must be visible ASCII (no spaces, controls or non-ASCII letters)",
                ));
            }
        }
        for (path, ms) in &upstream.endpoint_timeouts_ms {
            let key = format!("upstream.endpoint_timeouts_ms.{path:?}");
            if catalog().by_path(path).is_none() {
                problems.push(Problem::new(
                    key,
                    "no such endpoint (use a path template such as /stock/kline)",
                ));
            } else if *ms == 0 {
                problems.push(Problem::new(key, "must be at least 1"));
            }
        }
        if upstream.max_body_bytes < 1024 {
            problems.push(Problem::new(
                "upstream.max_body_bytes",
                "must be at least 1024",
            ));
        }
        if upstream.breaker_failures > 0
            && (upstream.breaker_open_ms == 0
                || upstream.breaker_max_open_ms < upstream.breaker_open_ms)
        {
            problems.push(Problem::new(
                "upstream.breaker_open_ms",
                "must be at least 1 and at most upstream.breaker_max_open_ms",
            ));
        }
    }

    fn limits_problems(&self, problems: &mut Vec<Problem>) {
        let limits = &self.limits;
        // Percentages are at most 100 by their bound (`bounds`).
        if chrono::NaiveTime::parse_from_str(&limits.quota_day_start, "%H:%M").is_err() {
            problems.push(Problem::new(
                "limits.quota_day_start",
                format!("{:?} is not a time written HH:MM", limits.quota_day_start),
            ));
        }
        if limits.quota_time_zone.parse::<chrono_tz::Tz>().is_err() {
            problems.push(Problem::new(
                "limits.quota_time_zone",
                format!(
                    "{:?} is not a time zone name such as Asia/Shanghai or UTC",
                    limits.quota_time_zone
                ),
            ));
        }
        if limits.retry_after_max_secs < limits.retry_after_default_secs {
            problems.push(Problem::new(
                "limits.retry_after_default_secs",
                "must be at most limits.retry_after_max_secs",
            ));
        }
        if limits.failure_backoff_max_ms < limits.failure_backoff_ms {
            problems.push(Problem::new(
                "limits.failure_backoff_ms",
                "must be at most limits.failure_backoff_max_ms",
            ));
        }
    }

    /// What a configuration that serves real clients must have beyond valid values
    /// (`serve`, `check-config` and reloads ask it; the demo's own configuration,
    /// built in code, does not): an upstream token, and no placeholder secret left
    /// from an example.
    pub(super) fn deployable(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.upstream.token.is_empty() {
            problems.push(Problem::new(
                "upstream.token",
                "missing: the upstream's key (set MDPROXY_UPSTREAM_TOKEN rather than writing it in the file)",
            ));
        }
        let mut secrets: Vec<(String, &Secret)> = Vec::new();
        secrets.extend(
            self.auth
                .tokens
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("auth.tokens[{i}]"), t)),
        );
        secrets.extend(
            self.auth
                .clients
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("auth.clients[{i}].token"), &c.token)),
        );
        secrets.push(("upstream.token".into(), &self.upstream.token));
        for (i, fallback) in self.upstream.fallback.iter().enumerate() {
            let key = format!("upstream.fallback[{i}].token");
            if fallback.token.is_empty() {
                problems.push(Problem::new(
                    key,
                    "missing: each fallback is called with its own key",
                ));
            } else {
                secrets.push((key, &fallback.token));
            }
        }
        secrets.push(("admin.token".into(), &self.admin.token));
        for (key, secret) in secrets {
            if is_placeholder(secret.expose()) {
                problems.push(Problem::new(
                    key,
                    "a placeholder (such as \"change-me\"), not a secret: set a real one",
                ));
            }
        }
        problems
    }
}

/// Why `url` is not an acceptable upstream base URL, if it is not: missing, not an
/// http(s) URL, carrying credentials, not ending with `/api/v1`, or plain HTTP to a
/// remote host without `allow_plain_http`. The URL is shown without credentials.
fn base_url_problem(url: &str, allow_plain_http: bool) -> Option<String> {
    if url.is_empty() {
        return Some(format!(
            "missing: the upstream's URL, ending with {API_ROOT} (MDPROXY_UPSTREAM_BASE_URL)"
        ));
    }
    let shown = redacted_url(url);
    let parsed = match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => parsed,
        _ => return Some(format!("{shown:?} is not an http(s) URL")),
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Some(format!(
            "{shown:?} carries a user name or password, which logs and /status would show; give the upstream's key as upstream.token (MDPROXY_UPSTREAM_TOKEN)"
        ));
    }
    if parsed.query().is_some()
        || parsed.fragment().is_some()
        || !parsed.path().trim_end_matches('/').ends_with(API_ROOT)
    {
        return Some(format!(
            "{shown:?} must end with {API_ROOT}, the API's root (https://host/api/v1)"
        ));
    }
    let host = parsed.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (parsed.scheme() == "http" && !loopback && !allow_plain_http).then(|| {
        format!(
            "{shown:?} is plain HTTP to a remote host, which would send the upstream token in the clear; use https:// or set upstream.allow_plain_http = true"
        )
    })
}

/// Whether `secret` is an example's stand-in rather than a secret: `change-me`,
/// `replace-me`, `<your-token>`, `...`, `xxxx`, the demo's `demo-token`.
fn is_placeholder(secret: &str) -> bool {
    let letters: String = secret
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if secret.is_empty() {
        return false;
    }
    let stand_ins = [
        "changeme",
        "replaceme",
        "placeholder",
        "yourtoken",
        "yourkey",
        "yoursecret",
        "yourapikey",
        "fillmein",
        "demotoken",
    ];
    letters.is_empty()
        || letters.bytes().all(|b| b == b'x')
        || matches!(
            letters.as_str(),
            "secret" | "password" | "token" | "todo" | "fixme"
        )
        || stand_ins.iter().any(|s| letters.starts_with(s))
        || (secret.starts_with('<') && secret.ends_with('>'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_end_with_the_api_root_and_carry_no_credentials() {
        let ok = |url: &str| base_url_problem(url, false).is_none();
        assert!(ok("https://api.example.com/api/v1"));
        assert!(ok("https://api.example.com/api/v1/"));
        assert!(ok("https://api.example.com/prefix/api/v1"));
        assert!(ok("http://127.0.0.1:9090/api/v1"));
        assert!(ok("http://localhost/api/v1"));
        assert!(ok("http://[::1]:80/api/v1"));
        for bad in [
            "https://api.example.com",
            "https://api.example.com/api",
            "https://api.example.com/api/v2",
            "https://api.example.com/api/v1?key=1",
            "ftp://x/api/v1",
        ] {
            assert!(!ok(bad), "{bad}");
        }
        let shown = base_url_problem("https://user:pa55@api.example.com/api/v1", false).unwrap();
        assert!(shown.contains("upstream.token"), "{shown}");
        assert!(
            !shown.contains("pa55") && !shown.contains("user:"),
            "{shown}"
        );
        let shown = base_url_problem("http://user:pa55@203.0.113.9/x", false).unwrap();
        assert!(!shown.contains("pa55"), "{shown}");
        assert!(
            base_url_problem("http://10.0.0.5/api/v1", false)
                .unwrap()
                .contains("allow_plain_http")
        );
        assert!(base_url_problem("http://10.0.0.5/api/v1", true).is_none());
    }

    #[test]
    fn placeholders_are_told_from_secrets() {
        for stand_in in [
            "change-me",
            "change-me-too",
            "CHANGEME",
            "replace_me",
            "<your-token>",
            "...",
            "xxxxxx",
            "demo-token",
            "your-api-key-here",
        ] {
            assert!(is_placeholder(stand_in), "{stand_in}");
        }
        for secret in [
            "test-token",
            "sim-secret",
            "9f86d081884c7d65",
            "t",
            "token-a",
        ] {
            assert!(!is_placeholder(secret), "{secret}");
        }
    }
}
