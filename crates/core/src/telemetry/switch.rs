//! Whether traces are on (one flag, read wherever a span would start) and the
//! `tracing` target every span of ours is made under.

use std::sync::atomic::{AtomicBool, Ordering};

/// The `tracing` target of every span made here: the log leaves them out, and the
/// exporter takes only them.
pub const TARGET: &str = "mdproxy::trace";

/// Whether spans are made (a [`super::Telemetry`] was started).
pub(super) static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are on: spans are made and exported.
pub fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}
