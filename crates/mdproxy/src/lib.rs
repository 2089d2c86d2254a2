//! The `mdproxy` binary's library: the command line ([`cli`]) and the demo set-up
//! ([`demo`]: the simulator and the proxy in one process). The proxy itself is
//! `mdproxy-core`; the simulated upstream `mdproxy-sim`. This crate is the only one
//! that knows the git commit it was built from.

pub mod cli;
pub mod demo;

/// The version the binary was built as.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit it was built from (`unknown` outside a checkout).
pub const GIT_COMMIT: &str = env!("BUILD_GIT_COMMIT");
