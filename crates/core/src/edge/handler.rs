//! One client request, from headers to response: request ID, CORS preflight, auth,
//! the client's rate limit, route and validation (or pass-through), then the quote
//! stream or the read-through cache; then its counts and its access-log line.
//! Errors become the JSON envelope in exactly one place, `Edge::respond`. A hot
//! hit is answered before the service call returns; only a lookup that waits is a
//! future.

use std::convert::Infallible;
use std::future::{Future, Ready};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use futures_util::future::{BoxFuture, Either};
use http::{HeaderValue, Method, Request, Response, header};
use tracing::Instrument;

use crate::cache::readthrough::{Answer, ClientFill, FillTask, Waiting};
use crate::cache::store::Cache;
use crate::edge::access_log::{AccessLine, access_enabled, access_line};
use crate::edge::auth::Tokens;
use crate::edge::body::{self, Body};
use crate::edge::cors::Cors;
use crate::edge::head::Head;
use crate::edge::limit::ClientLimits;
use crate::edge::memo::Remember;
use crate::edge::response::{self, IntoResponse};
use crate::edge::server::Connection;
use crate::edge::{reset, sse};
use crate::hub::{QuoteHub, Subscription};
use crate::state::{AppState, Snapshot};
use crate::stats::{CacheStatus, Outcome};
use crate::telemetry::context::{TRACEPARENT, Traceparent, X_REQUEST_ID};
use crate::upstream::budget::RateClock;
use crate::upstream::client::FetchError;
use mdproxy_api::catalog::Endpoint;
use mdproxy_api::error::Error;
use mdproxy_api::params::Valid;
use mdproxy_api::router::API_PREFIX;
use mdproxy_config::{Config, ErrorMode};

/// What the edge builds from a configuration: who may call, how often, and from
/// which browser origins. Swapped whole on reload; the rate buckets of unchanged
/// clients are carried over.
pub(super) struct Access {
    pub(super) tokens: Tokens,
    /// Each token's client name (`token0`... or `auth.clients` names), for logs.
    names: Vec<String>,
    limits: ClientLimits,
    cors: Cors,
    /// `log.access`.
    access_log: bool,
    /// `server.error_mode`.
    error_mode: ErrorMode,
}

impl Access {
    fn new(config: &Config, clock: &RateClock, previous: Option<&Access>) -> Access {
        let clients = config.clients();
        Access {
            tokens: Tokens::new(clients.iter().map(|c| c.token.clone()).collect()),
            names: clients.iter().map(|c| c.name.clone()).collect(),
            access_log: config.log.access,
            error_mode: config.server.error_mode,
            limits: ClientLimits::new(&clients, &config.limits, clock, previous.map(|p| &p.limits)),
            cors: Cors::new(&config.server.cors_origins),
        }
    }
}

impl Access {
    /// The client's key (any of its forms; a stream's may be in its query) and its
    /// rate limit: the client's index, also noted in `trail`.
    pub(super) fn admit(
        &self,
        head: &Head<'_>,
        query: Option<&str>,
        streaming: bool,
        trail: &mut Trail,
    ) -> Result<usize, Error> {
        let client = self
            .tokens
            .check(head, query, streaming)
            .ok_or(Error::UNAUTHORIZED)?;
        trail.client = Some(client.0);
        self.limits
            .check(client.0)
            .map_err(|retry_after_secs| Error::RateLimited { retry_after_secs })?;
        Ok(client.0)
    }
}

/// What [`Edge::serve`] learnt about a request, for its counts and its log line.
#[derive(Default)]
pub(super) struct Trail {
    endpoint: Option<&'static Endpoint>,
    /// The canonical cache key.
    key: Option<String>,
    /// Index of the client's token (its name is in [`Access::names`]).
    client: Option<usize>,
    /// The response is the upstream's own answer, relayed.
    relayed: bool,
    /// The response is the MCP endpoint's own: a 4xx of its is no upstream answer.
    pub(super) mcp: bool,
    /// The `X-Cache` of an answer from the cache path.
    cache: Option<CacheStatus>,
    /// The request's span, while traces are on.
    pub(super) span: Option<tracing::Span>,
}

/// A request as it came: itself, what one pass over its headers found, and the
/// connection it came on.
pub(super) struct Asked<'a, B> {
    pub(super) request: &'a Request<B>,
    pub(super) head: &'a Head<'a>,
    pub(super) connection: &'a Connection,
}

