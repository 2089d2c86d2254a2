//! The upstream client: the upstream token as `Authorization: Bearer`, the canonical
//! target forwarded with the trace headers, the whole exchange bounded by the
//! endpoint's timeout, the body passed through byte for byte. Classifies every
//! answer as a [`FetchError`] or a cacheable body, reading only the envelope's
//! `success` flag ([`envelope`](super::envelope)); the connections are the
//! [`transport`](super::transport)'s, caching decisions stay in `cache`, the budget
//! in `budget`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::telemetry::context::{TRACEPARENT, X_REQUEST_ID};
use crate::upstream::breaker::Verdict;
use crate::upstream::budget::Denied;
use crate::upstream::counters::UpstreamOutcome;
use crate::upstream::envelope::{Flag, success_flag};
use crate::upstream::transport::{
    Address, BuildError, CommonHeaders, Own, Received, Settings, Transport, WireError,
};
use mdproxy_api::error::Error;
use mdproxy_config::UpstreamConfig;

/// `42 s` for error messages.
fn secs(d: &Duration) -> String {
    format!("{} s", d.as_secs_f64().ceil() as u64)
}

/// A successful upstream answer: 2xx with `"success": true`, the body as it came
/// (not necessarily strict JSON).
#[derive(Clone, Debug)]
pub struct Fetched {
    pub body: Bytes,
    /// How long the upstream took.
    pub elapsed: Duration,
}

/// Why a fetch produced no cacheable body. `Clone` because one failed fill answers
/// every coalesced waiter.
#[derive(Clone, Debug, thiserror::Error)]
pub enum FetchError {
    /// No answer within the endpoint's upstream timeout (or the connect timeout).
    #[error("the upstream did not answer in time")]
    Timeout,
    /// Connection refused, reset, DNS failure: the upstream is not there.
    #[error("the upstream is unreachable")]
    Unreachable,
    /// The upstream answered with a status that says it failed (5xx but 503, or a
    /// 3xx redirect, which is never followed).
    #[error("the upstream failed with status {0}")]
    Failed(u16),
    /// `429` or `503`: the upstream throttles us, asking (or not) to wait this long
    /// (`Retry-After`, unreadable or absent: `None`). It pauses the upstream.
    #[error("the upstream throttles our requests (status {status})")]
    Throttled {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// Not asked: the upstream asked us to wait (`Retry-After`) for this long yet.
    #[error("the upstream asked us to wait; retry in {}", secs(.remaining))]
    Paused { remaining: Duration },
    /// Not asked: a quota of the vendor's is spent (`limits.upstream_per_minute`,
    /// `upstream_per_day`) until `resets_in`; or background work stepped back for
    /// the day's reserve (`resets_in` zero).
    #[error("the upstream quota is spent; it resets in {}", secs(.resets_in))]
    OverQuota { resets_in: Duration },
    /// A 2xx whose body ended (the connection closed, no length announced) before
    /// its JSON did: never cached.
    #[error("the upstream's answer was cut short")]
    Truncated,
    /// 401 or 403: the upstream refused the proxy's own token (`upstream.token`
    /// missing, wrong or revoked). An operator's problem, not the client's.
    #[error("the upstream refused our token (status {0})")]
    TokenRefused(u16),
    /// The answer's body is larger than `upstream.max_body_bytes`; reading stopped
    /// at the limit.
    #[error("the upstream's answer is too large")]
    TooLarge { limit: u64 },
    /// A 2xx whose body is not the JSON envelope.
    #[error("the upstream sent a body that is not the JSON envelope")]
    InvalidBody,
    /// A 2xx with `"success": false`: the real upstream's way of reporting its own
    /// failure (`"socket hang up"`, `"Failed to fetch kline"`). A failure, so a stale
    /// answer is served in its place; when there is none, relayed as it came.
    #[error("the upstream reported a failure")]
    Reported { status: u16, body: Bytes },
    /// The upstream budget had no room for a client within `limits.client_wait_ms`.
    #[error("the upstream budget is exhausted")]
    Overloaded,
    /// The circuit breaker is open: the upstream failed repeatedly just now, so it
    /// is not asked (a stale answer is served at once where there is one).
    #[error("the upstream is failing; circuit breaker open")]
    CircuitOpen { remaining_ms: u64 },
    /// Background work found no upstream budget and was dropped.
    #[error("background refresh dropped for want of upstream budget")]
    Dropped,
    /// A well-formed answer that must not be cached but belongs to the client as it
    /// is: a 4xx such as 404 for an unknown code.
    #[error("the upstream answered {status}")]
    Answer { status: u16, body: Bytes },
}

impl FetchError {
    /// True when the upstream failed (not merely answered "no"): the cases where a
    /// stale answer is better than an error.
    pub fn is_failure(&self) -> bool {
        !matches!(self, FetchError::Answer { .. })
    }

