//! Configuration: the TOML file's shape, `Config` and one struct per section, with
//! `Config::default()` the demo set-up. Its children load it ([`load()`]: file,
//! `MDPROXY_*` overrides, every problem at once), check it and keep secrets hidden.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use mdproxy_api::catalog::FreshnessClass;

mod bounds;
mod cluster;
mod de;
#[cfg(test)]
mod deploy_tests;
mod env;
mod freshness;
mod load;
mod lookup;
mod mcp;
mod problem;
mod restart;
mod secret;
#[cfg(test)]
mod tests;
mod validate;

pub use bounds::MAX_DISK_BYTES;
pub use cluster::ClusterConfig;
pub use cluster::REDIS_URL_FORM;
pub use env::{ENV_PREFIX, Env, EnvKey, ProcessEnv, env_keys};
pub use freshness::{ClassTtl, FreshnessConfig, NegativeKeep, TtlOverride};
pub use load::{Check, from_text, load};
pub use mcp::McpConfig;
pub use problem::{At, Problem, Problems};
pub use secret::{Secret, redacted_url};

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
    pub mcp: McpConfig,
    pub cluster: ClusterConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
    pub telemetry: TelemetryConfig,
}

impl Config {
    /// The defaults as a TOML table: the base every file is laid over, and where the
    /// variables' names and the report's known keys come from.
    pub(crate) fn defaults_table() -> toml::Table {
        toml::Table::try_from(Config::default()).expect("the defaults serialise")
    }
}

/// `[telemetry]`: OpenTelemetry traces, exported over OTLP (docs/observability.md).
/// Off unless an endpoint is set, here or in `OTEL_EXPORTER_OTLP_ENDPOINT`; the
/// standard `OTEL_*` variables override these keys, as `MDPROXY_*` ones do. Applies
/// at start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`; spans go to
    /// `/v1/traces` under it), as `OTEL_EXPORTER_OTLP_ENDPOINT`. Empty: no traces.
    pub endpoint: String,
    /// `http/protobuf` (`OTEL_EXPORTER_OTLP_PROTOCOL`).
    pub protocol: String,
    /// Headers sent with every export, `name=value,name2=value2` (values
    /// percent-encoded), as `OTEL_EXPORTER_OTLP_HEADERS`. A secret: it usually
    /// carries the backend's key, and is never logged.
    pub headers: Secret,
    /// `service.name` of the spans (`OTEL_SERVICE_NAME`).
    pub service_name: String,
    /// `parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio`,
    /// `always_on`, `always_off` or `traceidratio` (`OTEL_TRACES_SAMPLER`). The
    /// parent-based ones follow an incoming `traceparent`'s sampled flag.
    pub sampler: String,
    /// The ratio of the `traceidratio` samplers, 0.0 to 1.0
    /// (`OTEL_TRACES_SAMPLER_ARG`).
    pub sampler_arg: f64,
    /// How long one export may take (`OTEL_EXPORTER_OTLP_TIMEOUT`).
    pub timeout_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            endpoint: String::new(),
            protocol: "http/protobuf".into(),
            headers: Secret::new(""),
            service_name: "mdproxy".into(),
            sampler: "parentbased_always_on".into(),
            sampler_arg: 1.0,
            timeout_ms: 10_000,
        }
    }
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
    /// How long a response write may make no progress (a client that stopped
    /// reading) before its connection is closed, as nginx's `send_timeout`.
    pub send_timeout_ms: u64,
    /// Keep connections open between requests (HTTP/1.1 keep-alive).
    pub keep_alive: bool,
    /// Most header fields in a request. At hyper's own limit
    /// ([`HYPER_MAX_HEADERS`], the default) hyper parses into arrays it leaves
    /// uninitialised; any other number makes it fill arrays of that many entries
    /// for every request (about 1.5 % of a cache hit's CPU).
    pub max_headers: usize,
    /// Largest request head (request line and headers) in bytes, at least 8192.
    pub max_header_bytes: usize,
    /// Serve clear-text HTTP/1.1 `GET`s on mdproxy's own keep-alive loop (httparse,
    /// one write an answer) rather than hyper's; a connection's first request of
    /// another kind hands it to hyper for good. `false`: hyper serves every request
    /// (docs/BENCHMARKS.md, "The bare HTTP/1.1 path").
    pub bare_http1: bool,
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
    /// Seconds of silence from an HTTP/2 client with streams open after which it is
    /// sent a PING, and closed if no answer comes within 20 s. 0: no pings, as
    /// nginx; a subscriber that stops reading is still cut by
    /// `hub.stall_timeout_secs`. Off by default: every round of pings was followed
    /// by the quote stream's worst ticks (docs/BENCHMARKS.md, the quote stream).
    pub h2_ping_secs: u64,
    /// How errors mdproxy makes on the upstream's behalf are answered (upstream
    /// unreachable, failing, timed out, out of budget, breaker open): `status` with
    /// the contract's HTTP status (502, 503, 504); `upstream` as the real upstream
    /// reports its own failures, HTTP 200 with `success: false` and its message
    /// (`socket hang up`), for clients written against it. Applies on reload.
    pub error_mode: ErrorMode,
    /// With `work_stealing` off: threads serving connections (0: one a core).
    pub threads: usize,
    /// Serve connections on the shared work-stealing runtime (docs/deployment.md).
    pub work_stealing: bool,
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
            send_timeout_ms: 60_000,
            keep_alive: true,
            max_headers: HYPER_MAX_HEADERS,
            max_header_bytes: 16 * 1024,
            bare_http1: true,
            shutdown_grace_ms: 5_000,
            cors_origins: Vec::new(),
            reload_poll_ms: 2_000,
            tls_cert: String::new(),
            tls_key: String::new(),
            h2_max_streams: 128,
            h2_ping_secs: 0,
            error_mode: ErrorMode::Status,
            threads: 0,
            work_stealing: true,
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

/// `[cache]`: memory bounds and the disk tier.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Upper bound of cached bytes (bodies plus keys and bookkeeping).
    pub max_bytes: u64,
    /// Directory of the disk tier under the memory cache (empty: no disk tier).
    pub disk_path: String,
    /// Upper bound of the disk tier's files in bytes (0: no disk tier).
    pub disk_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_bytes: 256 * 1024 * 1024,
            disk_path: String::new(),
            disk_bytes: 0,
        }
    }
}

/// The smallest disk tier: sixteen blocks of a MiB (a K-line reaches 650 KB).
pub const MIN_DISK_BYTES: u64 = 16 * 1024 * 1024;

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
