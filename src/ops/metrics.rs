//! The Prometheus exposition of everything mdproxy counts: one prometheus-client
//! registry built once, with one collector that reads the process-wide [`Stats`]
//! atomics (and the cache and hub gauges) at scrape time. Nothing is rebuilt per
//! scrape, and no counter can go backwards: `Stats` outlives every reload.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::api::catalog::catalog;
use crate::hub::QuoteHub;
use crate::state::AppState;
use crate::stats::{CacheStatus, Stats, UpstreamOutcome};

/// The registry served at `/metrics`.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// Registers the collector over `state` and `hub`, once.
    pub fn new(state: AppState, hub: QuoteHub) -> Metrics {
        let mut registry = Registry::with_prefix("mdproxy");
        registry.register_collector(Box::new(StatsCollector { state, hub }));
        Metrics { registry }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// Reads the counters at scrape time.
struct StatsCollector {
    state: AppState,
    hub: QuoteHub,
}

impl fmt::Debug for StatsCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StatsCollector")
    }
}

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    let g = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for StatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let stats = self.state.stats();
        let snap = self.state.snapshot();

        let mut family = encoder.encode_descriptor(
            "responses",
            "Answers served from the cache path, by endpoint and X-Cache",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for e in catalog().with_passthrough() {
            for status in CacheStatus::ALL {
                let n = stats.served_count(e.id, status);
                if n > 0 {
                    let labels = [
                        ("endpoint", e.path.as_str()),
                        ("cache_status", status.as_str()),
                    ];
                    ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
                }
            }
        }

        let mut family = encoder.encode_descriptor(
            "upstream_requests",
            "Upstream requests by outcome (budget refusals included)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for outcome in UpstreamOutcome::ALL {
            let labels = [("outcome", outcome.as_str())];
            ConstCounter::new(stats.upstream_count(outcome))
                .encode(family.encode_family(&labels)?)?;
        }

        let hub = &self.hub;
        for (name, help, value) in [
            ("errors", "Responses with a 5xx status", &stats.errors),
            (
                "background_refreshes",
                "Stale-while-revalidate refreshes started",
                &stats.refreshes,
            ),
            (
                "upstream_budget_dropped",
                "Background refreshes and prewarms dropped for want of upstream budget",
                &stats.budget_dropped,
            ),
            (
                "hub_polls",
                "Upstream quote poll requests",
                &stats.hub_polls,
            ),
            (
                "hub_stalled",
                "Subscribers disconnected for stalling",
                &stats.hub_stalled,
            ),
            (
                "config_reloads_refused",
                "Configuration files refused on reload",
                &stats.reloads_refused,
            ),
        ] {
            counter(&mut encoder, name, help, Stats::get(value))?;
        }

        let store = self.state.cache().store();
        let open = snap.policy.calendar().is_open(self.state.clock().now());
        for (name, help, value) in [
            ("cache_entries", "Entries in the cache", store.entry_count()),
            (
                "cache_bytes",
                "Weighted size of the cache in bytes",
                store.weighted_size(),
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
        ] {
            gauge(&mut encoder, name, help, value)?;
        }
        if let Some(cluster) = self.state.cache().cluster() {
            gauge(
                &mut encoder,
                "cluster_redis_up",
                "1 while Redis answers (0: this node works alone)",
                u64::from(cluster.is_up()),
            )?;
            counter(
                &mut encoder,
                "cluster_shared_hits",
                "Answers found in the cluster's shared store",
                cluster.shared_hits(),
            )?;
        }
        Ok(())
    }
}
