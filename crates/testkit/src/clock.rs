//! Clocks for tests: an instant when the market is closed all day, and a manual
//! clock that ticks like the simulator's quote snapshots.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mdproxy_market::ManualClock;

/// Saturday 7 March 2026, 12:00 China time: the market is closed all day, so what a
/// test caches stays fresh whatever the real date is.
pub const SATURDAY_NOON: &str = "2026-03-07T04:00:00Z";

/// A clock standing still on a Saturday ([`SATURDAY_NOON`]).
pub fn saturday() -> Arc<ManualClock> {
    clock_at(SATURDAY_NOON)
}

/// A clock standing at `rfc3339`.
pub fn clock_at(rfc3339: &str) -> Arc<ManualClock> {
    ManualClock::new(
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc),
    )
}

/// Moves `clock` forward by one simulated 3 s snapshot every `every` (real time), so
/// simulated quotes change; at most `steps` times. Stops when the handle drops.
pub fn tick_clock(
    clock: Arc<ManualClock>,
    every: Duration,
    steps: u32,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for _ in 0..steps {
            tokio::time::sleep(every).await;
            clock.advance(Duration::from_secs(3));
        }
    })
}
