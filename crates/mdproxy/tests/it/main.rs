//! The end-to-end tests of mdproxy: the simulator and the proxy (in process, or the
//! binary itself) on loopback ports, one module per feature, sharing `support`.
//! One test binary: one link for every test of the product.

mod support;

mod admin;
mod bare;
mod cache;
mod cli;
mod cluster;
mod cluster_ha;
mod cluster_redis;
mod contract;
mod deploy;
mod deps;
mod disk;
mod disk_faults;
mod dropin;
mod fuzz;
mod h2;
mod hardening;
mod hub;
mod hub_paused;
mod logs;
mod mcp;
mod openapi;
mod protection;
mod proxy;
mod readme;
mod reload;
mod rooms;
mod settings;
mod shapes;
mod shutdown;
mod status_page;
mod telemetry;
mod today;
