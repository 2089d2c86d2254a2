//! mdproxy: a caching read-through proxy for a Chinese market data API.
//!
//! # Layout
//! - [`catalog`]: the 72 endpoints as data; everything else reads it.
//! - [`router`], [`params`]: path matching, validation, the canonical cache key.
//! - [`auth`]: client bearer tokens.
//! - [`cache`], [`freshness`]: the byte-bounded cache, single-flight fills, TTLs.
//! - [`upstream`]: the pooled client toward the real API.
//! - [`proxy`]: one request from headers to response.
//! - [`server`]: listeners, connections, graceful shutdown.
//! - [`sim`]: the simulated upstream used by `demo`, tests and benches.
//! - [`config`], [`error`], [`shutdown`].
//!
//! # The request path
//! listener → auth → router → validation (canonical key) → cache: fresh → `HIT`;
//! otherwise one single-flight upstream fetch per key → `MISS`.

pub mod admin;
pub mod auth;
pub mod body;
pub mod cache;
pub mod catalog;
pub mod config;
pub mod demo;
pub mod error;
pub mod freshness;
pub mod hub;
pub mod limit;
pub mod metrics;
pub mod params;
pub mod proxy;
pub mod reload;
pub mod report;
pub mod router;
pub mod scheduler;
pub mod server;
pub mod session;
pub mod shutdown;
pub mod sim;
pub mod upstream;
