//! The upstream's metrics: its counters, each instance's own state (requests,
//! pause, pace, quota, breaker) and the budget's rate, read at scrape time.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::stats::expose;
use crate::upstream::Upstream;
use crate::upstream::counters::UpstreamOutcome;
use crate::upstream::target::TargetReport;
use mdproxy_api::catalog::catalog;

/// Registers the upstream's metrics: its counters, each instance's state and the
/// budget's rate, read from `upstream` at scrape time.
pub fn register(upstream: &Upstream, registry: &mut Registry) {
    registry.register_collector(Box::new(UpstreamMetrics(upstream.clone())));
}

struct UpstreamMetrics(Upstream);

impl fmt::Debug for UpstreamMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UpstreamMetrics")
    }
}

/// One gauge of an upstream instance, read off its report.
type TargetGauge = fn(&TargetReport) -> f64;

/// The gauges of each instance: name, help and how to read it.
const TARGET_GAUGES: [(&str, &str, TargetGauge); 7] = [
    (
        "upstream_paused_seconds",
        "Seconds left of the pause a Retry-After asked for (0: not paused)",
        |t| t.paused_for.map_or(0.0, |d| d.as_secs_f64()),
    ),
    (
        "upstream_rate",
        "The adaptive upstream rate now, requests per second",
        |t| t.pace.rate,
    ),
    (
        "upstream_rate_full_in_seconds",
        "Seconds until the adaptive rate is back at limits.upstream_rps without another signal",
        |t| t.pace.full_in.as_secs_f64(),
    ),
    (
        "upstream_quota_day_used",
        "Upstream requests spent today (the vendor's day)",
        |t| t.quota.today as f64,
    ),
    (
        "upstream_quota_day_projected",
        "Today's spend carried to the end of the day at today's pace",
        |t| t.quota.projected_day as f64,
    ),
    (
        "upstream_quota_skipped",
        "Background and prewarm requests that stepped back today to keep the reserve",
        |t| t.quota.skipped_today as f64,
    ),
    (
        "upstream_breaker_open",
        "1 while the upstream-wide circuit breaker is open",
        |t| f64::from(u8::from(t.breaker_open)),
    ),
];

impl UpstreamMetrics {
    /// Each instance's requests by outcome, its gauges and its rate decreases.
    fn encode_targets(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let targets = self.0.report();
        let mut family = encoder.encode_descriptor(
            "upstream_target_requests",
            "Requests per upstream instance by outcome (refusals of its pause, breakers, quota and budget included)",
            None,
            MetricType::Counter,
        )?;
        for t in &targets {
            for (outcome, n) in &t.outcomes {
                let labels = [
                    ("upstream", t.label.as_str()),
                    ("outcome", outcome.as_str()),
                ];
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
        }
        for (name, help, value) in TARGET_GAUGES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for t in &targets {
                ConstGauge::new(value(t))
                    .encode(family.encode_family(&[("upstream", t.label.as_str())])?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "upstream_rate_decreases",
            "Times the adaptive rate was halved, by upstream instance",
            None,
            MetricType::Counter,
        )?;
        for t in &targets {
            ConstCounter::new(t.pace.decreases)
                .encode(family.encode_family(&[("upstream", t.label.as_str())])?)?;
        }
        Ok(())
    }
}

impl Collector for UpstreamMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let counters = self.0.counters();
        let mut family = encoder.encode_descriptor(
            "upstream_requests",
            "Upstream requests by outcome (token_refused: a 401/403 to our token; reported_failure: 200 with success false; budget and breaker refusals included)",
            None,
            MetricType::Counter,
        )?;
        for outcome in UpstreamOutcome::ALL {
            let labels = [("outcome", outcome.as_str())];
            ConstCounter::new(counters.outcome_count(outcome))
                .encode(family.encode_family(&labels)?)?;
        }
        self.encode_targets(&mut encoder)?;
        let mut family = encoder.encode_descriptor(
            "upstream_duration",
            "Time the upstream took to answer, by endpoint",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for e in catalog().with_passthrough() {
            let h = counters.latency(e.id);
            if h.count() > 0 {
                expose::histogram(&mut family, &[("endpoint", e.path.as_str())], h)?;
            }
        }
        expose::counter(
            &mut encoder,
            "upstream_budget_dropped",
            "Background refreshes and prewarms dropped for want of upstream budget",
            counters.dropped(),
        )?;
        expose::gauge(
            &mut encoder,
            "upstream_budget_rps",
            "Upstream requests per second allowed to this node (limits.upstream_rps)",
            u64::from(self.0.budget_rps()),
        )
    }
}
