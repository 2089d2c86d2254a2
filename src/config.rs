//! Configuration: the TOML file, `MDPROXY_*` environment overrides and validation.
//! `Config::default()` is the demo set-up. Every scalar key of the file can be
//! overridden by `MDPROXY_<SECTION>_<KEY>`; the names are derived from the defaults, so
//! the list in README and the code cannot drift apart (see [`env_keys`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use chrono::NaiveDate;
use constant_time_eq::constant_time_eq;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::api::catalog::{FreshnessClass, catalog};

mod check;

pub use check::{At, Problem, Problems};

/// Prefix of every environment override.
pub const ENV_PREFIX: &str = "MDPROXY";

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

/// A secret string (a token or password), held in `secrecy`'s zeroizing box. Its
/// `Debug` never shows the value; it is compared in constant time.
#[derive(Clone, Default)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(SecretString::from(value.into()))
    }

    /// The secret itself; call only where it is used (a header, a comparison).
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// True when no secret is set.
    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }

    /// Whether `presented` equals this secret, compared in constant time (no
    /// timing tells how much of it was right). An empty secret matches nothing.
    pub fn matches(&self, presented: impl AsRef<[u8]>) -> bool {
        !self.is_empty() && constant_time_eq(self.expose().as_bytes(), presented.as_ref())
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        constant_time_eq(self.expose().as_bytes(), other.expose().as_bytes())
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

impl Serialize for Secret {
    /// Serialised only to build the defaults table the file is laid over.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.expose())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret::new)
    }
}

/// `url` without the user name and password it may carry (`http://user:pass@host`
/// becomes `http://***@host`), for logs, banners and the status page.
pub fn redacted_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("***");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        // Not a URL: shown only up to a credential's `@`, if it has one.
        Err(_) => match url.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => url.to_owned(),
        },
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
    pub calendar: CalendarConfig,
    pub limits: LimitsConfig,
    pub scheduler: SchedulerConfig,
    pub hub: HubConfig,
    pub passthrough: PassthroughConfig,
    pub cluster: ClusterConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
}

/// `[log]`: what mdproxy writes to stderr (the filter is `--log` / `MDPROXY_LOG`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` (human, coloured on a terminal) or `json` (one object per line, for
    /// log shippers); `--log-format` overrides it. Applies at start.
    pub format: LogFormat,
    /// One line per request (target `access`, at `info`): method, path, endpoint
    /// template, cache key, status, cache outcome, bytes, duration, client name,
    /// peer, request ID. Applies on reload.
    pub access: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            access: true,
        }
    }
}

/// The log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// hyper's own limit of header fields in an HTTP/1.1 request: `server.max_headers`'
/// default, which the listener leaves to hyper.
pub const HYPER_MAX_HEADERS: usize = 100;

/// `[server]`: the client listener.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the client listener.
    pub listen: String,
    /// Most client connections open at once; past it a new connection is answered
    /// `503 overloaded` at once and closed.
    pub max_connections: usize,
    /// Most connections from one client address, as a percentage of
    /// `max_connections` (at least 1): one address cannot take every slot.
    pub max_connections_per_client_percent: u32,
    /// How long a client may take to send a request's headers. hyper starts this
    /// timer as soon as it waits for a request, so it is also how long an idle
    /// keep-alive connection stays open.
    pub header_read_timeout_ms: u64,
    /// Keep connections open between requests (HTTP/1.1 keep-alive).
    pub keep_alive: bool,
    /// Most header fields in a request. At hyper's own limit
    /// ([`HYPER_MAX_HEADERS`], the default) hyper parses into arrays it leaves
    /// uninitialised; any other number makes it fill arrays of that many entries
    /// for every request (about 1.5 % of a cache hit's CPU).
    pub max_headers: usize,
    /// Largest request head (request line and headers) in bytes, at least 8192.
    pub max_header_bytes: usize,
    /// How long shutdown waits for open connections before closing them.
    pub shutdown_grace_ms: u64,
    /// Browser origins allowed by CORS (`https://dash.example.com`, or `*`).
    pub cors_origins: Vec<String>,
    /// How often the config file is checked for changes (0: only on SIGHUP).
    pub reload_poll_ms: u64,
    /// PEM certificate chain (leaf first); with `tls_key`, the client listener
    /// speaks TLS (HTTP/2 and HTTP/1.1 by ALPN). Empty: plain HTTP (HTTP/1.1, and
    /// HTTP/2 by prior knowledge). The files are reloaded when they change.
    pub tls_cert: String,
    /// PEM private key of `tls_cert`. A secret's path, not the secret.
    pub tls_key: String,
    /// Streams one HTTP/2 connection may have open at once.
    pub h2_max_streams: u32,
    /// How errors mdproxy makes on the upstream's behalf are answered (upstream
    /// unreachable, failing, timed out, out of budget, breaker open): `status` with
    /// the contract's HTTP status (502, 503, 504); `upstream` as the real upstream
    /// reports its own failures, HTTP 200 with `success: false` and its message
    /// (`socket hang up`), for clients written against it. Applies on reload.
    pub error_mode: ErrorMode,
}

/// See [`ServerConfig::error_mode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorMode {
    /// The contract's HTTP statuses.
    #[default]
    Status,
    /// HTTP 200 with `success: false`, as the real upstream reports its failures.
    Upstream,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            max_connections: 10_000,
            max_connections_per_client_percent: 25,
            header_read_timeout_ms: 10_000,
            keep_alive: true,
            max_headers: HYPER_MAX_HEADERS,
            max_header_bytes: 16 * 1024,
            shutdown_grace_ms: 5_000,
            cors_origins: Vec::new(),
            reload_poll_ms: 2_000,
            tls_cert: String::new(),
            tls_key: String::new(),
            h2_max_streams: 128,
            error_mode: ErrorMode::Status,
        }
    }
}

/// `[auth]`: who may call the proxy. Empty by default: there is no built-in token,
/// a file or the environment must name one (`demo` passes its own).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Client bearer tokens accepted by the proxy. Secrets: never logged.
    pub tokens: Vec<Secret>,
    /// Named clients with their own rate limits, `[[auth.clients]]`.
    pub clients: Vec<ClientConfig>,
}

