//! Counters the request path bumps (plain atomics indexed by endpoint: no labels to
//! hash, no lock on a hit) and their Prometheus exposition, built with
//! prometheus-client at scrape time. The admin listener serves it.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::cache::CacheStatus;
use crate::catalog::catalog;
use crate::proxy::AppState;

/// Upstream outcomes, in the order of [`Stats::upstream`].
pub const UPSTREAM_OUTCOMES: [&str; 8] = [
    "ok",
    "not_found",
    "timeout",
    "unreachable",
    "failed",
    "invalid_body",
    "answer",
    "overloaded",
];

/// Request and upstream counters.
#[derive(Debug)]
pub struct Stats {
    /// `served[endpoint id][HIT, MISS, STALE]`.
    served: Vec<[AtomicU64; 3]>,
    /// `last_asked[endpoint id]`: when a client last asked, in seconds since `epoch`
    /// (0: never). Demand-driven prewarm jobs read it.
    last_asked: Vec<AtomicU64>,
    epoch: std::time::Instant,
    /// Responses with a 5xx status made by mdproxy.
    pub errors: AtomicU64,
    /// Stale-while-revalidate refreshes started.
    pub refreshes: AtomicU64,
    /// Upstream requests by outcome, see [`UPSTREAM_OUTCOMES`].
    upstream: [AtomicU64; UPSTREAM_OUTCOMES.len()],
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            served: catalog()
                .endpoints()
                .iter()
                .map(|_| Default::default())
                .collect(),
            last_asked: catalog()
                .endpoints()
                .iter()
                .map(|_| AtomicU64::new(0))
                .collect(),
            epoch: std::time::Instant::now(),
            errors: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            upstream: Default::default(),
        }
    }
}

fn slot(status: CacheStatus) -> usize {
    match status {
        CacheStatus::Hit => 0,
        CacheStatus::Miss => 1,
        CacheStatus::Stale => 2,
    }
}

impl Stats {
    /// Counts one answer of `endpoint_id` served as `status`.
    pub fn served(&self, endpoint_id: usize, status: CacheStatus) {
        self.served[endpoint_id][slot(status)].fetch_add(1, Ordering::Relaxed);
        // +1 so that "asked in the first second" differs from "never asked".
        let now = self.epoch.elapsed().as_secs() + 1;
        if self.last_asked[endpoint_id].load(Ordering::Relaxed) != now {
            self.last_asked[endpoint_id].store(now, Ordering::Relaxed);
        }
    }

    /// Whether a client asked for `endpoint_id` within `window`.
    pub fn asked_within(&self, endpoint_id: usize, window: std::time::Duration) -> bool {
        let last = self.last_asked[endpoint_id].load(Ordering::Relaxed);
        last > 0 && self.epoch.elapsed().as_secs() + 1 - last <= window.as_secs()
    }

    /// Answers of `endpoint_id` served as `status` so far.
    pub fn served_count(&self, endpoint_id: usize, status: CacheStatus) -> u64 {
        self.served[endpoint_id][slot(status)].load(Ordering::Relaxed)
    }

    /// Counts one upstream request by outcome label (one of [`UPSTREAM_OUTCOMES`]).
    pub fn upstream(&self, outcome: &str) {
        if let Some(i) = UPSTREAM_OUTCOMES.iter().position(|o| *o == outcome) {
            self.upstream[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServedLabels {
    endpoint: String,
    cache_status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The Prometheus text exposition of everything the proxy counts.
pub fn render(state: &AppState) -> String {
    let stats = state.stats();
    let snap = state.snapshot();
    let mut registry = Registry::with_prefix("mdproxy");

    let served = Family::<ServedLabels, Counter>::default();
    for e in catalog().endpoints() {
        for status in [CacheStatus::Hit, CacheStatus::Miss, CacheStatus::Stale] {
            let n = stats.served_count(e.id, status);
            if n > 0 {
                served
                    .get_or_create(&ServedLabels {
                        endpoint: e.path.clone(),
                        cache_status: status.as_str(),
                    })
                    .inc_by(n);
            }
        }
    }
    registry.register(
        "responses",
        "Answers served from the cache path, by endpoint and X-Cache",
        served,
    );

    let upstream = Family::<OutcomeLabels, Counter>::default();
    for (i, outcome) in UPSTREAM_OUTCOMES.iter().enumerate() {
        upstream
            .get_or_create(&OutcomeLabels { outcome })
            .inc_by(stats.upstream[i].load(Ordering::Relaxed));
    }
    registry.register(
        "upstream_requests",
        "Upstream requests by outcome",
        upstream,
    );

    let cache = state.cache();
    let hub = state.hub();
    let counters = [
        (
            "errors",
            "Responses with a 5xx status",
            stats.errors.load(Ordering::Relaxed),
        ),
        (
            "background_refreshes",
            "Stale-while-revalidate refreshes started",
            stats.refreshes.load(Ordering::Relaxed),
        ),
        (
            "upstream_budget_dropped",
            "Background refreshes and prewarms dropped for want of upstream budget",
            snap.budget().dropped(),
        ),
        ("hub_polls", "Upstream quote poll requests", hub.polls()),
        (
            "hub_stalled",
            "Subscribers disconnected for stalling",
            hub.stalled(),
        ),
    ];
    for (name, help, value) in counters {
        let c = Counter::<u64>::default();
        c.inc_by(value);
        registry.register(name, help, c);
    }
    let open = snap.policy().calendar().is_open(state.clock().now());
    let gauges = [
        ("cache_entries", "Entries in the cache", cache.entry_count()),
        (
            "cache_bytes",
            "Weighted size of the cache in bytes",
            cache.weighted_size(),
        ),
        (
            "hub_subscribers",
            "Open quote streams",
            hub.subscribers() as u64,
        ),
        (
            "hub_codes",
            "Codes in the quote poll union",
            hub.codes() as u64,
        ),
        (
            "config_generation",
            "Configuration reloads applied",
            snap.generation,
        ),
        (
            "market_open",
            "1 while the A-share market is in session",
            u64::from(open),
        ),
    ];
    for (name, help, value) in gauges {
        let g = Gauge::<i64>::default();
        g.set(i64::try_from(value).unwrap_or(i64::MAX));
        registry.register(name, help, g);
    }

    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_is_remembered_per_endpoint() {
        let stats = Stats::default();
        let window = std::time::Duration::from_secs(300);
        assert!(!stats.asked_within(3, window));
        stats.served(3, CacheStatus::Hit);
        assert!(stats.asked_within(3, window));
        assert!(!stats.asked_within(4, window));
        assert_eq!(stats.served_count(3, CacheStatus::Hit), 1);
    }
}
