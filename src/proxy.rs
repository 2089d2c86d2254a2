//! One client request, from headers to response: CORS preflight, auth, the client's
//! rate limit, route, validation, the cache (fresh hit, stale-while-revalidate,
//! single-flight fill, stale-if-error) and the response headers of the contract.
//! Errors become the JSON envelope in exactly one place, [`handle`].

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arc_swap::ArcSwap;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use tokio_util::sync::CancellationToken;

use crate::auth::Tokens;
use crate::body::{self, Body};
use crate::cache::{Cache, CacheStatus, CachedBody, FillRole};
use crate::config::Config;
use crate::error::Error;
use crate::freshness::{self, Clock, Freshness, Lifetimes, Policy, Rule};
use crate::hub::QuoteHub;
use crate::limit::{ClientLimits, Denied, Priority, UpstreamBudget};
use crate::metrics::Stats;
use crate::params::{self, Valid};
use crate::router::{API_PREFIX, Router};
use crate::upstream::{FetchError, UpstreamClient};

/// `X-Cache`.
pub const X_CACHE: &str = "x-cache";
/// `Cache-Status` (RFC 9211).
pub const CACHE_STATUS: &str = "cache-status";
/// Headers a browser script may read on a CORS response.
const EXPOSED: &str = "X-Cache, Cache-Status, Age, ETag, Retry-After";

/// Everything a request needs; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Shared>,
}

struct Shared {
    router: Router,
    cache: Cache,
    clock: Arc<dyn Clock>,
    /// The current configuration and everything built from it; swapped whole on
    /// reload, so a request reads one consistent snapshot.
    snapshot: ArcSwap<Snapshot>,
    stats: Stats,
    hub: QuoteHub,
}

/// A configuration and what is built from it.
pub struct Snapshot {
    /// Increases with every applied reload.
    pub generation: u64,
    pub config: Arc<Config>,
    tokens: Tokens,
    client_limits: ClientLimits,
    budget: UpstreamBudget,
    upstream: UpstreamClient,
    policy: Policy,
    cors: Cors,
}

impl Snapshot {
    fn new(config: Config, generation: u64) -> Result<Snapshot, String> {
        let clients = config.clients();
        Ok(Snapshot {
            generation,
            tokens: Tokens::new(clients.iter().map(|c| c.token.clone()).collect()),
            client_limits: ClientLimits::new(&clients, &config.limits),
            budget: UpstreamBudget::new(&config.limits),
            upstream: UpstreamClient::new(&config.upstream)?,
            policy: Policy::new(&config),
            cors: Cors::new(&config.server.cors_origins),
            config: Arc::new(config),
        })
    }

    /// The freshness policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The upstream budget.
    pub fn budget(&self) -> &UpstreamBudget {
        &self.budget
    }

    /// The upstream client.
    pub fn upstream(&self) -> &UpstreamClient {
        &self.upstream
    }

    /// The lifetimes of `entry` under this snapshot's policy.
    fn lifetimes(&self, entry: &CachedBody) -> Lifetimes {
        if entry.generation == self.generation {
            entry.lifetimes
        } else {
            self.policy.lifetimes(entry.rule, entry.fetched_at)
        }
    }
}

impl AppState {
    /// Builds the state for `config`, reading time from `clock`; streams end when
    /// `stop` is cancelled.
    ///
    /// # Errors
    /// When the upstream client cannot be built.
    pub fn new(
        config: Config,
        clock: Arc<dyn Clock>,
        stop: CancellationToken,
    ) -> Result<AppState, String> {
        let cache = Cache::new(config.cache.max_bytes);
        let snapshot = Snapshot::new(config, 0)?;
        Ok(AppState {
            inner: Arc::new(Shared {
                router: Router::new(crate::catalog::catalog()),
                cache,
                clock,
                snapshot: ArcSwap::from_pointee(snapshot),
                stats: Stats::default(),
                hub: QuoteHub::new(stop),
            }),
        })
    }