/// A named client token with its own limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Name in logs and metrics (never the token).
    pub name: String,
    pub token: Secret,
    /// Requests per second (default `limits.client_rps`; 0: unlimited).
    pub rps: Option<u32>,
    /// Burst (default `limits.client_burst`).
    pub burst: Option<u32>,
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
    /// Whole-request timeout of most endpoints; past it the client gets 504 (or a
    /// stale answer). The docs' clients wait 10 s.
    pub timeout_ms: u64,
    /// Whole-request timeout of the endpoints the catalogue marks slow (the
    /// K-lines: a long history can take the upstream far longer, and the docs'
    /// clients wait up to 90 s for it).
    pub long_timeout_ms: u64,
    /// Timeouts by endpoint path template, over the two above, e.g.
    /// `"/stock/financial/statements/{code}" = 30000`.
    pub endpoint_timeouts_ms: BTreeMap<String, u64>,
    /// Idle keep-alive connections kept per upstream host.
    pub pool_max_idle_per_host: usize,
    /// Consecutive upstream failures (timeouts, unreachable, 5xx) that open the
    /// circuit breaker; 0 disables it. While open, stale answers are served at once
    /// and uncached requests fail fast with 502.
    pub breaker_failures: u32,
    /// First open interval of the breaker; doubles on each failed probe.
    pub breaker_open_ms: u64,
    /// Longest open interval of the breaker.
    pub breaker_max_open_ms: u64,
    /// Largest upstream body read; a larger answer is an upstream error ("answer
    /// too large", 502) and is never buffered past this size.
    pub max_body_bytes: u64,
    /// Allow `http://` to a host that is not loopback: the upstream token would
    /// cross the network in the clear. Off: such a `base_url` is refused.
    pub allow_plain_http: bool,
    /// Other instances of the upstream (`[[upstream.fallback]]`: another key, a
    /// mirror), tried in order when the one before is down (its breaker open),
    /// paused by `Retry-After`, or out of quota. Each has its own breaker, budget,
    /// quota, adaptive rate and metrics label (`fallback-1`, ...).
    pub fallback: Vec<FallbackConfig>,
    /// What the start-up (and reload) probe asks for, a request target such as
    /// `/market/indices`: an unreachable upstream or a refused token is logged at
    /// once. Empty: no probe.
    pub probe_target: String,
}

impl UpstreamConfig {
    /// The upstream timeout of `endpoint`: its entry in `endpoint_timeouts_ms`, else
    /// `long_timeout_ms` for the endpoints the catalogue marks slow, else `timeout_ms`.
    pub fn timeout_for(&self, endpoint: &crate::api::catalog::Endpoint) -> std::time::Duration {
        let ms = self
            .endpoint_timeouts_ms
            .get(&endpoint.path)
            .copied()
            .unwrap_or(match endpoint.patience {
                crate::api::catalog::Patience::Standard => self.timeout_ms,
                crate::api::catalog::Patience::Long => self.long_timeout_ms,
            });
        std::time::Duration::from_millis(ms)
    }

    /// The longest timeout of any endpoint: a cluster's fill lease must outlast it.
    pub fn longest_timeout(&self) -> std::time::Duration {
        catalog()
            .with_passthrough()
            .map(|e| self.timeout_for(e))
            .max()
            .unwrap_or_default()
    }

    /// Why `base_url` is unacceptable, if it is: missing, not an http(s) URL, or
    /// plain HTTP to a remote host without `allow_plain_http`.
    fn base_url_problem(&self) -> Option<String> {
        if self.base_url.is_empty() {
            return Some(
                "upstream.base_url is required (the upstream's URL ending with /api/v1; MDPROXY_UPSTREAM_BASE_URL)".into(),
            );
        }
        let url = match reqwest::Url::parse(&self.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => url,
            _ => {
                return Some(format!(
                    "upstream.base_url: {:?} is not an http(s) URL",
                    self.base_url
                ));
            }
        };
        let host = url.host_str().unwrap_or_default();
        let loopback = host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        (url.scheme() == "http" && !loopback && !self.allow_plain_http).then(|| {
            format!(
                "upstream.base_url: {:?} is plain HTTP to a remote host, which would send the upstream token in the clear; use https:// or set upstream.allow_plain_http = true",
                self.base_url
            )
        })
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            // Required: a config that forgot it must not send the upstream token to
            // some default address.
            base_url: String::new(),
            token: Secret::new(""),
            // The upstream's sources answer within seconds: connect ~3 s, total ~10 s.
            connect_timeout_ms: 3_000,
            timeout_ms: 10_000,
            long_timeout_ms: 90_000,
            endpoint_timeouts_ms: BTreeMap::new(),
            pool_max_idle_per_host: 64,
            breaker_failures: 5,
            breaker_open_ms: 1_000,
            breaker_max_open_ms: 30_000,
            max_body_bytes: 16 * 1024 * 1024,
            allow_plain_http: false,
            fallback: Vec::new(),
            probe_target: "/market/indices".into(),
        }
    }
}

/// One `[[upstream.fallback]]`: another instance of the upstream. Unset limits are
/// the primary's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackConfig {
    /// Its base URL, ending with `/api/v1`.
    pub base_url: String,
    /// Its bearer token (a secret: never logged).
    #[serde(default)]
    pub token: Secret,
    #[serde(default)]
    pub upstream_rps: Option<u32>,
    #[serde(default)]
    pub upstream_burst: Option<u32>,
    #[serde(default)]
    pub upstream_per_minute: Option<u64>,
    #[serde(default)]
    pub upstream_per_day: Option<u64>,
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

/// Fresh and stale lifetimes of one freshness class, in session and out of it.
///
/// An answer fetched in session is fresh for `session_fresh_secs`; one fetched out of
/// session for `closed_fresh_secs`, and (with `until_open`) no longer than the next
/// open plus `freshness.open_grace_secs`. After that it is *stale* for the matching
/// `*_stale_secs`: served at once while one background request refreshes it. Until
/// `error_secs` after its fresh time it is still served when the upstream fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassTtl {
    pub session_fresh_secs: u64,
    pub session_stale_secs: u64,
    pub closed_fresh_secs: u64,
    pub closed_stale_secs: u64,
    /// Out of session, stay fresh at most until the next open (plus the grace).
    pub until_open: bool,
    /// Stale-if-error window, counted from the end of the fresh time.
    pub error_secs: u64,
}

/// A per-endpoint override: any subset of [`ClassTtl`]'s keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TtlOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_fresh_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_stale_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_fresh_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_stale_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_open: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_secs: Option<u64>,
}

impl TtlOverride {
    /// `base` with this override's keys laid over it.
    pub fn apply(&self, base: ClassTtl) -> ClassTtl {
        ClassTtl {
            session_fresh_secs: self.session_fresh_secs.unwrap_or(base.session_fresh_secs),
            session_stale_secs: self.session_stale_secs.unwrap_or(base.session_stale_secs),
            closed_fresh_secs: self.closed_fresh_secs.unwrap_or(base.closed_fresh_secs),
            closed_stale_secs: self.closed_stale_secs.unwrap_or(base.closed_stale_secs),
            until_open: self.until_open.unwrap_or(base.until_open),
            error_secs: self.error_secs.unwrap_or(base.error_secs),
        }
    }
}