    /// The upstream's own answer, to relay exactly as it came (status and body),
    /// when this error carries one.
    pub fn relayed(self) -> Result<(u16, Bytes), FetchError> {
        match self {
            FetchError::Answer { status, body } | FetchError::Reported { status, body } => {
                Ok((status, body))
            }
            other => Err(other),
        }
    }

    /// The error the client sees when no stale answer is at hand: the one mapping
    /// from an upstream failure or a budget refusal to the contract's errors. (An
    /// answer the upstream made is normally relayed as it is, see
    /// [`relayed`](Self::relayed); mapped here only for completeness.)
    pub fn to_client_error(&self) -> Error {
        match self {
            FetchError::Timeout => Error::UpstreamTimeout,
            FetchError::Unreachable => Error::UpstreamError {
                reason: "the upstream is unreachable".into(),
            },
            FetchError::Failed(status) => Error::UpstreamError {
                reason: format!("the upstream failed with status {status}"),
            },
            FetchError::Throttled { retry_after, .. } => Error::UpstreamThrottled {
                reason: "the upstream throttles our requests; retry later".into(),
                retry_after_secs: retry_after.map_or(1, |d| d.as_secs().max(1)),
            },
            FetchError::Paused { remaining } => Error::UpstreamThrottled {
                reason: format!(
                    "the upstream asked us to wait; retry in {}",
                    secs(remaining)
                ),
                retry_after_secs: remaining.as_secs().max(1),
            },
            FetchError::OverQuota { resets_in } => Error::UpstreamThrottled {
                reason: format!(
                    "the upstream quota is spent; it resets in {}",
                    secs(resets_in)
                ),
                retry_after_secs: resets_in.as_secs().max(1),
            },
            FetchError::Truncated => Error::UpstreamError {
                reason: "the upstream's answer was cut short".into(),
            },
            FetchError::TokenRefused(status) => Error::UpstreamError {
                reason: format!("the upstream refused the proxy's credentials (status {status})"),
            },
            FetchError::InvalidBody => Error::UpstreamError {
                reason: "the upstream sent an invalid body".into(),
            },
            FetchError::TooLarge { limit } => Error::UpstreamError {
                reason: format!("the upstream's answer is too large (over {limit} bytes)"),
            },
            FetchError::CircuitOpen { remaining_ms } => Error::UpstreamError {
                reason: format!(
                    "the upstream is failing: circuit breaker open, next attempt in {remaining_ms} ms"
                ),
            },
            FetchError::Overloaded | FetchError::Dropped => Error::Overloaded {
                reason: "the upstream request budget is exhausted; retry shortly".into(),
                upstream: true,
            },
            FetchError::Answer { status, .. } | FetchError::Reported { status, .. } => {
                Error::UpstreamError {
                    reason: format!("the upstream answered {status}"),
                }
            }
        }
    }

    /// The outcome counted in metrics.
    pub fn outcome(&self) -> UpstreamOutcome {
        match self {
            FetchError::Timeout => UpstreamOutcome::Timeout,
            FetchError::Unreachable => UpstreamOutcome::Unreachable,
            FetchError::Failed(_) => UpstreamOutcome::Failed,
            FetchError::Throttled { .. } => UpstreamOutcome::Throttled,
            FetchError::Paused { .. } => UpstreamOutcome::Paused,
            FetchError::OverQuota { .. } => UpstreamOutcome::OverQuota,
            FetchError::Truncated => UpstreamOutcome::Truncated,
            FetchError::TokenRefused(_) => UpstreamOutcome::TokenRefused,
            FetchError::InvalidBody => UpstreamOutcome::InvalidBody,
            FetchError::TooLarge { .. } => UpstreamOutcome::TooLarge,
            FetchError::Reported { .. } => UpstreamOutcome::Reported,
            FetchError::CircuitOpen { .. } => UpstreamOutcome::CircuitOpen,
            FetchError::Overloaded => UpstreamOutcome::Overloaded,
            FetchError::Dropped => UpstreamOutcome::Dropped,
            FetchError::Answer { status: 404, .. } => UpstreamOutcome::NotFound,
            FetchError::Answer { .. } => UpstreamOutcome::Answer,
        }
    }

