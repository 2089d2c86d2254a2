//! mdproxy's core: the proxy between clients and the upstream.
//!
//! # Layout
//! The modules from the top down; each uses only modules below it (a test,
//! `tests/it/rooms.rs`, holds this order). The contract (`mdproxy-api`), the
//! configuration (`mdproxy-config`), the fleet (`mdproxy-fleet`) and the market's
//! clocks (`mdproxy-market`) are crates below them all.
//! - [`app`]: starts and stops everything; owns the shutdown token and the
//!   tracker; builds the metrics registry from each subsystem's collectors.
//! - [`ops`]: admin listener, status page, metrics exposition, reload and its log,
//!   scheduler, upstream probe, reports.
//! - [`edge`]: HTTP toward clients: accept loop, graceful shutdown, one request,
//!   responses, CORS, auth, client limits, quote streams on the bare socket,
//!   `/mcp` handed to [`mcp`].
//! - [`mcp`]: MCP for AI agents: the upstream's tools, each call answered by the
//!   read-through as the REST request it stands for.
//! - [`hub`]: the live quote stream: one upstream poll (paced by what the upstream
//!   allows) fanned out to subscribers; it knows nothing of HTTP.
//! - [`state`]: what the edge, the hub and the operations share (the configuration
//!   snapshot, the cache, the upstream, the fleet, the request counters).
//! - [`cache`]: memory store and single flight, the tiers under it (disk, fleet),
//!   the read-through decision, freshness, demand.
//! - [`upstream`]: the instances of the upstream with their clients, envelope scan,
//!   breakers, pause, pace, budget and quotas; its counters and health.
//! - [`logging`]: rate-limited warnings and the log's set-up.
//! - [`telemetry`]: OpenTelemetry traces (the spans of a request and of what it
//!   causes, the W3C trace context in and out, the OTLP export); off by default.
//! - [`stats`]: the edge's request counters, and the histograms and metric writers
//!   every subsystem counts with.
//! - [`build`]: the version and the commit the binary hands over.
//! - [`shutdown`]: listens for signals.
//! - [`workers`]: the serving threads, one single-threaded runtime a core, that
//!   client connections are spread over; which of them the caller runs on.
//! - [`inplace`]: futures made in the box that holds them, not copied into it.
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
pub mod inplace;
pub mod logging;
pub mod mcp;
pub mod ops;
pub mod shutdown;
pub mod state;
pub mod stats;
pub mod telemetry;
pub mod upstream;
pub mod workers;
