//! mdproxy's core: the proxy between clients and the upstream.
//!
//! # Layout
//! The folders follow the data path, edge → cache → upstream, with the hub beside
//! the cache and the operations around it. The contract (`mdproxy-api`), the
//! configuration (`mdproxy-config`), the fleet (`mdproxy-fleet`) and the market's
//! clocks (`mdproxy-market`) are crates below this one.
//! - [`app`]: starts and stops everything; owns the shutdown token and the tracker.
//! - [`edge`]: HTTP toward clients: accept loop, graceful shutdown, one request,
//!   responses, CORS, auth, client limits, quote streams on the bare socket.
//! - [`hub`]: the live quote stream: one upstream poll (paced by what the upstream
//!   allows) fanned out to subscribers; it knows nothing of HTTP.
//! - [`ops`]: admin listener, status page, metrics, reload, scheduler, reports.
//! - [`state`]: what the edge, the hub and the operations share.
//! - [`cache`]: store and single flight, the read-through decision, freshness.
//! - [`upstream`]: the pooled client, the envelope scan, the circuit breaker and the
//!   budget with priorities.
//! - [`stats`], [`logging`]: counters, rate-limited warnings.
//! - [`telemetry`]: OpenTelemetry traces (the spans of a request and of what it
//!   causes, the W3C trace context in and out, the OTLP export); off by default.
//! - [`shutdown`]: listens for signals.
//!
//! # The request path
//! listener → auth → client limit → router → validation (canonical key; both
//! remembered for hot targets) → cache:
//! fresh → `HIT`; stale → `STALE` and one background refresh; otherwise one
//! single-flight upstream fetch per key through the budget → `MISS` (or a stale
//! answer when the upstream fails).

pub mod app;
pub mod build;
pub mod cache;
pub mod edge;
pub mod hub;
pub mod logging;
pub mod ops;
pub mod shutdown;
pub mod state;
pub mod stats;
pub mod telemetry;
pub mod upstream;