/// `[freshness]`: TTLs per class, overrides per endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FreshnessConfig {
    /// "Shortly after the next open": how long past the open an answer fetched out
    /// of session may stay fresh, so that clients do not all miss at 09:15:00.
    pub open_grace_secs: u64,
    /// How long an upstream "not found" answer is cached (negative caching).
    pub negative_secs: u64,
    /// One table per class, e.g. `[freshness.classes.live]`.
    pub classes: BTreeMap<FreshnessClass, ClassTtl>,
    /// Overrides by endpoint path template, e.g. `[freshness.endpoints."/market/indices"]`.
    pub endpoints: BTreeMap<String, TtlOverride>,
}

/// Days, in seconds.
const DAY: u64 = 86_400;

impl Default for FreshnessConfig {
    fn default() -> Self {
        // docs/DOMAIN.md §8.1: in-session TTLs; out of session until the next open for market
        // data (30 days only bounds it: the longest closure, Spring Festival, is ~9 days), shorter for news and overseas quotes; stale-if-error ≥ 1 h, 24 h or more
        // for reference data.
        let t = |sf, ss, cf, cs, until_open, error_secs| ClassTtl {
            session_fresh_secs: sf,
            session_stale_secs: ss,
            closed_fresh_secs: cf,
            closed_stale_secs: cs,
            until_open,
            error_secs,
        };
        let classes = FreshnessClass::ALL
            .into_iter()
            .map(|class| {
                let ttl = match class {
                    FreshnessClass::Live => t(3, 6, 30 * DAY, 60, true, 3_600),
                    // The last bar moves with every trade and a new one starts each
                    // minute: fresher than daily bars, though not a quote.
                    FreshnessClass::Minute => t(10, 20, 30 * DAY, 300, true, 3_600),
                    FreshnessClass::Intraday => t(15, 30, 30 * DAY, 300, true, 3_600),
                    FreshnessClass::News => t(60, 120, 300, 600, false, 3_600),
                    // Announcements land through the day and mostly in the evening:
                    // half an hour in session, an hour out of it, never held till the open.
                    FreshnessClass::Filings => t(1_800, 1_800, 3_600, 3_600, false, DAY),
                    FreshnessClass::Daily => t(3_600, 3_600, 12 * 3_600, 3_600, false, DAY),
                    FreshnessClass::Reference => t(60, 600, DAY, 3_600, true, DAY),
                    // Published once a year (each December); a day keeps a correction
                    // from waiting long.
                    FreshnessClass::Calendar => t(DAY, DAY, DAY, DAY, false, 30 * DAY),
                    FreshnessClass::Periodic => t(12 * 3_600, 3_600, DAY, 3_600, false, 7 * DAY),
                    FreshnessClass::Macro => t(6 * 3_600, 3_600, 12 * 3_600, 3_600, false, 7 * DAY),
                    // Final answers: kept for a week, served on error for a month.
                    FreshnessClass::Immutable => {
                        t(7 * DAY, 7 * DAY, 7 * DAY, 7 * DAY, false, 30 * DAY)
                    }
                };
                (class, ttl)
            })
            .collect();
        // Overseas markets trade while China is closed (docs/DOMAIN.md §3): 30 s / 60 s.
        let global = TtlOverride {
            session_fresh_secs: Some(30),
            closed_fresh_secs: Some(60),
            until_open: Some(false),
            ..TtlOverride::default()
        };
        FreshnessConfig {
            open_grace_secs: 60,
            negative_secs: 30,
            classes,
            endpoints: BTreeMap::from([("/market/global-index".to_owned(), global)]),
        }
    }
}

/// `[calendar]`: exchange holidays.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CalendarConfig {
    /// Weekday closures (`YYYY-MM-DD`). Empty: the built-in calendar (2026 as
    /// published, 2027 provisional). Non-empty: replaces it entirely.
    pub holidays: Vec<NaiveDate>,
}

/// `[limits]`: the upstream budget and client rate limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most upstream requests per second, all sources together (0: no cap).
    pub upstream_rps: u32,
    /// Upstream requests allowed at once above the rate.
    pub upstream_burst: u32,
    /// Percent of the upstream budget prewarm and background refreshes may use; they
    /// never wait for it (a refresh that finds no room is dropped and counted).
    pub background_percent: u32,
    /// How long a client miss may wait for upstream budget before it gets a stale
    /// answer or 503 `overloaded`.
    pub client_wait_ms: u64,
    /// Requests per second per client token (0: no limit).
    pub client_rps: u32,
    /// Burst per client token.
    pub client_burst: u32,
    /// Adapt the upstream rate to what the upstream tolerates: throttling answers,
    /// a rising share of reported failures or timeouts, or latency far above its
    /// normal halve it; quiet time brings it back to `upstream_rps`.
    pub adaptive: bool,
    /// The lowest rate the adaptation goes to, requests per second.
    pub adaptive_floor_rps: u32,
    /// How long the rate takes to climb from the floor back to `upstream_rps`.
    pub adaptive_recovery_secs: u64,
    /// How long a `429`/`503` without a readable `Retry-After` pauses the upstream.
    pub retry_after_default_secs: u64,
    /// The longest pause a `Retry-After` may ask for.
    pub retry_after_max_secs: u64,
    /// Most upstream requests in a minute (0: no minute quota), per upstream.
    pub upstream_per_minute: u64,
    /// Most upstream requests in a day (0: no day quota), per upstream; the day
    /// starts at `quota_day_start`, China time.
    pub upstream_per_day: u64,
    /// Percent of the day's quota kept for client misses: background refreshes and
    /// prewarm stop when less is left, and below half of it stale answers are
    /// preferred to refreshes.
    pub quota_reserve_percent: u32,
    /// When the vendor's day starts, `HH:MM` in `quota_time_zone`.
    pub quota_day_start: String,
    /// The time zone the vendor's day is counted in (an IANA name such as
    /// `Asia/Shanghai` or `UTC`).
    pub quota_time_zone: String,
    /// After a key's fetch fails, later requests get its stale answer at once while
    /// one background retry per key runs after this long, doubling each time (with
    /// jitter) up to `failure_backoff_max_ms`. 0: no key is held back (every
    /// request for a failing key asks the upstream again).
    pub failure_backoff_ms: u64,
    pub failure_backoff_max_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            // docs/DOMAIN.md §6.4: start conservatively, a few requests per second.
            upstream_rps: 20,
            upstream_burst: 40,
            background_percent: 50,
            client_wait_ms: 5_000,
            client_rps: 0,
            client_burst: 100,
            adaptive: true,
            adaptive_floor_rps: 1,
            adaptive_recovery_secs: 300,
            retry_after_default_secs: 30,
            retry_after_max_secs: 3_600,
            upstream_per_minute: 0,
            upstream_per_day: 0,
            quota_reserve_percent: 20,
            quota_day_start: "00:00".into(),
            quota_time_zone: "Asia/Shanghai".into(),
            failure_backoff_ms: 1_000,
            failure_backoff_max_ms: 60_000,
        }
    }
}