    /// Applies a new, already validated configuration without touching connections
    /// or the cache. Keys that only a restart can change are reported.
    ///
    /// # Errors
    /// When the new upstream client cannot be built; the old config stays.
    pub fn reload(&self, config: Config) -> Result<Vec<&'static str>, String> {
        let old = self.inner.snapshot.load();
        let mut needs_restart = Vec::new();
        if config.server.listen != old.config.server.listen {
            needs_restart.push("server.listen");
        }
        if config.server.max_connections != old.config.server.max_connections {
            needs_restart.push("server.max_connections");
        }
        if config.cache.max_bytes != old.config.cache.max_bytes {
            needs_restart.push("cache.max_bytes");
        }
        if config.scheduler != old.config.scheduler {
            needs_restart.push("scheduler");
        }
        let next = Snapshot::new(config, old.generation + 1)?;
        self.inner.snapshot.store(Arc::new(next));
        Ok(needs_restart)
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.snapshot.load_full()
    }

    /// The answer cache.
    pub fn cache(&self) -> &Cache {
        &self.inner.cache
    }

    /// Request counters.
    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The quote hub.
    pub fn hub(&self) -> &QuoteHub {
        &self.inner.hub
    }

    /// The router.
    pub fn router(&self) -> &Router {
        &self.inner.router
    }

    /// Whether `entry` is fresh now under the current policy.
    pub fn is_fresh(&self, entry: &CachedBody) -> bool {
        let snap = self.inner.snapshot.load();
        matches!(
            snap.lifetimes(entry).decide(self.inner.clock.now()),
            Freshness::Fresh { .. }
        )
    }

    /// Fetches `valid` again whatever the cache holds (scheduled jobs).
    ///
    /// # Errors
    /// The fetch's error; the cached answer, if any, stays.
    pub async fn refetch(&self, valid: &Valid, priority: Priority) -> Result<(), FetchError> {
        self.fill(valid, priority, true).await.0.map(drop)
    }

    /// Fetches `valid` from the upstream through the single-flight fill and the
    /// upstream budget, caching a successful answer (and a "not found" briefly).
    /// Client misses, background refreshes and the scheduler all come through here.
    /// Unless `force`, an answer that turned fresh meanwhile is used as it is.
    pub async fn fill(
        &self,
        valid: &Valid,
        priority: Priority,
        force: bool,
    ) -> (Result<Arc<CachedBody>, FetchError>, FillRole) {
        let snap = self.inner.snapshot.load_full();
        let clock = Arc::clone(&self.inner.clock);
        let target = valid.target.clone();
        let rule = Rule {
            endpoint_id: valid.endpoint.id,
            class: valid.class,
            until_open: valid.until_open,
            negative: false,
        };
        let usable_snap = Arc::clone(&snap);
        let counting = self.clone();
        let now = clock.now();
        let usable = move |entry: &CachedBody| {
            !force
                && matches!(
                    usable_snap.lifetimes(entry).decide(now),
                    Freshness::Fresh { .. }
                )
        };
        self.inner
            .cache
            .fill(&valid.target, usable, move || async move {
                snap.budget
                    .acquire(priority)
                    .await
                    .map_err(|denied| match denied {
                        Denied::Overloaded => FetchError::Overloaded,
                        Denied::Dropped => FetchError::Dropped,
                    })?;
                let fetched = snap.upstream.fetch(&target).await;
                counting.inner.stats.upstream(match &fetched {
                    Ok(_) => "ok",
                    Err(FetchError::Answer { status: 404, .. }) => "not_found",
                    Err(e) => e.as_str(),
                });
                let (body, status, rule) = match fetched {
                    Ok(fetched) => {
                        tracing::info!(
                            target = %target,
                            priority = priority.as_str(),
                            upstream_ms = fetched.elapsed.as_millis() as u64,
                            bytes = fetched.body.len(),
                            "upstream fetch"
                        );
                        (fetched.body, 200, rule)
                    }
                    // Negative caching: an unknown code stays unknown for a while.
                    Err(FetchError::Answer { status: 404, body }) => (
                        body,
                        404,
                        Rule {
                            negative: true,
                            ..rule
                        },
                    ),
                    Err(e) => return Err(e),
                };
                let fetched_at = clock.now();
                let lifetimes = snap.policy.lifetimes(rule, fetched_at);
                Ok(CachedBody::new(
                    body,
                    status,
                    fetched_at,
                    rule,
                    lifetimes,
                    snap.generation,
                ))
            })
            .await
    }

    /// Starts a background refresh of `valid` unless one is already under way.
    fn refresh_in_background(&self, valid: &Valid) {
        if self.inner.cache.is_filling(&valid.target) {
            return;
        }
        self.inner.stats.refreshes.fetch_add(1, Ordering::Relaxed);
        let state = self.clone();
        let valid = valid.clone();
        tokio::spawn(async move {
            if let (Err(e), _) = state.fill(&valid, Priority::Background, false).await {
                tracing::debug!(target = %valid.target, error = e.as_str(), "background refresh failed");
            }
        });
    }
}