    /// Stable label for logs.
    pub fn as_str(&self) -> &'static str {
        self.outcome().as_str()
    }
}

impl FetchError {
    /// What this outcome says about the upstream's health, for the breaker.
    pub fn verdict(&self) -> Verdict {
        match self {
            FetchError::Timeout
            | FetchError::Unreachable
            | FetchError::Failed(_)
            | FetchError::TokenRefused(_)
            | FetchError::InvalidBody
            | FetchError::Truncated => Verdict::Down,
            // The upstream is up; this one answer is what is wrong.
            FetchError::Answer { .. }
            | FetchError::Reported { .. }
            | FetchError::TooLarge { .. } => Verdict::Up,
            // Throttling is the pause's business, not an outage.
            FetchError::CircuitOpen { .. }
            | FetchError::Overloaded
            | FetchError::Dropped
            | FetchError::Throttled { .. }
            | FetchError::Paused { .. }
            | FetchError::OverQuota { .. } => Verdict::Unknown,
        }
    }

    /// Whether the upstream was asked and failed (not a refusal of ours: budget,
    /// breaker, pause, quota).
    pub fn was_asked(&self) -> bool {
        !matches!(
            self,
            FetchError::CircuitOpen { .. }
                | FetchError::Overloaded
                | FetchError::Dropped
                | FetchError::Paused { .. }
                | FetchError::OverQuota { .. }
        )
    }

    /// Whether the next upstream instance may answer where the one that gave this
    /// did not: its refusals (pause, breaker, quota), a throttling answer, or an
    /// outage (unreachable, a 5xx). Not a timeout: the request's time is spent.
    pub fn is_for_the_next(&self) -> bool {
        matches!(
            self,
            FetchError::Throttled { .. }
                | FetchError::Paused { .. }
                | FetchError::OverQuota { .. }
                | FetchError::CircuitOpen { .. }
                | FetchError::Unreachable
                | FetchError::Failed(_)
        )
    }

    /// Whether it says the upstream itself is unreachable or does not answer (as
    /// opposed to one route failing): what the upstream-wide breaker counts.
    pub fn is_transport(&self) -> bool {
        matches!(self, FetchError::Timeout | FetchError::Unreachable)
    }
}

impl From<Denied> for FetchError {
    fn from(denied: Denied) -> FetchError {
        match denied {
            Denied::Overloaded => FetchError::Overloaded,
            Denied::Dropped => FetchError::Dropped,
        }
    }
}

/// The pooled client toward the upstream.
pub struct UpstreamClient {
    /// The settings it was built from: a reload rebuilds the client (and its
    /// connection pool) only when they change.
    config: UpstreamConfig,
    transport: Transport,
    /// Base URL without a trailing slash, e.g. `https://host/api/v1`.
    base: Arc<str>,
    /// The base URL parsed once: a request's URL is a copy with the target's path
    /// and query set (parsing the whole URL each time cost a miss ~6 % more).
    /// `None` when it is no URL with a host and no query: each request's joined
    /// text is then sent as it is, and refused as no URL.
    base_url: Option<reqwest::Url>,
    /// `base_url`'s text without a trailing slash: a target that parsing would
    /// leave as it is follows it as it is ([`Address::joined`]).
    prefix: Option<Box<str>>,
    /// The headers every request carries: JSON accepted, who asks, `Host`, and
    /// `Bearer <upstream token>` (marked sensitive so no header dump shows it).
    headers: CommonHeaders,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("base", &mdproxy_config::redacted_url(&self.base))
            .finish_non_exhaustive()
    }
}

/// Why an upstream client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// TLS (or, behind a proxy, reqwest) refused its settings.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The token cannot be sent in a header (it is never shown).
    #[error("upstream.token contains characters not allowed in a header")]
    TokenNotAHeader,
}