/// A scheduled prewarm job of the operator's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Name in logs.
    pub name: String,
    /// Cron expression with a seconds field, China time: `"0 */5 9-15 * * Mon-Fri"`.
    pub cron: String,
    /// Request targets relative to `/api/v1`, e.g. `/stock/kline?code=600519`.
    pub targets: Vec<String>,
    /// Skip runs while the market is not in session.
    #[serde(default)]
    pub session_only: bool,
}

/// `[scheduler]`: prewarm jobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Run the built-in and configured jobs.
    pub enabled: bool,
    /// Fill the built-in set once at start-up.
    pub prewarm_on_start: bool,
    /// Demand-driven built-in jobs (indices every few seconds in session) run only
    /// for endpoints a client asked for within this many seconds.
    pub demand_window_secs: u64,
    /// Operator jobs, `[[scheduler.jobs]]`.
    pub jobs: Vec<JobConfig>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enabled: true,
            prewarm_on_start: true,
            demand_window_secs: 300,
            jobs: Vec::new(),
        }
    }
}

/// `[admin]`: the operators' listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Address of `/metrics`, `/healthz`, `/readyz`, `/status`, `/purge`. Empty: off.
    pub listen: String,
    /// Bearer token for `POST /purge`. Empty: purging is refused. A secret.
    pub token: Secret,
}

/// `[hub]`: the quote stream (`/stock/indicator/realtime/sse`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HubConfig {
    /// Upstream path polled for quotes with `?codes=<batch>`; its `data.diff` rows
    /// (or `data.list`, or a bare array) carry a `code`. Empty: no quote source, and
    /// the stream answers 503.
    pub source: String,
    /// Poll interval while the market is in session (docs/DOMAIN.md: ~3 s snapshots).
    pub session_interval_ms: u64,
    /// Poll interval out of session (quotes stand still after the close).
    pub closed_interval_ms: u64,
    /// Codes per upstream poll request.
    pub batch_size: usize,
    /// Keepalive comment interval on idle streams.
    pub keepalive_secs: u64,
    /// `retry:` sent to EventSource clients (reconnect delay).
    pub retry_ms: u64,
    /// Most codes in one stream.
    pub max_codes_per_stream: usize,
    /// Most open streams per client token.
    pub max_streams_per_token: usize,
    /// Most open streams in all.
    pub max_streams: usize,
    /// A subscriber that takes nothing for this long while it has updates waiting is
    /// disconnected.
    pub stall_timeout_secs: u64,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            source: "/stock/list".into(),
            session_interval_ms: 3_000,
            closed_interval_ms: 60_000,
            batch_size: 100,
            keepalive_secs: 15,
            retry_ms: 3_000,
            max_codes_per_stream: 200,
            max_streams_per_token: 50,
            max_streams: 10_000,
            stall_timeout_secs: 60,
        }
    }
}

/// `[passthrough]`: requests the catalogue does not know (newer upstream routes,
/// newer query parameters of known endpoints).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PassthroughConfig {
    /// Forward and cache them. Off: the contract stays strict (404 for an unknown
    /// path, 400 for an unknown parameter).
    pub enabled: bool,
    /// The freshness class their answers are cached under.
    pub class: FreshnessClass,
    /// Longest pass-through target (path and query, credentials removed) in bytes;
    /// a longer one is answered 414.
    pub max_target_bytes: usize,
}

impl Default for PassthroughConfig {
    fn default() -> Self {
        PassthroughConfig {
            enabled: false,
            class: FreshnessClass::Intraday,
            max_target_bytes: 2_048,
        }
    }
}

/// `[cluster]`: several nodes as one cache toward the upstream, on Redis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `redis://[:password@]host:port/db`; empty: a single node, as without it. A
    /// secret (its password is never shown).
    pub redis_url: Secret,
    /// This node's name in the cluster; empty: host name and process id.
    pub node_id: String,
    /// Largest answer shared through Redis; larger ones stay in the node's cache.
    pub max_l2_body_bytes: usize,
    /// Every Redis operation's time limit; past it the node works alone for the
    /// moment.
    pub timeout_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            redis_url: Secret::new(""),
            node_id: String::new(),
            max_l2_body_bytes: 8 * 1024 * 1024,
            timeout_ms: 250,
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
    /// Everything wrong with a file and the environment, each with its line or
    /// variable; its `Display` is one problem a line, then their number.
    #[error("{0}")]
    Problems(Problems),
    /// What [`Config::validate`] finds in a config built in code.
    #[error("invalid configuration:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

impl Config {
    /// Reads `path`, applies overrides from `lookup` (normally the environment) and
    /// checks the result (see [`Config::load_checked`]).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, the key or the variable.
    pub fn load(
        path: &Path,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Config::load_checked(path, &lookup, &|_| Vec::new())
    }