/// Serves one request; never fails (errors become envelope responses).
pub async fn handle<B>(state: AppState, request: Request<B>) -> Result<Response<Body>, Infallible> {
    // A borrowed snapshot: no reference count bounced between cores per request.
    let snap = state.inner.snapshot.load();
    let mut response = match serve(&state, &snap, &request).await {
        Ok(response) => response,
        Err(error) => {
            if error.status().is_server_error() {
                state.inner.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    path = request.uri().path(),
                    code = error.code(),
                    "request failed"
                );
            } else {
                tracing::debug!(
                    path = request.uri().path(),
                    code = error.code(),
                    "request refused"
                );
            }
            error.to_response()
        }
    };
    snap.cors.apply(request.headers(), response.headers_mut());
    Ok(response)
}

async fn serve<B>(
    state: &AppState,
    snap: &Snapshot,
    request: &Request<B>,
) -> Result<Response<Body>, Error> {
    let s = &*state.inner;
    let api_path = request
        .uri()
        .path()
        .strip_prefix(API_PREFIX)
        .ok_or(Error::NotFound)?;
    // A CORS preflight carries no credentials: answer it before auth.
    if request.method() == Method::OPTIONS
        && request.headers().contains_key(header::ORIGIN)
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        return Ok(snap.cors.preflight(request.headers()));
    }
    let route = s.router.route(api_path);
    let client = match snap.tokens.check(request.headers()) {
        Some(client) => client,
        // EventSource cannot send headers: the stream also takes RFC 6750's
        // `access_token` query parameter.
        None if route.is_some_and(|r| r.endpoint.streaming) => access_token(request.uri().query())
            .and_then(|t| snap.tokens.check_value(&t))
            .ok_or(Error::Unauthorized)?,
        None => return Err(Error::Unauthorized),
    };
    snap.client_limits
        .check(client.0)
        .map_err(|retry_after_secs| Error::RateLimited { retry_after_secs })?;
    let route = route.ok_or(Error::NotFound)?;
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return Err(Error::MethodNotAllowed);
    }
    let valid = params::validate(route.endpoint, route.params(), request.uri().query())?;
    if valid.endpoint.streaming {
        return stream(state, snap, client.0, &valid, request);
    }
    lookup(state, snap, &valid, request.headers()).await
}

/// The `access_token` query parameter, if any.
fn access_token(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "access_token")
        .map(|(_, v)| v.into_owned())
}

