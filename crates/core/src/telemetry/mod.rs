//! OpenTelemetry traces: the spans of a request and of the work it causes (the
//! cache fill, a coalesced wait, the budget wait, the upstream fetch, the cluster
//! lookup), the W3C trace context in and out, and their export over OTLP. Off unless
//! an endpoint is configured; off, each place a span would start costs one load.
//!
//! - `settings`: `[telemetry]` and the `OTEL_*` variables, resolved and checked.
//! - `export`: the tracer provider, the OTLP exporter, the `tracing` layer.
//! - `span`: the spans, each made where its work is, and the trace context.
//! - `switch`: whether traces are on, and the `tracing` target of their spans.
//! - `context`: the request ID and `traceparent` a client request hands on to the
//!   upstream requests it causes (kept whether traces are on or off).

pub mod context;
mod export;
mod settings;
mod span;
mod switch;

pub use export::{Telemetry, TelemetryError};
pub use settings::{Settings, check};
pub use span::{
    Link, budget_span, cluster_span, fill_span, mcp_span, outgoing, record_error, record_response,
    request_span, trace_id, upstream_span, wait_span,
};
pub use switch::{TARGET, is_on};
