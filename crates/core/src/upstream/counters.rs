//! What the upstream instances were asked and how it went, counted for the whole
//! process: each outcome, the time of each answered request by endpoint, and the
//! background work dropped for want of budget.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::stats::histogram::Histogram;
use mdproxy_api::catalog::catalog;

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
    /// 5xx, a 3xx (never followed), or 429 aimed at the proxy's own rate.
    Failed,
    /// 401 or 403: the upstream refused the proxy's own token.
    TokenRefused,
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
    /// `429` or `503`: the upstream throttles us (it pauses the upstream).
    Throttled,
    /// Not asked: the upstream's `Retry-After` pause runs.
    Paused,
    /// Not asked: a vendor quota is spent (or background work kept the reserve).
    OverQuota,
    /// A 2xx whose body was cut short (no length, the connection closed early).
    Truncated,
}

impl UpstreamOutcome {
    /// Every outcome, in counter order.
    pub const ALL: [UpstreamOutcome; 17] = [
        UpstreamOutcome::Ok,
        UpstreamOutcome::NotFound,
        UpstreamOutcome::Timeout,
        UpstreamOutcome::Unreachable,
        UpstreamOutcome::Failed,
        UpstreamOutcome::TokenRefused,
        UpstreamOutcome::InvalidBody,
        UpstreamOutcome::TooLarge,
        UpstreamOutcome::Reported,
        UpstreamOutcome::Answer,
        UpstreamOutcome::CircuitOpen,
        UpstreamOutcome::Overloaded,
        UpstreamOutcome::Dropped,
        UpstreamOutcome::Throttled,
        UpstreamOutcome::Paused,
        UpstreamOutcome::OverQuota,
        UpstreamOutcome::Truncated,
    ];

    /// Stable label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamOutcome::Ok => "ok",
            UpstreamOutcome::NotFound => "not_found",
            UpstreamOutcome::Timeout => "timeout",
            UpstreamOutcome::Unreachable => "unreachable",
            UpstreamOutcome::Failed => "failed",
            UpstreamOutcome::TokenRefused => "token_refused",
            UpstreamOutcome::InvalidBody => "invalid_body",
            UpstreamOutcome::TooLarge => "too_large",
            UpstreamOutcome::Reported => "reported_failure",
            UpstreamOutcome::Answer => "answer",
            UpstreamOutcome::CircuitOpen => "circuit_open",
            UpstreamOutcome::Overloaded => "overloaded",
            UpstreamOutcome::Dropped => "dropped",
            UpstreamOutcome::Throttled => "throttled",
            UpstreamOutcome::Paused => "paused",
            UpstreamOutcome::OverQuota => "over_quota",
            UpstreamOutcome::Truncated => "truncated",
        }
    }
}

/// The upstream's counters. Outlive every reload: no counter goes backwards.
#[derive(Debug)]
pub struct Counters {
    /// Requests by outcome, indexed by `UpstreamOutcome as usize`.
    outcomes: [AtomicU64; UpstreamOutcome::ALL.len()],
    /// `latency[endpoint id]`: time of upstream requests that got an answer.
    latency: Vec<Histogram>,
    /// Background refreshes and prewarms dropped for want of budget.
    dropped: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        let endpoints = catalog().with_passthrough().count();
        Counters {
            outcomes: Default::default(),
            latency: (0..endpoints).map(|_| Histogram::default()).collect(),
            dropped: AtomicU64::new(0),
        }
    }
}

impl Counters {
    /// Counts one outcome.
    pub fn count(&self, outcome: UpstreamOutcome) {
        self.outcomes[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests with `outcome` so far.
    pub fn outcome_count(&self, outcome: UpstreamOutcome) -> u64 {
        self.outcomes[outcome as usize].load(Ordering::Relaxed)
    }

    /// Counts the time an answered request of `endpoint_id` took.
    pub fn answered(&self, endpoint_id: usize, elapsed: Duration) {
        self.latency[endpoint_id].observe(elapsed);
    }

    /// The upstream latency histogram of `endpoint_id`.
    pub fn latency(&self, endpoint_id: usize) -> &Histogram {
        &self.latency[endpoint_id]
    }

    /// Counts one piece of background work dropped for want of budget.
    pub fn drop_background(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Background work dropped for want of budget so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_has_its_own_counter() {
        let counters = Counters::default();
        for (i, outcome) in UpstreamOutcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, i, "ALL is in discriminant order");
            counters.count(outcome);
        }
        for outcome in UpstreamOutcome::ALL {
            assert_eq!(counters.outcome_count(outcome), 1, "{}", outcome.as_str());
        }
    }
}