    /// Reads `path`, applies overrides from `env` and checks it all, reporting every
    /// problem at once: syntax errors; else unknown keys, values of the wrong type and
    /// misspelt `MDPROXY_*` variables, then what [`Config::validate`] and `more` (the
    /// checks other modules own) find.
    ///
    /// # Errors
    /// [`ConfigError::Problems`], each with its line or variable, or `Read`.
    pub fn load_checked(
        path: &Path,
        env: &dyn Env,
        more: &dyn Fn(&Config) -> Vec<String>,
    ) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_toml_checked(&text, &path.display().to_string(), env, more)
    }

    /// Parses TOML text (named `origin` in errors), applies overrides and checks it.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key or the variable.
    pub fn from_toml(
        text: &str,
        origin: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Config::from_toml_checked(text, origin, &lookup, &|_| Vec::new())
    }

    /// [`Config::load_checked`] on text named `origin`.
    ///
    /// # Errors
    /// [`ConfigError::Problems`].
    pub fn from_toml_checked(
        text: &str,
        origin: &str,
        env: &dyn Env,
        more: &dyn Fn(&Config) -> Vec<String>,
    ) -> Result<Config, ConfigError> {
        // The file is laid over the defaults table by table, so a file that sets
        // one class's `fresh_secs` keeps every other default.
        check::load(text, origin, env, more)
    }

    /// Checks every value; reports all problems at once.
    ///
    /// # Errors
    /// `ConfigError::Invalid` listing each bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// What is wrong with the values, each message starting with its key.
    fn problems(&self) -> Vec<String> {
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
        if !(1..=100).contains(&self.server.max_connections_per_client_percent) {
            problems.push("server.max_connections_per_client_percent must be 1 to 100".into());
        }
        if self.server.header_read_timeout_ms == 0 {
            problems.push("server.header_read_timeout_ms must be at least 1".into());
        }
        if self.server.max_headers == 0 || self.server.max_header_bytes < 8192 {
            problems.push(
                "server.max_headers must be at least 1 and server.max_header_bytes at least 8192"
                    .into(),
            );
        }
        if self.auth.tokens.is_empty() && self.auth.clients.is_empty() {
            problems.push("auth.tokens: at least one client token is required".into());
        }
        if self.auth.tokens.iter().any(Secret::is_empty) {
            problems.push("auth.tokens: a token must not be empty".into());
        }
        // What a client can send in a header, and what the edge compares as bytes.
        let unsendable = |t: &Secret| !t.expose().bytes().all(|b| b.is_ascii_graphic());
        if self.auth.tokens.iter().any(unsendable) {
            problems.push(
                "auth.tokens: a token must be visible ASCII (no spaces, controls or non-ASCII letters)"
                    .into(),
            );
        }
        for (i, client) in self.auth.clients.iter().enumerate() {
            if client.name.is_empty() || client.token.is_empty() {
                problems.push(format!(
                    "auth.clients[{i}]: name and token must not be empty"
                ));
            } else if unsendable(&client.token) {
                problems.push(format!(
                    "auth.clients[{i}]: the token must be visible ASCII (no spaces, controls or non-ASCII letters)"
                ));
            }
        }
        match (
            self.server.tls_cert.is_empty(),
            self.server.tls_key.is_empty(),
        ) {
            (true, true) => {}
            (false, false) => {
                let pem = |path: &str| {
                    std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))
                };
                match (pem(&self.server.tls_cert), pem(&self.server.tls_key)) {
                    (Ok(cert), Ok(key)) => {
                        use rustls_pki_types::pem::PemObject;
                        let certs = rustls_pki_types::CertificateDer::pem_slice_iter(&cert)
                            .collect::<Result<Vec<_>, _>>();
                        if !certs.is_ok_and(|c| !c.is_empty()) {
                            problems.push(format!(
                                "server.tls_cert: {} holds no PEM certificate",
                                self.server.tls_cert
                            ));
                        }
                        if rustls_pki_types::PrivateKeyDer::from_pem_slice(&key).is_err() {
                            problems.push(format!(
                                "server.tls_key: {} holds no PEM private key",
                                self.server.tls_key
                            ));
                        }
                    }
                    (cert, key) => {
                        for (name, result) in [("tls_cert", cert), ("tls_key", key)] {
                            if let Err(e) = result {
                                problems.push(format!("server.{name}: {e}"));
                            }
                        }
                    }
                }
            }
            _ => problems.push(
                "server.tls_cert and server.tls_key go together: set both for TLS, or neither"
                    .into(),
            ),
        }
        if self.server.h2_max_streams == 0 {
            problems.push("server.h2_max_streams must be at least 1".into());
        }
        for origin in &self.server.cors_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                problems.push(format!(
                    "server.cors_origins: {origin:?} is neither \"*\" nor an http(s) origin"
                ));
            }
        }
        if self.limits.upstream_rps > 0 && self.limits.upstream_burst == 0 {
            problems.push("limits.upstream_burst must be at least 1".into());
        }
        if self.limits.background_percent > 100 {
            problems.push("limits.background_percent must be 0 to 100".into());
        }
        if self.limits.client_rps > 0 && self.limits.client_burst == 0 {
            problems.push("limits.client_burst must be at least 1".into());
        }
        if !self.admin.listen.is_empty() && self.admin.listen.parse::<SocketAddr>().is_err() {
            problems.push(format!(
                "admin.listen: {:?} is not an address such as 127.0.0.1:9091 (or empty)",
                self.admin.listen
            ));
        }
        if !self.hub.source.is_empty() && !self.hub.source.starts_with('/') {
            problems.push(format!(
                "hub.source: {:?} must be an upstream path such as /stock/list, or empty",
                self.hub.source
            ));
        }
        for (key, value) in [
            ("hub.session_interval_ms", self.hub.session_interval_ms),
            ("hub.closed_interval_ms", self.hub.closed_interval_ms),
            ("hub.batch_size", self.hub.batch_size as u64),
            ("hub.keepalive_secs", self.hub.keepalive_secs),
            (
                "hub.max_codes_per_stream",
                self.hub.max_codes_per_stream as u64,
            ),
            ("hub.stall_timeout_secs", self.hub.stall_timeout_secs),
            (
                "passthrough.max_target_bytes",
                self.passthrough.max_target_bytes as u64,
            ),
        ] {
            if value == 0 {
                problems.push(format!("{key} must be at least 1"));
            }
        }
        if self.hub.keepalive_secs >= self.hub.stall_timeout_secs {
            problems.push(
                "hub.keepalive_secs must be shorter than hub.stall_timeout_secs (keepalives are how an idle stream shows it is alive)".into(),
            );
        }
        // Scheduler jobs (cron, targets) are checked by their owner, `ops::scheduler`.
        if let Some(problem) = self.upstream.base_url_problem() {
            problems.push(problem);
        }
        if !self.upstream.probe_target.is_empty() {
            match crate::api::parse_target(&self.upstream.probe_target) {
                Ok(valid) if !valid.endpoint.streaming => {}
                Ok(_) => {
                    problems.push("upstream.probe_target: the stream cannot be a probe".into())
                }
                Err(e) => problems.push(format!(
                    "upstream.probe_target: {:?} is not a valid request ({e})",
                    self.upstream.probe_target
                )),
            }
        }
        if self.upstream.connect_timeout_ms == 0 {
            problems.push("upstream.connect_timeout_ms must be at least 1".into());
        }
        if self.upstream.timeout_ms == 0 {
            problems.push("upstream.timeout_ms must be at least 1".into());
        }
        for (i, fallback) in self.upstream.fallback.iter().enumerate() {
            let as_primary = UpstreamConfig {
                base_url: fallback.base_url.clone(),
                ..self.upstream.clone()
            };
            if let Some(problem) = as_primary.base_url_problem() {
                problems.push(problem.replacen(
                    "upstream.base_url",
                    &format!("upstream.fallback[{i}].base_url"),
                    1,
                ));
            }
        }
        if self.limits.adaptive_floor_rps == 0 {
            problems.push("limits.adaptive_floor_rps must be at least 1".into());
        }
        if self.limits.quota_reserve_percent > 100 {
            problems.push("limits.quota_reserve_percent must be 0 to 100".into());
        }
        if chrono::NaiveTime::parse_from_str(&self.limits.quota_day_start, "%H:%M").is_err() {
            problems.push(format!(
                "limits.quota_day_start: {:?} is not a time written HH:MM",
                self.limits.quota_day_start
            ));
        }
        if self
            .limits
            .quota_time_zone
            .parse::<chrono_tz::Tz>()
            .is_err()
        {
            problems.push(format!(
                "limits.quota_time_zone: {:?} is not a time zone name such as Asia/Shanghai or UTC",
                self.limits.quota_time_zone
            ));
        }
        if self.limits.retry_after_max_secs < self.limits.retry_after_default_secs {
            problems.push(
                "limits.retry_after_default_secs must be at most limits.retry_after_max_secs"
                    .into(),
            );
        }
        if self.limits.failure_backoff_max_ms < self.limits.failure_backoff_ms {
            problems.push(
                "limits.failure_backoff_ms must be at most limits.failure_backoff_max_ms".into(),
            );
        }
        if self.upstream.long_timeout_ms == 0 {
            problems.push("upstream.long_timeout_ms must be at least 1".into());
        }
        for (path, ms) in &self.upstream.endpoint_timeouts_ms {
            if catalog().by_path(path).is_none() {
                problems.push(format!(
                    "upstream.endpoint_timeouts_ms.\"{path}\": no such endpoint (use a path template such as /stock/kline)"
                ));
            } else if *ms == 0 {
                problems.push(format!(
                    "upstream.endpoint_timeouts_ms.\"{path}\": must be at least 1"
                ));
            }
        }
        let redis = self.cluster.redis_url.expose();
        if !(redis.is_empty() || redis.starts_with("redis://") || redis.starts_with("rediss://")) {
            problems.push("cluster.redis_url must start with redis:// or rediss://".into());
        }
        if self.cluster.timeout_ms == 0 {
            problems.push("cluster.timeout_ms must be at least 1".into());
        }
        if self.upstream.max_body_bytes < 1024 {
            problems.push("upstream.max_body_bytes must be at least 1024".into());
        }
        if self.upstream.breaker_failures > 0
            && (self.upstream.breaker_open_ms == 0
                || self.upstream.breaker_max_open_ms < self.upstream.breaker_open_ms)
        {
            problems.push(
                "upstream.breaker_open_ms must be at least 1 and at most upstream.breaker_max_open_ms".into(),
            );
        }
        if self.cache.max_bytes < 1024 * 1024 {
            problems.push("cache.max_bytes must be at least 1048576 (1 MiB)".into());
        }
        for class in FreshnessClass::ALL {
            if !self.freshness.classes.contains_key(&class) {
                problems.push(format!("freshness.classes.{}: missing", class.as_str()));
            }
        }
        for path in self.freshness.endpoints.keys() {
            if catalog().by_path(path).is_none() {
                let near =
                    check::suggest(path, catalog().endpoints().iter().map(|e| e.path.as_str()));
                let hint = match near.first() {
                    Some(near) => format!("did you mean {near}?"),
                    None => "use a path template such as /stock/detail/{code}".to_owned(),
                };
                problems.push(format!(
                    "freshness.endpoints.\"{path}\": no such endpoint ({hint})"
                ));
            }
        }
        problems
    }

    /// The TTLs of an endpoint for an answer of `class`: the class's, with the
    /// endpoint's override laid over them.
    pub fn ttl(&self, endpoint_path: &str, class: FreshnessClass) -> ClassTtl {
        let base = self.freshness.classes[&class];
        match self.freshness.endpoints.get(endpoint_path) {
            Some(over) => over.apply(base),
            None => base,
        }
    }

    /// Every client token with its name and limit, plain `auth.tokens` first.
    pub fn clients(&self) -> Vec<ClientConfig> {
        let plain = self
            .auth
            .tokens
            .iter()
            .enumerate()
            .map(|(i, token)| ClientConfig {
                name: format!("token{i}"),
                token: token.clone(),
                rps: None,
                burst: None,
            });
        plain.chain(self.auth.clients.iter().cloned()).collect()
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
    let mut out = Vec::new();
    collect(&check::defaults(), &mut Vec::new(), &mut out);
    out
}