impl UpstreamClient {
    /// Builds the client from `[upstream]`.
    ///
    /// # Errors
    /// When the TLS backend cannot initialise or the token is not a valid header value.
    pub fn new(config: &UpstreamConfig) -> Result<UpstreamClient, ClientError> {
        let settings = Settings {
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            pool_max_idle_per_host: config.pool_max_idle_per_host,
        };
        let base: Arc<str> = config.base_url.trim_end_matches('/').into();
        let base_url = reqwest::Url::parse(&base)
            .ok()
            .filter(|u| u.has_host() && u.query().is_none() && u.fragment().is_none());
        Ok(UpstreamClient {
            config: config.clone(),
            transport: Transport::new(&base, settings)?,
            headers: CommonHeaders::new(common_headers(config, base_url.as_ref())?),
            base,
            prefix: base_url
                .as_ref()
                .map(|url| url.as_str().trim_end_matches('/').into()),
            base_url,
        })
    }

    /// The settings this client was built from.
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// The URL of `target` (path and query relative to the base): the base with
    /// its path extended and the query set, as parsing the two joined would give.
    fn url(&self, target: &str) -> Option<String> {
        // A target that parsing would leave as it is goes after the parsed base's
        // text without a parse.
        if is_plain(target) {
            return Some(
                Address::joined(self.prefix.as_deref()?, target)
                    .url()
                    .into(),
            );
        }
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        let mut url = self.base_url.clone()?;
        let mut full = String::with_capacity(url.path().len() + path.len());
        full.push_str(url.path().trim_end_matches('/'));
        full.push_str(path);
        url.set_path(&full);
        url.set_query(query);
        Some(url.into())
    }

    /// GETs `target` (path and canonical query relative to `/api/v1`), waiting at
    /// most `timeout` for the whole answer.
    ///
    /// # Errors
    /// A [`FetchError`] for everything but a 2xx `"success": true` answer.
    pub async fn fetch(
        &self,
        target: &str,
        timeout: Duration,
        passthrough: bool,
    ) -> Result<Fetched, FetchError> {
        let started = Instant::now();
        // A plain target follows the base as it is, with no URL made (the usual
        // case); any other is joined as parsing would join it.
        let joined;
        let address = match self.prefix.as_deref() {
            Some(prefix) if is_plain(target) => Address::joined(prefix, target),
            _ => {
                joined = self
                    .url(target)
                    .unwrap_or_else(|| format!("{}{target}", self.base));
                Address::from(joined.as_str())
            }
        };
        let limit = self.config.max_body_bytes;
        let own = self.own_headers();
        let exchange = self.transport.get(address, &self.headers, &own, limit);
        let Received {
            status,
            retry_after,
            date,
            body,
            close_delimited,
        } = match tokio::time::timeout(timeout, exchange).await {
            Ok(received) => received?,
            Err(_) => return Err(FetchError::Timeout),
        };
        let elapsed = started.elapsed();
        if close_delimited && is_cut_short(status, &body) {
            return Err(FetchError::Truncated);
        }
        let answer = Answered {
            status,
            body,
            retry_after,
            date,
            passthrough,
        };
        answer.classify().map(|body| Fetched { body, elapsed })
    }

    /// A request's own headers beside the common ones: its ID, and the trace:
    /// while traces are on, the current span's context (this request's span); else
    /// the client's trace, continued with a new parent ID.
    fn own_headers(&self) -> Vec<Own> {
        let mut own = Vec::with_capacity(2);
        let traced = crate::telemetry::outgoing();
        if let Some(context) = crate::telemetry::context::current() {
            if let Some(id) = context.request_id {
                own.push((X_REQUEST_ID, id));
            }
            if let Some(trace) = context.trace.filter(|_| traced.is_none()) {
                own.push((TRACEPARENT, trace.child()));
            }
        }
        if let Some(traced) = traced {
            own.extend(
                traced
                    .iter()
                    .map(|(name, value)| (name.clone(), value.clone())),
            );
        }
        own
    }
}

/// Whether a body that ended with its connection was cut, for an answer that is
/// kept: a 2xx that is not one whole JSON document, or a 404 (kept as a short
/// negative entry) that began as JSON and did not close. A 404 in another form
/// cannot be judged and is kept as sent.
fn is_cut_short(status: StatusCode, body: &[u8]) -> bool {
    let complete = || crate::upstream::envelope::is_complete(body);
    if status.is_success() {
        return !complete();
    }
    status == StatusCode::NOT_FOUND && body.trim_ascii_start().starts_with(b"{") && !complete()
}

