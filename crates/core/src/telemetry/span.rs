//! The spans, each made where its work is and only while traces are on (else
//! [`Span::none`], after one load): the request (a server span continuing the
//! client's `traceparent`), the cache fill, a coalesced wait linked to the fill it
//! waited on, the budget wait, the upstream fetch (a client span whose context goes
//! upstream as `traceparent`), the cluster lookup, and an MCP tool call or
//! resource read (a child of its request's span, whose fills are its own). Attributes follow
//! OpenTelemetry's HTTP conventions, plus `mdproxy.*`; never a client key or a
//! query as sent.

use http::{HeaderMap, HeaderValue, Response};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::switch::{TARGET, is_on};

/// A span to link to (the fill a coalesced request waited on); empty while traces
/// are off. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Link(Option<SpanContext>);

/// The span of one client request, a child of the client's trace when it sent a
/// valid `traceparent` (W3C Trace Context, later versions too: see
/// [`crate::telemetry::context::Traceparent::parse`]); `None` while traces are off.
/// Its name becomes `GET /api/v1/<route>` once routed ([`record_response`]).
pub fn request_span(method: &http::Method, path: &str, headers: &HeaderMap) -> Option<Span> {
    if !is_on() {
        return None;
    }
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = method.as_str(),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method.as_str(),
        url.path = path,
        http.route = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        mdproxy.cache = Empty,
        mdproxy.cache_status = Empty,
        mdproxy.cache_key = Empty,
        mdproxy.request_id = Empty,
    );
    let valid = headers
        .get(crate::telemetry::context::TRACEPARENT)
        .is_some_and(|v| crate::telemetry::context::Traceparent::parse(v.as_bytes()).is_some());
    if valid {
        // The crate's propagator reads the fields (and `tracestate`); the strict
        // parse above keeps out what it would let through (short fields, `ff`).
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
        let _ = span.set_parent(parent);
    }
    Some(span)
}

/// Records on the request span what was answered: the route template (the span's
/// name), the status, the cache outcome (`X-Cache`) and its `Cache-Status`, the
/// cache key, the request ID, and for a 5xx the error (`code`, the contract's).
pub fn record_response<B>(
    span: &Span,
    method: &http::Method,
    route: Option<&str>,
    key: Option<&str>,
    code: Option<&str>,
    response: &Response<B>,
) {
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok());
    if let Some(route) = route {
        let route = format!("{}{route}", mdproxy_api::router::API_PREFIX);
        // By the span itself: a span already started (it has children) takes a new
        // name only this way.
        span.context()
            .span()
            .update_name(format!("{method} {route}"));
        span.record("http.route", route);
    }
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    if let Some(cache) = header("x-cache") {
        span.record("mdproxy.cache", cache);
    }
    if let Some(detail) = header("cache-status") {
        span.record("mdproxy.cache_status", detail);
    }
    if let Some(key) = key {
        span.record("mdproxy.cache_key", key);
    }
    if let Some(id) = header(crate::telemetry::context::X_REQUEST_ID.as_str()) {
        span.record("mdproxy.request_id", id);
    }
    // A server span is an error only for a 5xx (OpenTelemetry's HTTP conventions).
    if status >= 500 {
        span.record("error.type", code.unwrap_or("upstream"));
        span.record("otel.status_code", "ERROR");
    }
}

/// The span of a cache fill (the single flight's work: the cluster lookup and the
/// upstream fetch happen in it) and the link its waiters add to theirs.
pub fn fill_span(key: &str) -> (Span, Link) {
    if !is_on() {
        return (Span::none(), Link::default());
    }
    let span = tracing::info_span!(target: TARGET, "cache.fill", mdproxy.cache_key = key);
    let context = span.context().span().span_context().clone();
    (span, Link(Some(context)))
}

/// The span of a request's wait on another request's fill of the same key, linked
/// to that fill's span.
pub fn wait_span(fill: &Link) -> Span {
    if !is_on() {
        return Span::none();
    }
    let span = tracing::info_span!(target: TARGET, "cache.coalesced_wait");
    if let Some(context) = &fill.0 {
        span.add_link(context.clone());
    }
    span
}

/// The span of a wait for the upstream budget (`priority`: client, background,
/// prewarm).
pub fn budget_span(priority: &'static str) -> Span {
    if !is_on() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, "upstream.budget_wait", mdproxy.priority = priority)
}

/// The client span of one upstream request: `GET <url>`, its outcome recorded by
/// [`record_error`]. Its context goes upstream ([`outgoing`]).
pub fn upstream_span(base: &str, target: &str) -> Span {
    if !is_on() {
        return Span::none();
    }
    // The canonical target: no client key ever; the base without credentials.
    let url = format!("{}{target}", mdproxy_config::redacted_url(base));
    tracing::info_span!(
        target: TARGET,
        "upstream.fetch",
        otel.name = "GET",
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = "GET",
        url.full = url,
        error.type = Empty,
    )
}

/// Marks `span` failed with `error` (the upstream fetch error's
/// label); nothing for `None`.
pub fn record_error(span: &Span, error: Option<&'static str>) {
    if let Some(error) = error {
        span.record("error.type", error);
        span.record("otel.status_code", "ERROR");
    }
}

/// The span of one MCP operation (`method`: `tools/call` of tool `name`, or
/// `resources/read`), a child of `request` (the HTTP request's span: rmcp answers
/// in a task of its own); its outcome recorded as `mdproxy.outcome`.
pub fn mcp_span(request: Option<&Span>, method: &'static str, name: &str) -> Span {
    if !is_on() {
        return Span::none();
    }
    let parent = request.and_then(Span::id);
    let otel_name = if name.is_empty() {
        method.to_owned()
    } else {
        format!("{method} {name}")
    };
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "mcp",
        otel.name = otel_name,
        mcp.method.name = method,
        gen_ai.tool.name = name,
        mdproxy.outcome = Empty,
    )
}

/// The span of a look in the cluster's shared store before a fill.
pub fn cluster_span() -> Span {
    if !is_on() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, "cluster.lookup")
}

/// The trace context of the current span as headers for an upstream request
/// (`traceparent`, and `tracestate` when it has one); `None` while traces are off.
pub fn outgoing() -> Option<HeaderMap> {
    if !is_on() {
        return None;
    }
    let context = Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut headers = HeaderMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(&mut headers));
    if headers
        .get("tracestate")
        .is_some_and(|v| v.as_bytes().is_empty())
    {
        headers.remove("tracestate");
    }
    Some(headers)
}

/// The trace ID of `span` as hex (for the access log), when it has one.
pub fn trace_id(span: &Span) -> Option<HeaderValue> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| HeaderValue::from_str(&span_context.trace_id().to_string()).ok())
        .flatten()
}