/// A request's response, as hyper's service call returns it: ready at once (a hit
/// on a key the hot set holds, every error, a stream's opening), or a boxed future
/// for a lookup that must wait (moka's read, a fill).
pub type Handled = Either<
    Ready<Result<Response<Body>, Infallible>>,
    BoxFuture<'static, Result<Response<Body>, Infallible>>,
>;

/// How far [`Edge::serve`] took a request.
enum Step {
    /// It is answered (a preflight, the OpenAPI document, a stream).
    Answered(Response<Body>),
    /// The cache answers it; `Remember::Yes` when its validation is not in the
    /// memo yet (and it is no pass-through).
    Lookup(Valid, Remember),
}

/// A request whose lookup must wait, with what its response needs afterwards.
struct Later<B> {
    edge: Arc<Edge>,
    request: Request<B>,
    connection: Arc<Connection>,
    started: Instant,
    request_id: HeaderValue,
    trail: Trail,
    valid: Valid,
    remember: Remember,
    waiting: Waiting,
    snap: Arc<Snapshot>,
    access: Arc<Access>,
}

impl<B> Later<B> {
    /// Waits for the lookup (moka's read, a fill, with the request's ID and trace
    /// for the upstream), then responds as [`Edge::handle`] does.
    ///
    /// Not an `async fn`: that would keep `self` twice in its future (the argument
    /// and the local it is moved to). Not inlined, so that its future is made in
    /// the box the caller allocated for it ([`crate::inplace::boxed`]).
    #[inline(never)]
    #[allow(clippy::manual_async_fn, reason = "an async fn keeps `self` twice")]
    fn finish(mut self) -> impl Future<Output = Result<Response<Body>, Infallible>> {
        async move {
            // The fields are used where they are, not taken apart into locals: those
            // would be a second copy of them in this future, which is moved whole.
            let (request, request_id) = (&self.request, &self.request_id);
            let client = || ClientFill {
                context: crate::telemetry::context::Context {
                    request_id: Some(request_id.clone()),
                    trace: traceparent(request.headers()),
                },
                // An HTTP/2 connection's streams share its task: their fills go to
                // tasks of their own (`FillTask`).
                task: if request.version() == http::Version::HTTP_2 {
                    FillTask::Own
                } else {
                    FillTask::Starters
                },
            };
            let head = Head::read(request.headers());
            let cache = self.edge.state.cache();
            // The coding this client takes, told before a fill starts: the fill this
            // request starts makes it (and background fills make what was asked lately).
            let asked = head
                .accept_encoding
                .then(|| crate::edge::negotiate::choose(head.map))
                .flatten();
            if let Some(coding) = asked {
                cache.store().compressor().note(coding);
            }
            let answer = cache
                .lookup_later(&self.snap.policy, &self.valid, self.waiting, asked, client)
                .await;
            let valid = self.valid;
            let from = answer.as_ref().ok().map(|a| a.served);
            self.remember.after(request, &valid, from);
            let served = cached(&head, answer, valid, &mut self.trail, cache.store());
            let asked = Asked {
                request,
                head: &head,
                connection: &self.connection,
            };
            let (started, request_id, trail) = (self.started, self.request_id, self.trail);
            Ok(self
                .edge
                .respond(&self.access, &asked, started, request_id, trail, served))
        }
    }
}

/// The response for the cache's answer to `valid`: the cached answer, or the
/// upstream's own answer relayed as it came, or an error. The coding the client
/// prefers is told to the store's compressor (fills make it from then on); when the
/// entry does not have it yet, the identity body goes now and the store makes it
/// in the background: no request waits for a compressor.
fn cached(
    head: &Head<'_>,
    answer: Result<Answer, FetchError>,
    valid: Valid,
    trail: &mut Trail,
    store: &Cache,
) -> Result<Response<Body>, Error> {
    let answer = match answer {
        Ok(answer) => answer,
        // The upstream's own answer (a 4xx, or its reported failure when no stale
        // answer could stand in) goes to the client exactly as it came.
        Err(error) => {
            trail.key = Some(valid.target);
            return match error.relayed() {
                Ok((status, body)) => {
                    trail.relayed = true;
                    Ok(response::relay(status, body))
                }
                Err(other) => Err(other.to_client_error()),
            };
        }
    };
    let coding = response::preferred(head, &answer.entry);
    if let Some(coding) = coding {
        store.compressor().note(coding);
        // The fill made this client a quick copy; the copy at the chosen level is
        // made when the answer is asked for again (`cache::compress`). Nor is it
        // made for a stale answer with a quick copy while a fill of its key is
        // under way: the fill's entry replaces it (a refresh makes the codings
        // asked for lately); until it does, the quick copy serves.
        let quick_will_do = answer.entry.has_quick(coding)
            && (answer.served.filled() || answer.served.refreshing());
        if answer.entry.encoded_now(coding).is_none() && !quick_will_do {
            store.make_soon(&valid.target, &answer.entry, coding);
        }
    }
    trail.key = Some(valid.target);
    trail.cache = Some(answer.served.x_cache());
    Ok(response::answer(head, &answer, coding))
}