/// The headers every request carries, built once: `Accept`, `User-Agent`, `Host`
/// (from the parsed base, the port only when it is not the scheme's; the
/// transport would otherwise format it per request) and the token.
fn common_headers(
    config: &UpstreamConfig,
    base: Option<&reqwest::Url>,
) -> Result<HeaderMap, ClientError> {
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("mdproxy/", env!("CARGO_PKG_VERSION"))),
    );
    if let Some(host) = base.and_then(|u| {
        let host = u.host_str()?;
        let text = match u.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        HeaderValue::try_from(text).ok()
    }) {
        headers.insert(http::header::HOST, host);
    }
    if !config.token.is_empty() {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", config.token.expose()))
            .map_err(|_| ClientError::TokenNotAHeader)?;
        value.set_sensitive(true);
        headers.insert(http::header::AUTHORIZATION, value);
    }
    Ok(headers)
}

/// Whether URL parsing would leave `target` exactly as it is: only characters
/// that need no escaping in a path or a query (a `%` stays as it is either way;
/// `'` would be escaped in a query), no `\` (a slash to the parser), no dot
/// segment to resolve, no fragment.
fn is_plain(target: &str) -> bool {
    let bytes = target.as_bytes();
    let path_end = memchr::memchr(b'?', bytes).unwrap_or(bytes.len());
    let (path, query) = bytes.split_at(path_end);
    bytes.first() == Some(&b'/')
        && path.iter().all(|&b| PLAIN[usize::from(b)])
        && query.iter().all(|&b| PLAIN[usize::from(b)] || b == b'?')
        // No `/.`: the dots looked at (a path seldom has one), where a substring
        // search set up its searcher for each miss (about 230 instructions).
        && !memchr::memchr_iter(b'.', path).any(|i| i > 0 && path[i - 1] == b'/')
        // The windows only where a `%` is (a path seldom has one): looked at byte
        // by byte, they were most of a miss's check.
        && (memchr::memchr(b'%', path).is_none()
            || !path.windows(3).any(|w| w.eq_ignore_ascii_case(b"%2e")))
}

/// The bytes [`is_plain`] lets through anywhere: letters and digits, RFC 3986's
/// unreserved characters and sub-delimiters except `'`, and `%`, `/`, `:`, `@` (a
/// table: the check runs on every miss).
const PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let others = b"-._~%/!$&()*+,;=:@";
    let mut i = 0;
    while i < others.len() {
        table[others[i] as usize] = true;
        i += 1;
    }
    table
};

impl From<WireError> for FetchError {
    fn from(e: WireError) -> FetchError {
        match e {
            WireError::Timeout => FetchError::Timeout,
            WireError::Unreachable => FetchError::Unreachable,
            WireError::TooLarge { limit } => FetchError::TooLarge { limit },
        }
    }
}

/// An upstream answer, read whole.
struct Answered {
    status: StatusCode,
    body: Bytes,
    retry_after: Option<HeaderValue>,
    /// The answer's `Date`, which a `Retry-After` date is read against.
    date: Option<HeaderValue>,
    /// A pass-through request: its 3xx and 4xx are answers to relay, not failures.
    passthrough: bool,
}

impl Answered {
    /// Decides what the answer is: a cacheable body or a [`FetchError`].
    fn classify(self) -> Result<Bytes, FetchError> {
        let Answered {
            status,
            body,
            retry_after,
            date,
            passthrough,
        } = self;
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return Err(FetchError::TokenRefused(status.as_u16()));
        }
        if matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        ) {
            // A date is read against the upstream's own clock (its `Date`), so
            // that ours running ahead of it does not shorten the pause to nothing.
            let now = date
                .as_ref()
                .and_then(|d| httpdate::parse_http_date(d.to_str().ok()?).ok())
                .unwrap_or_else(std::time::SystemTime::now);
            let retry_after = retry_after
                .as_ref()
                .and_then(|v| crate::upstream::pause::asked_wait(v, now));
            return Err(FetchError::Throttled {
                status: status.as_u16(),
                retry_after,
            });
        }
        if passthrough && (status.is_redirection() || status.is_client_error()) {
            return Err(FetchError::Answer {
                status: status.as_u16(),
                body,
            });
        }
        if status.is_server_error() || status.is_redirection() {
            return Err(FetchError::Failed(status.as_u16()));
        }
        if !status.is_success() {
            return Err(FetchError::Answer {
                status: status.as_u16(),
                body,
            });
        }
        match success_flag(&body) {
            Flag::Success => Ok(body),
            Flag::Failure => Err(FetchError::Reported {
                status: status.as_u16(),
                body,
            }),
            Flag::Missing => Err(FetchError::InvalidBody),
        }
    }
}

