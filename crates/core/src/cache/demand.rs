//! Which endpoints clients ask the cache for: the second each was last answered
//! from the cache path. Demand-driven prewarm jobs read it, so a job refreshes only
//! what somebody still reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mdproxy_api::catalog::catalog;

/// When each endpoint was last asked for.
#[derive(Debug)]
pub struct Demand {
    /// `last_asked[endpoint id]`: seconds since `epoch`, plus one (0: never).
    last_asked: Vec<AtomicU64>,
    epoch: Instant,
}

impl Default for Demand {
    fn default() -> Self {
        let endpoints = catalog().with_passthrough().count();
        Demand {
            last_asked: (0..endpoints).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
        }
    }
}

impl Demand {
    /// Marks `endpoint_id` as asked for by a request that arrived `at`.
    pub fn asked(&self, endpoint_id: usize, at: Instant) {
        // +1 so that "asked in the first second" differs from "never asked".
        let now = at.saturating_duration_since(self.epoch).as_secs() + 1;
        let last = &self.last_asked[endpoint_id];
        // A hot endpoint writes once a second, not once a request.
        if last.load(Ordering::Relaxed) != now {
            last.store(now, Ordering::Relaxed);
        }
    }

    /// Whether a client asked for `endpoint_id` within `window`.
    pub fn asked_within(&self, endpoint_id: usize, window: Duration) -> bool {
        let last = self.last_asked[endpoint_id].load(Ordering::Relaxed);
        last > 0 && self.epoch.elapsed().as_secs() + 1 - last <= window.as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_is_remembered_per_endpoint() {
        let demand = Demand::default();
        let window = Duration::from_secs(300);
        assert!(!demand.asked_within(3, window));
        demand.asked(3, Instant::now());
        assert!(demand.asked_within(3, window));
        assert!(!demand.asked_within(4, window));
    }
}
