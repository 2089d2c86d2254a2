//! Every counter mdproxy keeps, in one structure that lives as long as the process:
//! a reload never touches it, so no Prometheus counter goes backwards. Plain atomics
//! indexed by endpoint and by enum (no labels to hash, no lock on a hit); `ops::metrics`
//! exposes them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::api::catalog::catalog;

/// The `X-Cache` values belong to the contract (`api`); counted here.
pub use crate::api::CacheStatus;

/// What became of one upstream request (or of the wish to make one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamOutcome {
    /// A 2xx `"success": true` answer.
    Ok,
    /// A 404, cached briefly as a negative answer.
    NotFound,
    /// No answer within the timeout.
    Timeout,
    /// Connection refused, reset, DNS failure.
    Unreachable,
    /// 5xx, a 3xx (never followed), or 401/403/429 aimed at the proxy's own
    /// credentials or rate.
    Failed,
    /// A 2xx whose body is not the envelope.
    InvalidBody,
    /// An answer larger than `upstream.max_body_bytes` (not read past the limit).
    TooLarge,
    /// A 200 with `"success": false`: the upstream reports its own failure (its
    /// source timed out, "socket hang up"). Never cached; stale-if-error applies.
    Reported,
    /// An answer relayed to the client as it is (a 4xx other than 404).
    Answer,
    /// Not asked: the circuit breaker was open.
    CircuitOpen,
    /// A client waited `limits.client_wait_ms` and the budget stayed short.
    Overloaded,
    /// Background work found no budget and was dropped.
    Dropped,
}

impl UpstreamOutcome {
    /// Every outcome, in counter order.
    pub const ALL: [UpstreamOutcome; 12] = [
        UpstreamOutcome::Ok,
        UpstreamOutcome::NotFound,
        UpstreamOutcome::Timeout,
        UpstreamOutcome::Unreachable,
        UpstreamOutcome::Failed,
        UpstreamOutcome::InvalidBody,
        UpstreamOutcome::TooLarge,
        UpstreamOutcome::Reported,
        UpstreamOutcome::Answer,
        UpstreamOutcome::CircuitOpen,
        UpstreamOutcome::Overloaded,
        UpstreamOutcome::Dropped,
    ];

    /// Stable label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamOutcome::Ok => "ok",
            UpstreamOutcome::NotFound => "not_found",
            UpstreamOutcome::Timeout => "timeout",
            UpstreamOutcome::Unreachable => "unreachable",
            UpstreamOutcome::Failed => "failed",
            UpstreamOutcome::InvalidBody => "invalid_body",
            UpstreamOutcome::TooLarge => "too_large",
            UpstreamOutcome::Reported => "reported_failure",
            UpstreamOutcome::Answer => "answer",
            UpstreamOutcome::CircuitOpen => "circuit_open",
            UpstreamOutcome::Overloaded => "overloaded",
            UpstreamOutcome::Dropped => "dropped",
        }
    }
}

/// Request, upstream and hub counters.
#[derive(Debug)]
pub struct Stats {
    /// `served[endpoint id][CacheStatus as usize]`.
    served: Vec<[AtomicU64; 3]>,
    /// `last_asked[endpoint id]`: when a client last asked, in seconds since `epoch`
    /// (0: never). Demand-driven prewarm jobs read it.
    last_asked: Vec<AtomicU64>,
    epoch: Instant,
    /// Upstream requests by outcome, indexed by `UpstreamOutcome as usize`.
    upstream: [AtomicU64; UpstreamOutcome::ALL.len()],
    /// Responses with a 5xx status made by mdproxy.
    pub errors: AtomicU64,
    /// Stale-while-revalidate refreshes started.
    pub refreshes: AtomicU64,
    /// Background refreshes and prewarms dropped for want of upstream budget.
    pub budget_dropped: AtomicU64,
    /// Upstream quote poll requests made by the hub.
    pub hub_polls: AtomicU64,
    /// Stream subscribers disconnected for stalling.
    pub hub_stalled: AtomicU64,
    /// Configuration reloads refused (invalid file).
    pub reloads_refused: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        let endpoints = catalog().with_passthrough().count();
        Stats {
            served: (0..endpoints).map(|_| Default::default()).collect(),
            last_asked: (0..endpoints).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
            upstream: Default::default(),
            errors: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            budget_dropped: AtomicU64::new(0),
            hub_polls: AtomicU64::new(0),
            hub_stalled: AtomicU64::new(0),
            reloads_refused: AtomicU64::new(0),
        }
    }
}

impl Stats {
    /// Counts one answer of `endpoint_id` served as `status`.
    pub fn served(&self, endpoint_id: usize, status: CacheStatus) {
        self.served[endpoint_id][status as usize].fetch_add(1, Ordering::Relaxed);
        // +1 so that "asked in the first second" differs from "never asked".
        let now = self.epoch.elapsed().as_secs() + 1;
        if self.last_asked[endpoint_id].load(Ordering::Relaxed) != now {
            self.last_asked[endpoint_id].store(now, Ordering::Relaxed);
        }
    }

    /// Whether a client asked for `endpoint_id` within `window`.
    pub fn asked_within(&self, endpoint_id: usize, window: Duration) -> bool {
        let last = self.last_asked[endpoint_id].load(Ordering::Relaxed);
        last > 0 && self.epoch.elapsed().as_secs() + 1 - last <= window.as_secs()
    }

    /// Answers of `endpoint_id` served as `status` so far.
    pub fn served_count(&self, endpoint_id: usize, status: CacheStatus) -> u64 {
        self.served[endpoint_id][status as usize].load(Ordering::Relaxed)
    }

    /// Counts one upstream outcome.
    pub fn upstream(&self, outcome: UpstreamOutcome) {
        self.upstream[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Upstream requests with `outcome` so far.
    pub fn upstream_count(&self, outcome: UpstreamOutcome) -> u64 {
        self.upstream[outcome as usize].load(Ordering::Relaxed)
    }

    /// Reads one of the plain counters.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_is_remembered_per_endpoint() {
        let stats = Stats::default();
        let window = Duration::from_secs(300);
        assert!(!stats.asked_within(3, window));
        stats.served(3, CacheStatus::Hit);
        assert!(stats.asked_within(3, window));
        assert!(!stats.asked_within(4, window));
        assert_eq!(stats.served_count(3, CacheStatus::Hit), 1);
        assert_eq!(stats.served_count(3, CacheStatus::Miss), 0);
    }

    #[test]
    fn every_outcome_has_its_own_counter() {
        let stats = Stats::default();
        for (i, outcome) in UpstreamOutcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, i, "ALL is in discriminant order");
            stats.upstream(outcome);
        }
        for outcome in UpstreamOutcome::ALL {
            assert_eq!(stats.upstream_count(outcome), 1, "{}", outcome.as_str());
        }
    }
}
