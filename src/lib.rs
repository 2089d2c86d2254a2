//! mdproxy: a caching read-through proxy for a Chinese market data API.
//!
//! # Layout
//! The folders follow the data path, edge → routing → cache → upstream, with the hub
//! beside the cache and the operations around it. Arrows point down only.
//! - [`app`]: starts and stops everything; owns the shutdown token and the tracker.
//! - [`edge`]: HTTP toward clients: accept loop, graceful shutdown, one request,
//!   responses, CORS, auth, client limits, quote streams on the bare socket.
//! - [`hub`]: the live quote stream: one upstream poll (paced by what the upstream
//!   allows) fanned out to subscribers; it knows nothing of HTTP.
//! - [`ops`]: admin listener, status page, metrics, reload, scheduler, reports.
//! - [`state`]: what the edge, the hub and the operations share.
//! - [`cache`]: store and single flight, the read-through decision, freshness.
//! - [`market`]: the market clocks (sessions, holidays, venues) and the injectable
//!   wall clock; below everything that reads the time.
//! - [`cluster`]: several nodes as one cache, on Redis (shared store, fill lock,
//!   purges, budget, the upstream's pushback, job claims, hub leadership), seen by
//!   the rest through narrow traits whose single-node versions are the defaults;
//!   below the cache, beside the upstream.
//! - [`upstream`]: the pooled client, the envelope scan, the circuit breaker and the
//!   budget with priorities.
//! - [`api`]: the catalogue of the documented endpoints, the router, validation, pass-through
//!   and the OpenAPI document generated from the catalogue.
//! - [`config`], [`stats`], [`error`], [`logging`]: configuration, counters, the
//!   contract's errors, rate-limited warnings.
//! - [`telemetry`]: OpenTelemetry traces (the spans of a request and of what it
//!   causes, the W3C trace context in and out, the OTLP export); off by default.
//! - [`sim`]: the simulated upstream (the other side of the wire), [`demo`] wires it
//!   to a proxy; [`shutdown`] listens for signals.
//!
//! # The request path
//! listener → auth → client limit → router → validation (canonical key; both
//! remembered for hot targets) → cache:
//! fresh → `HIT`; stale → `STALE` and one background refresh; otherwise one
//! single-flight upstream fetch per key through the budget → `MISS` (or a stale
//! answer when the upstream fails).

/// The version the binary was built as.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit it was built from (`unknown` outside a checkout).
pub const GIT_COMMIT: &str = env!("BUILD_GIT_COMMIT");

pub mod api;
pub mod app;
pub mod cache;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod edge;
pub mod error;
pub mod hub;
pub mod logging;
pub mod market;
pub mod ops;
pub mod shutdown;
pub mod sim;
pub mod slots;
pub mod state;
pub mod stats;
pub mod telemetry;
pub mod upstream;