/// [`Answered::classify`] of a catalogue request without headers (the tests').
#[cfg(test)]
fn classify_answer(status: StatusCode, body: Bytes) -> Result<Bytes, FetchError> {
    Answered {
        status,
        body,
        retry_after: None,
        date: None,
        passthrough: false,
    }
    .classify()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's URL made from the base parsed once is the URL the base and
    /// the target joined parse to: paths, queries, encoded and raw text, a base
    /// with a path, with a port, with credentials, with a trailing slash.
    #[test]
    fn a_url_from_the_parsed_base_is_the_joined_one() {
        let targets = [
            "/stock/detail/600519",
            "/stock/kline?code=600519&period=week&fqt=pre",
            "/news/search?keyword=%E6%96%B0%E9%97%BB&page=1",
            "/news/search?keyword=新闻 联播&x=a+b|c",
            "/macro/cpi?page=3&pageSize=20",
            "/fund/detail/159915?",
            "/a%2Fb/c?d=%2F",
            "/a/./b/../c",
            "/a/%2e%2E/c",
            "/x?q='a'",
            "/a\\b",
            "/p?x=%zz&y=a?b/c",
            "/stock/list?page=1&pageSize=20",
            "/p?t=a:b@c,d;e(f)*g!h$i~j",
        ];
        for base in [
            "http://127.0.0.1:8081/api/v1",
            "https://up.example.com/api/v1/",
            "https://user:secret@up.example.com:8443/v1",
            "http://localhost",
        ] {
            let config = UpstreamConfig {
                base_url: base.into(),
                ..UpstreamConfig::default()
            };
            let client = UpstreamClient::new(&config).unwrap();
            for target in targets {
                let joined = format!("{}{target}", base.trim_end_matches('/'));
                let parsed = reqwest::Url::parse(&joined).unwrap();
                let url = client.url(target).expect("a base with a host");
                assert_eq!(url, parsed.as_str(), "{base} {target}");
                assert!(http::Uri::try_from(url.as_str()).is_ok(), "{url}");
            }
        }
        let query = UpstreamConfig {
            base_url: "http://h/api?x=1".into(),
            ..UpstreamConfig::default()
        };
        // Canonical targets skip the parse; raw text, dot segments, a `'` in a
        // query and a backslash take it.
        for plain in [
            "/stock/detail/600519",
            "/macro/cpi?page=3&pageSize=20",
            "/p?x=%zz&y=a?b/c",
            "/v1.2/x.json?a=/.",
        ] {
            assert!(is_plain(plain), "{plain}");
        }
        for parsed in [
            "/news/search?keyword=新闻",
            "/a b",
            "/a/./b",
            "/..",
            "/a/%2E%2e/c",
            "/x?q='a'",
            "/a\\b",
            "x",
        ] {
            assert!(!is_plain(parsed), "{parsed}");
        }
        // A base this cannot extend is joined as text, as before.
        assert!(UpstreamClient::new(&query).unwrap().url("/x").is_none());
    }

    proptest::proptest! {
        /// Any target without a fragment or a trailing space (parsing would drop
        /// both; no canonical target has either), plain or not, gives the URL that
        /// parsing the joined text gives: the shortcut for plain targets never
        /// changes what is sent.
        #[test]
        fn a_target_s_url_is_the_parsed_join(
            target in "/[a-zA-Z0-9/?%.'\\\\ ~!$&()*+,;=:@_é-]{0,24}",
        ) {
            proptest::prop_assume!(!target.ends_with(' '));
            let config = UpstreamConfig {
                base_url: "http://upstream:8080/api/v1".into(),
                ..UpstreamConfig::default()
            };
            let client = UpstreamClient::new(&config).unwrap();
            let parsed = reqwest::Url::parse(&format!("http://upstream:8080/api/v1{target}")).unwrap();
            proptest::prop_assert_eq!(client.url(&target).unwrap(), parsed.as_str());
        }
    }

    /// `Host` is set once from the parsed base, as the transport would set it: the
    /// port only when it is not the scheme's.
    #[test]
    fn the_host_header_is_the_bases() {
        for (base, host) in [
            ("https://up.example.com/api/v1", "up.example.com"),
            ("https://UP.example.com:443/api/v1", "up.example.com"),
            ("https://up.example.com:8443/api/v1", "up.example.com:8443"),
            ("http://127.0.0.1:8081/api/v1", "127.0.0.1:8081"),
            ("http://[::1]:8081/api/v1", "[::1]:8081"),
        ] {
            let config = UpstreamConfig {
                base_url: base.into(),
                token: mdproxy_config::Secret::new("t".to_owned()),
                ..UpstreamConfig::default()
            };
            let client = UpstreamClient::new(&config).unwrap();
            let headers = client.headers.map();
            assert_eq!(headers[http::header::HOST], host, "{base}");
            assert!(headers[http::header::AUTHORIZATION].is_sensitive());
        }
    }

    #[test]
    fn answers_are_classified() {
        let ok = Bytes::from_static(br#"{"success":true,"data":{"x":[1,2]}}"#);
        assert!(classify_answer(StatusCode::OK, ok).is_ok());
        let dirty = Bytes::from_static(b"{\"success\":true,\"data\":[\"a\nb\x01\"]}");
        assert!(serde_json::from_slice::<serde_json::Value>(&dirty).is_err());
        assert_eq!(
            classify_answer(StatusCode::OK, dirty.clone()).unwrap(),
            dirty
        );
        let no = Bytes::from_static(br#"{"success":false,"data":null,"message":"socket hang up"}"#);
        let e = classify_answer(StatusCode::OK, no).unwrap_err();
        assert!(matches!(e, FetchError::Reported { status: 200, .. }));
        assert!(e.is_failure());
        assert_eq!(e.outcome().as_str(), "reported_failure");
        assert!(matches!(
            classify_answer(StatusCode::NOT_FOUND, Bytes::new()),
            Err(FetchError::Answer { status: 404, .. })
        ));
        assert!(matches!(
            classify_answer(StatusCode::UNAUTHORIZED, Bytes::new()),
            Err(FetchError::TokenRefused(401))
        ));
        assert!(matches!(
            classify_answer(StatusCode::BAD_GATEWAY, Bytes::new()),
            Err(FetchError::Failed(502))
        ));
        assert!(matches!(
            classify_answer(StatusCode::FOUND, Bytes::new()),
            Err(FetchError::Failed(302))
        ));
        assert!(matches!(
            classify_answer(StatusCode::OK, Bytes::from_static(b"<html>")),
            Err(FetchError::InvalidBody)
        ));
        assert!(matches!(
            classify_answer(StatusCode::TOO_MANY_REQUESTS, Bytes::new()),
            Err(FetchError::Throttled {
                status: 429,
                retry_after: None
            })
        ));
        let relayed = Answered {
            status: StatusCode::FOUND,
            body: Bytes::new(),
            retry_after: None,
            date: None,
            passthrough: true,
        };
        assert!(matches!(
            relayed.classify(),
            Err(FetchError::Answer { status: 302, .. })
        ));
        let throttled = Answered {
            status: StatusCode::SERVICE_UNAVAILABLE,
            body: Bytes::new(),
            retry_after: Some(HeaderValue::from_static("120")),
            date: None,
            passthrough: false,
        };
        assert!(matches!(
            throttled.classify(),
            Err(FetchError::Throttled {
                status: 503,
                retry_after: Some(d)
            }) if d == Duration::from_secs(120)
        ));
        // A date 90 s after the answer's own `Date`, both long past by our clock
        // (the upstream's clock behind ours): 90 s, not nothing.
        let dated = Answered {
            status: StatusCode::TOO_MANY_REQUESTS,
            body: Bytes::new(),
            retry_after: Some(HeaderValue::from_static("Tue, 14 Nov 2023 22:15:20 GMT")),
            date: Some(HeaderValue::from_static("Tue, 14 Nov 2023 22:13:50 GMT")),
            passthrough: false,
        };
        assert!(matches!(
            dated.classify(),
            Err(FetchError::Throttled {
                status: 429,
                retry_after: Some(d)
            }) if d == Duration::from_secs(90)
        ));
    }
}