/// Opens a quote stream (text/event-stream) from the hub.
fn stream<B>(
    state: &AppState,
    snap: &Snapshot,
    client: usize,
    valid: &Valid,
    request: &Request<B>,
) -> Result<Response<Body>, Error> {
    if snap.config.hub.source.is_empty() {
        return Err(Error::StreamUnavailable {
            reason: "no quote source is configured: set hub.source (MDPROXY_HUB_SOURCE) to the upstream path that returns quotes by codes, such as /stock/list".into(),
        });
    }
    let mut response = if request.method() == Method::HEAD {
        Response::new(body::empty())
    } else {
        let codes = valid.query_value("codes").unwrap_or_default();
        let pz = valid
            .query_value("pz")
            .and_then(|p| p.parse().ok())
            .unwrap_or(20);
        let connection = request
            .extensions()
            .get::<crate::server::ConnectionToken>()
            .map(|c| c.0.clone());
        let events = state
            .inner
            .hub
            .subscribe(state, client, &codes, pz, connection)?;
        Response::new(body::stream(events))
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell buffering reverse proxies (nginx) in front of us to pass events through.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// The cache's answer for a valid request.
async fn lookup(
    state: &AppState,
    snap: &Snapshot,
    valid: &Valid,
    headers: &HeaderMap,
) -> Result<Response<Body>, Error> {
    let s = &*state.inner;
    let now = s.clock.now();
    let cached = s.cache.get(&valid.target).await;
    if let Some(entry) = &cached {
        let lifetimes = snap.lifetimes(entry);
        let served = match lifetimes.decide(now) {
            Freshness::Fresh { .. } if entry.status == 200 => Some(Served::Hit),
            Freshness::Fresh { .. } => Some(Served::Negative),
            Freshness::Stale => {
                state.refresh_in_background(valid);
                Some(Served::Revalidating)
            }
            Freshness::StaleIfError | Freshness::Expired => None,
        };
        if let Some(served) = served {
            s.stats.served(valid.endpoint.id, served.x_cache());
            return Ok(answer(headers, entry, served, &lifetimes, now));
        }
    }

    let (mut result, mut role) = state.fill(valid, Priority::Client, false).await;
    if matches!(result, Err(FetchError::Dropped)) {
        // We joined a background refresh that found no budget; a client may wait
        // for budget where background work may not, so ask again as a client.
        (result, role) = state.fill(valid, Priority::Client, false).await;
    }
    let now = s.clock.now();
    match result {
        Ok(entry) => {
            let served = match role {
                FillRole::Found => Served::Hit,
                FillRole::Leader if cached.is_some() => Served::RefetchedStale,
                FillRole::Leader => Served::Stored,
                FillRole::Joined => Served::Collapsed,
            };
            s.stats.served(valid.endpoint.id, served.x_cache());
            Ok(answer(
                headers,
                &entry,
                served,
                &snap.lifetimes(&entry),
                now,
            ))
        }
        Err(error) => {
            // Stale-if-error: a failing upstream never loses a cached answer.
            if error.is_failure()
                && let Some(entry) = cached
                && entry.status == 200
            {
                let lifetimes = snap.lifetimes(&entry);
                if lifetimes.decide(now).is_usable_on_error() {
                    s.stats.served(valid.endpoint.id, CacheStatus::Stale);
                    tracing::warn!(target = %valid.target, upstream_error = error.as_str(), "serving stale answer");
                    return Ok(answer(
                        headers,
                        &entry,
                        Served::StaleIfError,
                        &lifetimes,
                        now,
                    ));
                }
            }
            tracing::warn!(target = %valid.target, upstream_error = error.as_str(), "upstream fetch failed");
            match error {
                FetchError::Answer { status, body } => Ok(relay(status, body)),
                other => Err(other.to_client_error()),
            }
        }
    }
}

/// Whether the client accepts gzip (`Accept-Encoding`, honouring `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// How an answer was served: decides `X-Cache` and `Cache-Status` (RFC 9211)
/// together, so the two never disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    /// Fresh from the cache.
    Hit,
    /// A cached upstream "not found".
    Negative,
    /// Stale, served while one background request refreshes it.
    Revalidating,
    /// Stale, served because the upstream failed.
    StaleIfError,
    /// Fetched for this request and stored.
    Stored,
    /// An expired entry was refetched for this request.
    RefetchedStale,
    /// Waited on another request's fetch of the same key.
    Collapsed,
}

impl Served {
    fn x_cache(self) -> CacheStatus {
        match self {
            Served::Hit | Served::Negative => CacheStatus::Hit,
            Served::Revalidating | Served::StaleIfError => CacheStatus::Stale,
            Served::Stored | Served::RefetchedStale | Served::Collapsed => CacheStatus::Miss,
        }
    }

    /// `Cache-Status`; `ttl` is the seconds of freshness left (negative when stale).
    fn cache_status(self, ttl: i64) -> HeaderValue {
        let tail = match self {
            Served::Hit => "",
            Served::Negative => "; detail=negative",
            Served::Revalidating => "; detail=stale-while-revalidate",
            Served::StaleIfError => "; detail=stale-if-error",
            Served::Stored => return HeaderValue::from_static("mdproxy; fwd=miss; stored"),
            Served::RefetchedStale => {
                return HeaderValue::from_static("mdproxy; fwd=stale; stored");
            }
            Served::Collapsed => return HeaderValue::from_static("mdproxy; fwd=miss; collapsed"),
        };
        const HEAD: &str = "mdproxy; hit; ttl=";
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(ttl);
        let mut value = bytes::BytesMut::with_capacity(HEAD.len() + digits.len() + tail.len());
        value.extend_from_slice(HEAD.as_bytes());
        value.extend_from_slice(digits.as_bytes());
        value.extend_from_slice(tail.as_bytes());
        HeaderValue::from_maybe_shared(value.freeze()).expect("ASCII digits and text")
    }
}

/// A cached answer with the contract's headers, gzip when accepted, or 304 when
/// `If-None-Match` names the representation.
fn answer(
    request_headers: &HeaderMap,
    entry: &CachedBody,
    served: Served,
    lifetimes: &Lifetimes,
    now: DateTime<Utc>,
) -> Response<Body> {
    let gzip = accepts_gzip(request_headers)
        .then(|| entry.gzip())
        .flatten();
    let etag = if gzip.is_some() {
        &entry.etag_gzip
    } else {
        &entry.etag
    };
    let not_modified = entry.status == 200
        && request_headers
            .get(header::IF_NONE_MATCH)
            .is_some_and(|v| etag_matches(v, etag));
    let mut response = if not_modified {
        let mut r = Response::new(body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let bytes = gzip.unwrap_or(&entry.body).clone();
        let mut r = Response::new(body::full(bytes));
        *r.status_mut() = StatusCode::from_u16(entry.status).unwrap_or(StatusCode::OK);
        r
    };
    let remaining = match lifetimes.decide(now) {
        Freshness::Fresh { remaining } => remaining.as_secs(),
        _ => 0,
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if gzip.is_some() && !not_modified {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    headers.insert(X_CACHE, served.x_cache().header_value());
    headers.insert(CACHE_STATUS, served.cache_status(lifetimes.ttl_secs(now)));
    headers.insert(
        header::AGE,
        HeaderValue::from(freshness::age(now, entry.fetched_at).as_secs()),
    );
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::CACHE_CONTROL, max_age(remaining));
    response
}

/// `max-age=N`, with the common small values prebuilt.
fn max_age(secs: u64) -> HeaderValue {
    const SMALL: [&str; 4] = ["max-age=0", "max-age=1", "max-age=2", "max-age=3"];
    match SMALL.get(secs as usize) {
        Some(s) => HeaderValue::from_static(s),
        None => {
            HeaderValue::from_str(&format!("max-age={secs}")).expect("digits are a valid header")
        }
    }
}

/// `If-None-Match` semantics (RFC 9110 §13.1.2): `*`, or any listed tag equal to ours
/// under weak comparison.
fn etag_matches(if_none_match: &HeaderValue, etag: &HeaderValue) -> bool {
    let Ok(list) = if_none_match.to_str() else {
        return false;
    };
    let ours = etag.to_str().unwrap_or_default();
    list.split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == ours)
}

/// An upstream answer that is not cached but belongs to the client (a 4xx, a
/// `"success": false` body), relayed byte for byte.
fn relay(status: u16, body: Bytes) -> Response<Body> {
    let mut response = Response::new(body::full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(X_CACHE, CacheStatus::Miss.header_value());
    headers.insert(CACHE_STATUS, HeaderValue::from_static("mdproxy; fwd=miss"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The CORS policy: which browser origins may read answers.
#[derive(Debug, Default)]
struct Cors {
    any: bool,
    origins: Vec<String>,
}

impl Cors {
    fn new(origins: &[String]) -> Cors {
        Cors {
            any: origins.iter().any(|o| o == "*"),
            origins: origins
                .iter()
                .filter(|o| *o != "*")
                .map(|o| o.trim_end_matches('/').to_owned())
                .collect(),
        }
    }

    /// The request's origin if it is allowed.
    fn allowed<'h>(&self, headers: &'h HeaderMap) -> Option<&'h HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        (self.any || self.origins.iter().any(|o| o == text)).then_some(origin)
    }

    /// Adds the CORS headers to a response when the origin is allowed.
    fn apply(&self, request: &HeaderMap, response: &mut HeaderMap) {
        if self.origins.is_empty() && !self.any {
            return;
        }
        response.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = self.allowed(request) {
            response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            response.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSED),
            );
        }
    }

    /// The answer to a preflight (`OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method`); the origin header itself is added by `apply`.
    fn preflight(&self, request: &HeaderMap) -> Response<Body> {
        let mut r = Response::new(body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        if self.allowed(request).is_some() {
            let h = r.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, HEAD"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(
                    "Authorization, If-None-Match, Last-Event-ID, Cache-Control",
                ),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_follows_rfc_9110() {
        let ours = HeaderValue::from_static("\"abc\"");
        let m = |v: &'static str| etag_matches(&HeaderValue::from_static(v), &ours);
        assert!(m("\"abc\""));
        assert!(m("W/\"abc\""));
        assert!(m("\"x\", \"abc\""));
        assert!(m("*"));
        assert!(!m("\"abd\""));
        assert!(!m("abc"));
    }

    #[test]
    fn cache_status_follows_rfc_9211() {
        assert_eq!(Served::Hit.cache_status(12), "mdproxy; hit; ttl=12");
        assert_eq!(
            Served::Revalidating.cache_status(-3),
            "mdproxy; hit; ttl=-3; detail=stale-while-revalidate"
        );
        assert_eq!(
            Served::Collapsed.cache_status(5),
            "mdproxy; fwd=miss; collapsed"
        );
        assert_eq!(Served::StaleIfError.x_cache(), CacheStatus::Stale);
        assert_eq!(Served::Negative.x_cache(), CacheStatus::Hit);
    }

    #[test]
    fn max_age_writes_seconds() {
        assert_eq!(max_age(0), "max-age=0");
        assert_eq!(max_age(3), "max-age=3");
        assert_eq!(max_age(3600), "max-age=3600");
    }

    #[test]
    fn accept_encoding_is_parsed() {
        let h = |v: &'static str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(v));
            accepts_gzip(&m)
        };
        assert!(h("gzip"));
        assert!(h("deflate, gzip;q=0.8, br"));
        assert!(h("*"));
        assert!(!h("gzip;q=0"));
        assert!(!h("br, deflate"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn cors_allows_listed_origins_only() {
        let cors = Cors::new(&["https://dash.example.com".to_owned()]);
        let mut req = HeaderMap::new();
        req.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://dash.example.com"),
        );
        let mut resp = HeaderMap::new();
        cors.apply(&req, &mut resp);
        assert_eq!(
            resp[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://dash.example.com"
        );
        let mut other = HeaderMap::new();
        other.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        let mut resp = HeaderMap::new();
        cors.apply(&other, &mut resp);
        assert!(!resp.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    }
}
