//! One client request, from headers to response: auth, route, validation, cache
//! lookup, single-flight fill, and the response headers of the contract. Errors are
//! turned into the JSON envelope in exactly one place, [`handle`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};

use crate::auth::Tokens;
use crate::body::{self, Body};
use crate::cache::{Cache, CacheStatus, CachedBody, FillRole};
use crate::config::Config;
use crate::error::Error;
use crate::freshness::{self, Clock, Freshness, Policy};
use crate::params::{self, Valid};
use crate::router::{API_PREFIX, Router};
use crate::upstream::{FetchError, UpstreamClient};

/// `X-Cache`.
pub const X_CACHE: &str = "x-cache";

/// Everything a request needs; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct AppState {
    inner: Arc<State>,
}

struct State {
    router: Router,
    tokens: Tokens,
    cache: Cache,
    upstream: UpstreamClient,
    policy: Policy,
    clock: Arc<dyn Clock>,
}

impl AppState {
    /// Builds the state for `config`, reading time from `clock`.
    ///
    /// # Errors
    /// When the upstream client cannot be built.
    pub fn new(config: &Config, clock: Arc<dyn Clock>) -> Result<AppState, String> {
        Ok(AppState {
            inner: Arc::new(State {
                router: Router::new(crate::catalog::catalog()),
                tokens: Tokens::new(config.auth.tokens.clone()),
                cache: Cache::new(config.cache.max_bytes),
                upstream: UpstreamClient::new(&config.upstream)?,
                policy: Policy::new(config),
                clock,
            }),
        })
    }

    /// The answer cache (tests and the admin side read it).
    pub fn cache(&self) -> &Cache {
        &self.inner.cache
    }
}

/// Serves one request; never fails (errors become envelope responses).
pub async fn handle<B>(state: AppState, request: Request<B>) -> Result<Response<Body>, Infallible> {
    let response = match serve(&state, &request).await {
        Ok(response) => response,
        Err(error) => {
            match error.status() {
                s if s.is_server_error() => tracing::warn!(
                    path = request.uri().path(),
                    code = error.code(),
                    "request failed"
                ),
                _ => tracing::debug!(
                    path = request.uri().path(),
                    code = error.code(),
                    "request refused"
                ),
            }
            error.to_response()
        }
    };
    Ok(response)
}

async fn serve<B>(state: &AppState, request: &Request<B>) -> Result<Response<Body>, Error> {
    let s = &*state.inner;
    let api_path = request
        .uri()
        .path()
        .strip_prefix(API_PREFIX)
        .ok_or(Error::NotFound)?;
    s.tokens
        .check(request.headers())
        .ok_or(Error::Unauthorized)?;
    let route = s.router.route(api_path).ok_or(Error::NotFound)?;
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return Err(Error::MethodNotAllowed);
    }
    let valid = params::validate(route.endpoint, route.params(), request.uri().query())?;
    if valid.endpoint.streaming {
        return Err(Error::StreamUnavailable {
            reason:
                "the quote stream is not available in this build: no quote source is configured"
                    .into(),
        });
    }
    lookup(s, &valid, request.headers()).await
}

/// The cache's answer for a valid request: a fresh hit, or one coalesced upstream fetch,
/// or (when the upstream fails) a stale answer still inside its window.
async fn lookup(s: &State, valid: &Valid, headers: &HeaderMap) -> Result<Response<Body>, Error> {
    let ttl = s.policy.ttl(valid.endpoint.id, valid.class);
    let cached = s.cache.get(&valid.target).await;
    if let Some(entry) = &cached {
        let age = freshness::age(s.clock.now(), entry.fetched_at);
        if let Freshness::Fresh { remaining } = freshness::decide(ttl, age) {
            return Ok(answer(headers, entry, CacheStatus::Hit, age, remaining));
        }
    }

    let keep_for = Duration::from_secs(ttl.fresh_secs + ttl.stale_secs);
    let upstream = s.upstream.clone();
    let clock = Arc::clone(&s.clock);
    let target = valid.target.clone();
    let usable = |entry: &CachedBody| {
        let age = freshness::age(s.clock.now(), entry.fetched_at);
        matches!(freshness::decide(ttl, age), Freshness::Fresh { .. })
    };
    let (result, role) = s
        .cache
        .fill(&valid.target, usable, move || async move {
            let fetched = upstream.fetch(&target).await?;
            tracing::info!(
                target = %target,
                upstream_ms = fetched.elapsed.as_millis() as u64,
                bytes = fetched.body.len(),
                "upstream fetch"
            );
            Ok(CachedBody::new(fetched.body, clock.now(), keep_for))
        })
        .await;

    match result {
        Ok(entry) => {
            let age = freshness::age(s.clock.now(), entry.fetched_at);
            let remaining = match freshness::decide(ttl, age) {
                Freshness::Fresh { remaining } => remaining,
                _ => Duration::ZERO,
            };
            let status = match role {
                FillRole::Found => CacheStatus::Hit,
                FillRole::Leader | FillRole::Joined => CacheStatus::Miss,
            };
            Ok(answer(headers, &entry, status, age, remaining))
        }
        Err(error) => {
            // Stale-if-error: a failing upstream never loses a cached answer.
            if error.is_failure()
                && let Some(entry) = cached
            {
                let age = freshness::age(s.clock.now(), entry.fetched_at);
                if freshness::decide(ttl, age) != Freshness::Expired {
                    tracing::warn!(
                        target = %valid.target,
                        upstream_error = error.as_str(),
                        "serving stale answer"
                    );
                    return Ok(answer(
                        headers,
                        &entry,
                        CacheStatus::Stale,
                        age,
                        Duration::ZERO,
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

/// A cached body with the contract's headers, or 304 when `If-None-Match` matches.
fn answer(
    request_headers: &HeaderMap,
    entry: &CachedBody,
    status: CacheStatus,
    age: Duration,
    remaining: Duration,
) -> Response<Body> {
    let not_modified = request_headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| etag_matches(v, &entry.etag));
    let mut response = if not_modified {
        let mut r = Response::new(body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(body::full(entry.body.clone()))
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(X_CACHE, status.header_value());
    headers.insert(header::AGE, HeaderValue::from(age.as_secs()));
    headers.insert(header::ETAG, entry.etag.clone());
    headers.insert(header::CACHE_CONTROL, max_age(remaining.as_secs()));
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

/// An upstream answer that is not cached but belongs to the client (a 404 for an
/// unknown code, a `"success": false` body), relayed byte for byte.
fn relay(status: u16, body: Bytes) -> Response<Body> {
    let mut response = Response::new(body::full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(X_CACHE, CacheStatus::Miss.header_value());
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
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
    fn max_age_writes_seconds() {
        assert_eq!(max_age(0), "max-age=0");
        assert_eq!(max_age(3), "max-age=3");
        assert_eq!(max_age(3600), "max-age=3600");
    }
}