/// The longest `X-Request-Id` taken from a client; a longer or odd one is replaced.
const MAX_REQUEST_ID: usize = 128;

/// The client's `X-Request-Id` when it is a sane token (visible ASCII, at most
/// [`MAX_REQUEST_ID`] bytes), else a new random one (16 hex digits). The client's
/// is copied, not shared: a shared value would hold hyper's read buffer while the
/// response is written, and hyper would read the next request into a new one.
pub(super) fn request_id(sent: Option<&HeaderValue>) -> HeaderValue {
    if let Some(id) = sent {
        let bytes = id.as_bytes();
        if !bytes.is_empty()
            && bytes.len() <= MAX_REQUEST_ID
            && bytes.iter().all(u8::is_ascii_graphic)
            && let Ok(copy) = HeaderValue::from_bytes(bytes)
        {
            return copy;
        }
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = fastrand::u64(..);
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = HEX[((n >> (60 - 4 * i)) & 0xf) as usize];
    }
    HeaderValue::from_bytes(&id).expect("hex digits are a valid header value")
}

/// The client's trace, when it sent a valid `traceparent`.
fn traceparent(headers: &http::HeaderMap) -> Option<Traceparent> {
    headers
        .get(TRACEPARENT)
        .and_then(|v| Traceparent::parse(v.as_bytes()))
}

/// The client-facing service.
pub struct Edge {
    state: AppState,
    hub: QuoteHub,
    pub(super) access: ArcSwap<Access>,
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
    /// closes the open streams of the tokens it revokes. Returns those tokens'
    /// identities ([`Tokens::stable`](super::auth::Tokens::stable)).
    pub fn reconfigure(&self, config: &Config) -> Vec<usize> {
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
        revoked
    }

    /// Serves one request; never fails (errors become envelope responses). Counts
    /// it (status class, error code, latency by endpoint and cache outcome) and
    /// writes its access-log line.
    ///
    /// Whatever can be answered at once is answered before this returns, so the
    /// request is let go inside hyper's service call, as a bare server's is: hyper
    /// then reads the next request into the same buffer rather than a new 8 KiB one
    /// (see `Builders` in `server.rs`). Only a lookup that must wait (moka's read, a
    /// fill) becomes a boxed future.
    pub fn handle<B>(self: &Arc<Self>, request: Request<B>, connection: Arc<Connection>) -> Handled
    where
        B: Send + Sync + 'static,
    {
        let started = Instant::now();
        // Borrowed snapshots: no reference count bounced between cores per request.
        let snap = self.state.load();
        let access = self.access.load();
        let head = Head::read(request.headers());
        let request_id = request_id(head.request_id);
        let mut trail = Trail {
            span: crate::telemetry::request_span(
                request.method(),
                request.uri().path(),
                request.headers(),
            ),
            ..Trail::default()
        };
        let asked = Asked {
            request: &request,
            head: &head,
            connection: &connection,
        };
        let served = match self.serve(&snap, &access, &asked, &mut trail) {
            Ok(Step::Answered(response)) => Ok(response),
            Ok(Step::Lookup(valid, remember)) => {
                match self.state.cache().lookup_now(&snap.policy, &valid) {
                    Ok(answer) => {
                        remember.after(&request, &valid, Some(answer.served));
                        cached(
                            &head,
                            Ok(answer),
                            valid,
                            &mut trail,
                            self.state.cache().store(),
                        )
                    }
                    Err(waiting) => {
                        // The lookup runs in the request's span: the fill's and the
                        // wait's spans are its children.
                        let span = trail.span.clone();
                        let later = Later {
                            edge: Arc::clone(self),
                            request,
                            connection,
                            started,
                            request_id,
                            trail,
                            valid,
                            remember,
                            waiting,
                            snap: arc_swap::Guard::into_inner(snap),
                            access: arc_swap::Guard::into_inner(access),
                        };
                        return Either::Right(match span {
                            Some(span) => Box::pin(later.finish().instrument(span)),
                            None => crate::inplace::boxed(|| later.finish()),
                        });
                    }
                }
            }
            Err(error) => Err(error),
        };
        let response = self.respond(&access, &asked, started, request_id, trail, served);
        Either::Left(std::future::ready(Ok(response)))
    }