/// Keys whose values are tables of the operator's own naming or lists of tables:
/// set in the file only.
const FILE_ONLY: &[&str] = &[
    "auth.clients",
    "scheduler.jobs",
    "freshness.endpoints",
    "upstream.endpoint_timeouts_ms",
    "upstream.fallback",
];

fn collect(table: &toml::Table, path: &mut Vec<String>, out: &mut Vec<EnvKey>) {
    for (key, value) in table {
        path.push(key.clone());
        if FILE_ONLY.contains(&path.join(".").as_str()) {
            path.pop();
            continue;
        }
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

    /// The least a file must say: where the upstream is and who may call.
    const REQUIRED: &str =
        "[upstream]\nbase_url = \"https://api.example.com/api/v1\"\n[auth]\ntokens = [\"t\"]\n";

    #[test]
    fn defaults_fail_closed_until_the_required_keys_are_given() {
        let err = Config::default().validate().unwrap_err().to_string();
        assert!(err.contains("upstream.base_url is required"), "{err}");
        assert!(err.contains("at least one client token"), "{err}");
        for empty in ["", "\n# nothing yet\n", "[server]\n"] {
            assert!(
                Config::from_toml(empty, "f.toml", no_env).is_err(),
                "{empty:?}"
            );
        }
        let c = Config::from_toml(REQUIRED, "f.toml", no_env).unwrap();
        assert_eq!(c.auth.tokens, vec![Secret::new("t")]);
    }

    #[test]
    fn plain_http_goes_only_to_loopback_unless_allowed() {
        let with = |url: &str, allow: bool| {
            let mut c = Config::from_toml(REQUIRED, "f.toml", no_env).unwrap();
            c.upstream.base_url = url.to_owned();
            c.upstream.allow_plain_http = allow;
            c.validate()
        };
        assert!(with("http://127.0.0.1:9090/api/v1", false).is_ok());
        assert!(with("http://localhost/api/v1", false).is_ok());
        assert!(with("http://[::1]:80/api/v1", false).is_ok());
        assert!(with("https://10.0.0.5/api/v1", false).is_ok());
        let err = with("http://10.0.0.5/api/v1", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("allow_plain_http"), "{err}");
        assert!(with("http://10.0.0.5/api/v1", true).is_ok());
        assert!(with("ftp://x/api/v1", true).is_err());
    }

    #[test]
    fn env_overrides_apply_by_type() {
        let env = |k: &str| match k {
            "MDPROXY_UPSTREAM_BASE_URL" => Some("https://api.example.com/api/v1".to_owned()),
            "MDPROXY_UPSTREAM_TIMEOUT_MS" => Some("1500".to_owned()),
            "MDPROXY_AUTH_TOKENS" => Some("a, b".to_owned()),
            "MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS" => Some("7".to_owned()),
            _ => None,
        };
        let c = Config::from_toml("[upstream]\ntimeout_ms = 99\n", "test", env).unwrap();
        assert_eq!(c.upstream.base_url, "https://api.example.com/api/v1");
        assert_eq!(c.upstream.timeout_ms, 1500);
        assert_eq!(c.auth.tokens, vec![Secret::new("a"), Secret::new("b")]);
        assert_eq!(
            c.freshness.classes[&FreshnessClass::Live].session_fresh_secs,
            7
        );
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
            "[freshness.endpoints.\"/nope\"]\nsession_fresh_secs = 1\n",
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
        c.auth.tokens = vec![Secret::new("client-secret-456")];
        assert!(!format!("{c:?}").contains("client-secret-456"));
    }

    #[test]
    fn partial_tables_keep_other_defaults() {
        let c = Config::from_toml(
            &format!("{REQUIRED}[freshness.classes.live]\nsession_fresh_secs = 9\n"),
            "f.toml",
            no_env,
        )
        .unwrap();
        assert_eq!(
            c.freshness.classes[&FreshnessClass::Live].session_fresh_secs,
            9
        );
        assert_eq!(
            c.freshness.classes[&FreshnessClass::Live].session_stale_secs,
            6
        );
        assert_eq!(c.freshness.classes.len(), FreshnessClass::ALL.len());
    }

    #[test]
    fn endpoint_override_wins_over_class() {
        let c = Config::from_toml(
            &format!(
                "{REQUIRED}[freshness.endpoints.\"/market/indices\"]\nsession_fresh_secs = 1\n"
            ),
            "f.toml",
            no_env,
        )
        .unwrap();
        let indices = c.ttl("/market/indices", FreshnessClass::Live);
        assert_eq!(indices.session_fresh_secs, 1);
        assert_eq!(
            indices.session_stale_secs, 6,
            "unset keys come from the class"
        );
        assert_eq!(
            c.ttl("/stock/list", FreshnessClass::Live)
                .session_fresh_secs,
            3
        );
        assert!(
            !c.ttl("/market/global-index", FreshnessClass::Live)
                .until_open
        );
    }

    /// Every problem of `text` (with `env`), as (where, message).
    fn problems(text: &str, env: &dyn Env) -> Vec<(At, String)> {
        match Config::from_toml_checked(text, "f.toml", env, &|_| Vec::new()) {
            Err(ConfigError::Problems(p)) => {
                assert_eq!(p.origin, "f.toml");
                p.list.into_iter().map(|p| (p.at, p.message)).collect()
            }
            other => panic!("expected problems, got {other:?}"),
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Defect: a file with three mistakes took three runs of `check-config`, one
    /// serde error each. One run reports them all, each with its key and line, and
    /// the value checks of the sections without such mistakes.
    #[test]
    fn one_run_reports_every_problem_with_its_line() {
        let text = format!(
            "{REQUIRED}\
             [server]\n\
             listn = \"127.0.0.1:8080\"\n\
             max_connections = \"lots\"\n\
             [freshness.classes.live]\n\
             session_fresh_secs = \"3\"\n\
             [freshness.classes.lvie]\n\
             error_secs = 1\n\
             [limits]\n\
             background_percent = 101\n\
             client_rps = 5000000000\n\
             [hub]\n\
             batch_size = 0\n"
        );
        let found = problems(&text, &no_env);
        let line = |n| At::Line(n);
        assert_eq!(
            found,
            [
                (
                    line(6),
                    "server.listn: unknown key (did you mean server.listen?)".to_owned()
                ),
                (
                    line(7),
                    "server.max_connections: expected an integer, found a string \"lots\"".into()
                ),
                (
                    line(9),
                    "freshness.classes.live.session_fresh_secs: expected an integer, found a string \"3\"".into()
                ),
                (
                    line(10),
                    "freshness.classes.lvie: unknown key (did you mean freshness.classes.live?)"
                        .into()
                ),
                (
                    line(14),
                    "limits.client_rps: invalid value: integer `5000000000`, expected u32".into()
                ),
                (line(16), "hub.batch_size must be at least 1".into()),
            ],
            "limits.background_percent is not judged while its section has a bad key"
        );
        // Fixed, the value checks of [limits] speak too.
        let text = text.replace("client_rps = 5000000000", "client_rps = 5");
        let found = problems(&text, &no_env);
        assert!(
            found.contains(&(
                line(13),
                "limits.background_percent must be 0 to 100".into()
            )),
            "{found:?}"
        );
        assert_eq!(found.len(), 6, "{found:?}");
    }

    #[test]
    fn the_report_reads_one_problem_a_line() {
        let err = Config::from_toml("[server]\nlistn = 1\n", "deploy/x.toml", no_env).unwrap_err();
        let shown = err.to_string();
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[0],
            "deploy/x.toml:2: server.listn: unknown key (did you mean server.listen?)"
        );
        assert!(
            lines.contains(&"deploy/x.toml: auth.tokens: at least one client token is required"),
            "{shown}"
        );
        assert_eq!(
            *lines.last().unwrap(),
            format!("{} problems", lines.len() - 1)
        );
    }

    #[test]
    fn lists_and_tables_of_the_operators_own_naming_are_checked() {
        let text = format!(
            "{REQUIRED}\
             [[auth.clients]]\n\
             name = \"dash\"\n\
             rps = \"10\"\n\
             [[scheduler.jobs]]\n\
             name = \"j\"\n\
             cron = \"0 0 9 * * Mon-Fri\"\n\
             target = [\"/market/indices\"]\n\
             [freshness.endpoints.\"/market/indices\"]\n\
             session_fresh = 1\n"
        );
        let found = problems(&text, &no_env);
        assert_eq!(
            found,
            [
                (At::Line(5), "auth.clients[0].token: required key missing".into()),
                (
                    At::Line(7),
                    "auth.clients[0].rps: expected an integer, found a string \"10\"".into()
                ),
                (At::Line(8), "scheduler.jobs[0].targets: required key missing".into()),
                (
                    At::Line(11),
                    "scheduler.jobs[0].target: unknown key (did you mean scheduler.jobs[0].targets?)"
                        .into()
                ),
                (
                    At::Line(13),
                    "freshness.endpoints.\"/market/indices\".session_fresh: unknown key (did you mean freshness.endpoints.\"/market/indices\".session_fresh_secs?)".into()
                ),
            ]
        );
    }

    #[test]
    fn value_checks_point_to_the_line_or_the_variable() {
        let text = format!(
            "{REQUIRED}[server]\nlisten = \"nowhere\"\n[freshness.endpoints.\"/market/indics\"]\nerror_secs = 1\n"
        );
        let env = vars(&[("MDPROXY_HUB_BATCH_SIZE", "0")]);
        let found = problems(&text, &env);
        assert_eq!(
            found,
            [
                (
                    At::Line(6),
                    "server.listen: \"nowhere\" is not an address such as 127.0.0.1:8080".into()
                ),
                (
                    At::Line(7),
                    "freshness.endpoints.\"/market/indics\": no such endpoint (did you mean /market/indices?)".into()
                ),
                (
                    At::Var("MDPROXY_HUB_BATCH_SIZE".into()),
                    "hub.batch_size must be at least 1".into()
                ),
            ]
        );
        // A key the file lacks points to its table, or to the file.
        let found = problems(
            "[upstream]\ntimeout_ms = 5\n[auth]\ntokens = [\"t\"]\n",
            &no_env,
        );
        assert_eq!(found[0].0, At::Line(1), "{found:?}");
        assert!(
            found[0].1.starts_with("upstream.base_url is required"),
            "{found:?}"
        );
        let found = problems("[auth]\ntokens = [\"t\"]\n", &no_env);
        assert_eq!(found[0].0, At::File, "{found:?}");
    }

    /// Defect: a misspelt `MDPROXY_*` variable was ignored, so the setting silently
    /// did not apply. It is refused, with the names it was probably meant to be.
    #[test]
    fn unknown_variables_are_refused_with_a_suggestion() {
        let env = vars(&[
            ("MDPROXY_SERVR_LISTEN", "127.0.0.1:1"),
            ("MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS", "3"),
            ("MDPROXY_SCHEDULER_JOBS", "x"),
            ("MDPROXY_UPSTREAM_TIMEOUT_MS", "soon"),
            ("MDPROXY_UPSTREAM_CONNECT_TIMEOUT_MS", "100"),
            ("PATH", "/bin"),
        ]);
        let found = problems(REQUIRED, &env);
        let var = |v: &str| At::Var(v.into());
        assert_eq!(
            found,
            [
                (
                    var("MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS"),
                    "unknown variable (did you mean MDPROXY_FRESHNESS_CLASSES_LIVE_CLOSED_FRESH_SECS or MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS?)".into()
                ),
                (
                    var("MDPROXY_SCHEDULER_JOBS"),
                    "not a variable: scheduler.jobs can be set in the file only".into()
                ),
                (
                    var("MDPROXY_SERVR_LISTEN"),
                    "unknown variable (did you mean MDPROXY_SERVER_LISTEN?)".into()
                ),
                (
                    var("MDPROXY_UPSTREAM_TIMEOUT_MS"),
                    "upstream.timeout_ms: \"soon\" is not an integer".into()
                ),
            ]
        );
        // Known variables alone load; a bare lookup lists no names to check.
        let env = vars(&[("MDPROXY_UPSTREAM_CONNECT_TIMEOUT_MS", "100")]);
        let c = Config::from_toml_checked(REQUIRED, "f.toml", &env, &|_| Vec::new()).unwrap();
        assert_eq!(c.upstream.connect_timeout_ms, 100);
        assert!(Config::from_toml(REQUIRED, "f.toml", |_: &str| None).is_ok());
    }

    #[test]
    fn syntax_errors_are_reported_alone_with_their_lines() {
        let found = problems("[server\nlisten = 1\n", &vars(&[("MDPROXY_X", "1")]));
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, At::Line(1));
        assert!(found[0].1.starts_with("invalid TOML: "), "{found:?}");
        assert_eq!(found[1].0, At::Var("MDPROXY_X".into()));
    }

    #[test]
    fn problems_never_show_a_secret() {
        let text = "[auth]\ntokens = \"s3cret-one\"\n[upstream]\nbase_url = \"https://x/api/v1\"\n[[auth.clients]]\nname = \"n\"\ntoken = 5\n[admin]\ntokens = \"s3cret-two\"\n";
        let shown = Config::from_toml(text, "f.toml", no_env)
            .unwrap_err()
            .to_string();
        assert!(
            shown.contains("auth.tokens: expected an array of strings, found a string\n"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    /// The edge compares tokens as the bytes of a header value: one that a header
    /// cannot carry is refused, and the refusal does not show it.
    #[test]
    fn tokens_a_header_cannot_carry_are_refused() {
        for token in ["s3cret one", "s3cret\\tone", "s3cret-ü"] {
            for table in [
                format!("[auth]\ntokens = [\"{token}\"]\n"),
                format!("[auth]\n[[auth.clients]]\nname = \"n\"\ntoken = \"{token}\"\n"),
            ] {
                let text = format!("[upstream]\nbase_url = \"https://x/api/v1\"\n{table}");
                let shown = Config::from_toml(&text, "f.toml", no_env)
                    .unwrap_err()
                    .to_string();
                assert!(shown.contains("must be visible ASCII"), "{shown}");
                assert!(!shown.contains("s3cret"), "{shown}");
            }
        }
        let ok = "[upstream]\nbase_url = \"https://x/api/v1\"\n[auth]\ntokens = [\"a-Z_0.9~!\"]\n";
        assert!(Config::from_toml(ok, "f.toml", no_env).is_ok());
    }

    #[test]
    fn more_checks_join_the_report() {
        let err = Config::from_toml_checked(
            &format!("{REQUIRED}[[scheduler.jobs]]\nname = \"j\"\ncron = \"x\"\ntargets = []\n"),
            "f.toml",
            &no_env,
            &|c| {
                vec![format!(
                    "scheduler.jobs[0].cron: {:?} is not cron",
                    c.scheduler.jobs[0].cron
                )]
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("f.toml:7: scheduler.jobs[0].cron: \"x\" is not cron\n"),
            "{err}"
        );
    }
}
