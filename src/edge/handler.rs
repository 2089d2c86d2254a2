//! One client request, from headers to response: CORS preflight, auth, the client's
//! rate limit, route and validation (or pass-through), then the quote stream or the
//! read-through cache.
//! Errors become the JSON envelope in exactly one place, [`Edge::handle`].

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arc_swap::ArcSwap;
use http::{HeaderValue, Method, Request, Response, header};
use tokio_util::sync::CancellationToken;

use crate::api::params::Valid;
use crate::api::router::API_PREFIX;
use crate::config::Config;
use crate::edge::auth::Tokens;
use crate::edge::body::{self, Body};
use crate::edge::cors::Cors;
use crate::edge::limit::ClientLimits;
use crate::edge::response::{self, IntoResponse};
use crate::error::Error;
use crate::hub::QuoteHub;
use crate::state::{AppState, Snapshot};
use crate::upstream::budget::RateClock;

/// What the edge builds from a configuration: who may call, how often, and from
/// which browser origins. Swapped whole on reload; the rate buckets of unchanged
/// clients are carried over.
struct Access {
    tokens: Tokens,
    limits: ClientLimits,
    cors: Cors,
}

impl Access {
    fn new(config: &Config, clock: &RateClock, previous: Option<&Access>) -> Access {
        let clients = config.clients();
        Access {
            tokens: Tokens::new(clients.iter().map(|c| c.token.clone()).collect()),
            limits: ClientLimits::new(&clients, &config.limits, clock, previous.map(|p| &p.limits)),
            cors: Cors::new(&config.server.cors_origins),
        }
    }
}

/// The client-facing service.
pub struct Edge {
    state: AppState,
    hub: QuoteHub,
    access: ArcSwap<Access>,
    rate_clock: RateClock,
}

impl Edge {
    /// The edge in front of `state` and `hub`, limiting clients on `rate_clock`.
    pub fn new(state: AppState, hub: QuoteHub, rate_clock: RateClock) -> Edge {
        let access = Access::new(&state.snapshot().config, &rate_clock, None);
        Edge {
            state,
            hub,
            access: ArcSwap::from_pointee(access),
            rate_clock,
        }
    }

    /// Applies a new configuration's tokens, client limits and CORS origins, and
    /// closes the open streams of the tokens it revokes.
    pub fn reconfigure(&self, config: &Config) {
        let previous = self.access.load();
        let next = Access::new(config, &self.rate_clock, Some(&previous));
        let revoked = previous.tokens.revoked_by(&next.tokens);
        self.access.store(Arc::new(next));
        if !revoked.is_empty() {
            let closed = self.hub.close_streams_of(&revoked);
            tracing::info!(
                tokens = revoked.len(),
                streams = closed,
                "tokens revoked by the reload: their streams are closed"
            );
        }
    }

    /// Serves one request; never fails (errors become envelope responses).
    /// `connection` closes the connection that carried it (the hub uses it to
    /// disconnect a subscriber that stopped reading).
    pub async fn handle<B>(
        &self,
        request: Request<B>,
        connection: CancellationToken,
    ) -> Result<Response<Body>, Infallible> {
        // Borrowed snapshots: no reference count bounced between cores per request.
        let snap = self.state.load();
        let access = self.access.load();
        let mut response = match self.serve(&snap, &access, &request, connection).await {
            Ok(response) => response,
            Err(error) => {
                if error.status().is_server_error() {
                    self.state.stats().errors.fetch_add(1, Ordering::Relaxed);
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
        access.cors.apply(request.headers(), response.headers_mut());
        Ok(response)
    }

    async fn serve<B>(
        &self,
        snap: &Snapshot,
        access: &Access,
        request: &Request<B>,
        connection: CancellationToken,
    ) -> Result<Response<Body>, Error> {
        // RFC 9112 §3.2: a server must answer 400 to an HTTP/1.1 request without Host.
        if request.version() == http::Version::HTTP_11
            && !request.headers().contains_key(header::HOST)
        {
            return Err(Error::BadRequest {
                reason: "an HTTP/1.1 request needs a Host header".into(),
            });
        }
        let api_path = request
            .uri()
            .path()
            .strip_prefix(API_PREFIX)
            .ok_or(Error::NotFound)?;
        if Cors::is_preflight(request.method(), request.headers()) {
            return Ok(access.cors.preflight(request.headers()));
        }
        // Public, like the upstream's own docs: before authentication.
        if api_path == crate::api::openapi::DOCUMENT_PATH {
            return response::document(request.method(), request.headers());
        }
        let route = crate::api::router().route(api_path);
        let streaming = route.as_ref().is_some_and(|r| r.endpoint.streaming);
        let client = access
            .tokens
            .check(request.headers(), request.uri().query(), streaming)
            .ok_or(Error::Unauthorized)?;
        access
            .limits
            .check(client.0)
            .map_err(|retry_after_secs| Error::RateLimited { retry_after_secs })?;
        let passthrough = &snap.config.passthrough;
        if route.is_none() && !passthrough.enabled {
            return Err(Error::NotFound);
        }
        if !matches!(*request.method(), Method::GET | Method::HEAD) {
            return Err(Error::GET_OR_HEAD);
        }
        let query = request.uri().query();
        let valid = match route.map(|route| crate::api::validate(&route, query)) {
            Some(Ok(valid)) => valid,
            // What the catalogue does not know goes through as it is when
            // `[passthrough]` allows it (never the stream: it is not cached).
            Some(Err(Error::UnknownParameter { .. })) | None
                if passthrough.enabled && !streaming =>
            {
                crate::api::passthrough::target(
                    api_path,
                    query,
                    passthrough.class,
                    passthrough.max_target_bytes,
                )?
            }
            Some(Err(error)) => return Err(error),
            None => return Err(Error::NotFound),
        };
        if valid.endpoint.streaming {
            return self.stream(snap, client.0, &valid, request, connection);
        }
        match self.state.cache().lookup(&snap.policy, &valid).await {
            Ok(answer) => Ok(response::answer(request.headers(), &answer)),
            // The upstream's own answer (a 4xx, or its reported failure when no
            // stale answer could stand in) goes to the client exactly as it came.
            Err(error) => match error.relayed() {
                Ok((status, body)) => Ok(response::relay(status, body)),
                Err(other) => Err(other.to_client_error()),
            },
        }
    }

    /// Opens a quote stream (text/event-stream) from the hub.
    fn stream<B>(
        &self,
        snap: &Snapshot,
        client: usize,
        valid: &Valid,
        request: &Request<B>,
        connection: CancellationToken,
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
            let events = self.hub.subscribe(client, &codes, pz, Some(connection))?;
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
}