    /// The response to `asked` from what serving it gave: errors in the envelope,
    /// CORS and the request ID added; counted, and logged.
    pub(super) fn respond<B>(
        &self,
        access: &Access,
        asked: &Asked<'_, B>,
        started: Instant,
        request_id: HeaderValue,
        trail: Trail,
        served: Result<Response<Body>, Error>,
    ) -> Response<Body> {
        let Asked {
            request,
            head,
            connection,
        } = *asked;
        let (mut response, code) = match served {
            // An error status that mdproxy did not make is the upstream's answer
            // (relayed, or a cached "not found").
            Ok(response) => {
                let upstream = trail.relayed || (!trail.mcp && response.status().as_u16() >= 400);
                (response, upstream.then_some("upstream"))
            }
            Err(error) => {
                if error.status().is_server_error() {
                    self.state.requests().errored();
                }
                let code = error.code();
                let response = match access.error_mode {
                    ErrorMode::Upstream if error.is_on_upstreams_behalf() => {
                        let message = trail.endpoint.map_or(
                            mdproxy_api::catalog::catalog()
                                .passthrough()
                                .failure_message,
                            |e| e.failure_message,
                        );
                        response::upstream_style(&error, message)
                    }
                    _ => error.to_response(),
                };
                (response, Some(code))
            }
        };
        access.cors.apply(head.origin, response.headers_mut());
        response::write_request_id(response.headers_mut(), request_id);
        let elapsed = started.elapsed();
        let cache = trail.cache;
        self.state.requests().responded(
            response.status().as_u16(),
            code,
            trail.endpoint.map(|e| e.id),
            cache.map_or(Outcome::None, Outcome::Cache),
            elapsed,
        );
        // An answer from the cache path marks its endpoint as asked for.
        if let (Some(endpoint), Some(_)) = (trail.endpoint, cache) {
            self.state.cache().demand().asked(endpoint.id, started);
        }
        if let Some(span) = &trail.span {
            crate::telemetry::record_response(
                span,
                request.method(),
                trail.endpoint.map(|e| e.path.as_str()),
                trail.key.as_deref(),
                code,
                &response,
            );
        }
        let status = response.status().as_u16();
        // The line's fields (a header parsed, another checked) are gathered only when
        // it will be written.
        if access.access_log && access_enabled(status) {
            let bytes = hyper::body::Body::size_hint(response.body()).exact();
            let client = trail.client.and_then(|i| access.names.get(i));
            // The trace the request's span belongs to, else the client's own.
            let traced = trail.span.as_ref().and_then(crate::telemetry::trace_id);
            let incoming = traceparent(request.headers());
            access_line(&AccessLine {
                method: request.method().as_str(),
                path: request.uri().path(),
                endpoint: trail.endpoint.map_or("-", |e| e.path.as_str()),
                key: trail.key.as_deref().unwrap_or("-"),
                status,
                code: code.unwrap_or("-"),
                cache: cache.map_or("-", CacheStatus::as_str),
                bytes,
                micros: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
                client: client.map_or("-", String::as_str),
                peer: connection.peer,
                request_id: response
                    .headers()
                    .get(X_REQUEST_ID)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-"),
                trace_id: match (&traced, &incoming) {
                    (Some(id), _) => id.to_str().unwrap_or("-"),
                    (None, Some(t)) => t.trace_id(),
                    (None, None) => "-",
                },
            });
        }
        response
    }

    /// Everything up to the cache: Host, the API prefix, a CORS preflight, the
    /// OpenAPI document, the route (or the memo of a hot target), auth, the client's
    /// rate limit, the method, validation (or pass-through), and a stream's opening.
    fn serve<B>(
        &self,
        snap: &Snapshot,
        access: &Access,
        asked: &Asked<'_, B>,
        trail: &mut Trail,
    ) -> Result<Step, Error> {
        let Asked { request, head, .. } = *asked;
        // RFC 9112 §3.2: a server must answer 400 to an HTTP/1.1 request without Host.
        if request.version() == http::Version::HTTP_11 && !head.host {
            return Err(Error::BadRequest {
                reason: "an HTTP/1.1 request needs a Host header".into(),
            });
        }
        let api_path = request
            .uri()
            .path()
            .strip_prefix(API_PREFIX)
            .ok_or(Error::NOT_FOUND)?;
        if Cors::is_preflight(request.method(), request.headers()) {
            return Ok(Step::Answered(access.cors.preflight(request.headers())));
        }
        // Public, like the upstream's own docs: before authentication.
        if api_path == mdproxy_api::openapi::DOCUMENT_PATH {
            return response::document(request.method(), request.headers()).map(Step::Answered);
        }
        let query = request.uri().query();
        // A hot target was routed and validated before: its answer is remembered.
        let remembered = mdproxy_api::memo::get(api_path, query);
        let route = match remembered {
            Some(_) => None,
            None => mdproxy_api::router().route(api_path),
        };
        let endpoint = match (&remembered, &route) {
            (Some(valid), _) => Some(valid.endpoint),
            (None, route) => route.as_ref().map(|r| r.endpoint),
        };
        trail.endpoint = endpoint;
        let streaming = endpoint.is_some_and(|e| e.streaming);
        let client = access.admit(head, query, streaming, trail)?;
        if let Some((_, reason)) = mdproxy_api::catalog::REFUSED
            .iter()
            .find(|(path, _)| *path == api_path)
        {
            return Err(Error::NotImplemented { reason });
        }
        let passthrough = &snap.config.passthrough;
        if endpoint.is_none() && !passthrough.enabled {
            return Err(Error::NotFound {
                nearest: mdproxy_api::nearest_path(api_path),
            });
        }
        if !matches!(*request.method(), Method::GET | Method::HEAD) {
            return Err(Error::GET_OR_HEAD);
        }
        let (valid, remember) = match remembered {
            Some(valid) => (valid, Remember::No),
            None => match route.map(|route| mdproxy_api::validate(&route, query)) {
                Some(Ok(valid)) => (valid, Remember::Yes),
                // What the catalogue does not know goes through as it is when
                // `[passthrough]` allows it (never the stream: it is not cached).
                Some(Err(Error::UnknownParameter { .. })) | None
                    if passthrough.enabled && !streaming =>
                {
                    let valid = mdproxy_api::passthrough::target(
                        api_path,
                        query,
                        passthrough.class,
                        passthrough.max_target_bytes,
                    )?;
                    (valid, Remember::No)
                }
                Some(Err(error)) => return Err(error),
                None => return Err(Error::NOT_FOUND),
            },
        };
        trail.endpoint = Some(valid.endpoint);
        if valid.endpoint.streaming {
            // Filed in the hub by the token's identity, which a reload keeps.
            let token = access.tokens.stable(client);
            return self.stream(snap, token, &valid, asked).map(Step::Answered);
        }
        Ok(Step::Lookup(valid, remember))
    }

    /// Opens a quote stream (text/event-stream) from the hub.
    fn stream<B>(
        &self,
        snap: &Snapshot,
        token: usize,
        valid: &Valid,
        asked: &Asked<'_, B>,
    ) -> Result<Response<Body>, Error> {
        let Asked {
            request,
            connection,
            ..
        } = *asked;
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
            let outlet = connection.outlet.clone();
            let chunked = outlet.is_some();
            // An EventSource that reconnects sends the last id it saw.
            let last_event_id = request
                .headers()
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let (hangup, bind) = reset::per_stream(connection.close.clone(), request.version());
            let events = self.hub.subscribe(Subscription {
                token,
                codes: &codes,
                pz,
                last_event_id,
                connection: Some(hangup),
                outlet,
            })?;
            let mut response = Response::new(body::stream(bind.bind(events)));
            if chunked {
                response.extensions_mut().insert(sse::Chunked);
            }
            response
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
