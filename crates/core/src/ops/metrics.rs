//! The Prometheus exposition of everything mdproxy counts: one prometheus-client
//! registry built once, with one collector that reads the process-wide [`Stats`]
//! atomics (and the cache, hub and process gauges) at scrape time. Nothing is rebuilt
//! per scrape, and no counter can go backwards: `Stats` outlives every reload.
//! Served as OpenMetrics text ([`CONTENT_TYPE`]), which is what the encoder writes.

use std::fmt;

#[cfg(target_os = "linux")]
use procfs::WithCurrentSystemInfo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::hub::QuoteHub;
use crate::state::AppState;
use crate::stats::{CacheStatus, Histogram, Outcome, Stats, UpstreamOutcome, response_codes};
use mdproxy_api::catalog::catalog;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry served at `/metrics`.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// Registers the collector over `state` and `hub`, once.
    pub fn new(state: AppState, hub: QuoteHub) -> Metrics {
        let mut registry = Registry::default();
        // Everything of ours is `mdproxy_*`; `process_*` keeps its standard names.
        registry
            .sub_registry_with_prefix("mdproxy")
            .register_collector(Box::new(StatsCollector { state, hub }));
        registry.register_collector(Box::new(ProcessCollector));
        Metrics { registry }
    }

    /// The text exposition (ends with `# EOF`).
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

/// One gauge of an upstream instance, read off its report.
type TargetGauge = fn(&crate::upstream::target::TargetReport) -> f64;

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    let g = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

/// One labelled histogram series.
fn histogram(
    family: &mut prometheus_client::encoding::MetricEncoder<'_>,
    labels: &[(&str, &str)],
    h: &Histogram,
) -> fmt::Result {
    family
        .encode_family(&labels)?
        .encode_histogram::<NoLabelSet>(h.sum_secs(), h.count(), &h.buckets(), None)
}

impl Collector for StatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let stats = self.state.stats();
        let snap = self.state.snapshot();
        let endpoints: Vec<_> = catalog().with_passthrough().collect();

        let mut family = encoder.encode_descriptor(
            "request_duration",
            "Time from a request's head to its response's head, by endpoint and cache outcome (NONE: an error, the stream or a relayed upstream answer)",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for e in &endpoints {
            for outcome in Outcome::ALL {
                let h = stats.latency(e.id, outcome);
                if h.count() > 0 {
                    histogram(
                        &mut family,
                        &[("endpoint", e.path.as_str()), ("cache", outcome.as_str())],
                        h,
                    )?;
                }
            }
        }

        let mut family = encoder.encode_descriptor(
            "http_responses",
            "Responses by status class and error code (none: not an error; upstream: the upstream's own answer relayed)",
            None,
            MetricType::Counter,
        )?;
        for class in 1..=5u16 {
            for code in response_codes() {
                let n = stats.responses_count(class, code);
                if n > 0 || (class == 2 && code == "none") {
                    let class = format!("{class}xx");
                    let labels = [("status_class", class.as_str()), ("code", code)];
                    ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
                }
            }
        }

        let mut family = encoder.encode_descriptor(
            "responses",
            "Answers served from the cache path, by endpoint and X-Cache",
            None,
            MetricType::Counter,
        )?;
        for e in &endpoints {
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
            "Upstream requests by outcome (token_refused: a 401/403 to our token; reported_failure: 200 with success false; budget and breaker refusals included)",
            None,
            MetricType::Counter,
        )?;
        for outcome in UpstreamOutcome::ALL {
            let labels = [("outcome", outcome.as_str())];
            ConstCounter::new(stats.upstream_count(outcome))
                .encode(family.encode_family(&labels)?)?;
        }

        // Each upstream instance (the primary, the fallbacks): its requests, its
        // pause, its adaptive rate and its quota spend.
        let targets = self.state.upstream().report();
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
        let gauges: [(&str, &str, TargetGauge); 7] = [
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
        for (name, help, value) in gauges {
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
        gauge(
            &mut encoder,
            "keys_backing_off",
            "Keys whose last fill failed, answered from stale (or with the failure) until their backoff ends",
            self.state.cache().failures().len() as u64,
        )?;

        let mut family = encoder.encode_descriptor(
            "upstream_duration",
            "Time the upstream took to answer, by endpoint",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for e in &endpoints {
            let h = stats.upstream_latency(e.id);
            if h.count() > 0 {
                histogram(&mut family, &[("endpoint", e.path.as_str())], h)?;
            }
        }

        let mut family = encoder.encode_descriptor(
            "config_reloads",
            "Configuration reload attempts by result",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [
            ("applied", &stats.reloads_applied),
            ("refused", &stats.reloads_refused),
        ] {
            ConstCounter::new(Stats::get(n))
                .encode(family.encode_family(&[("result", result)])?)?;
        }

        let mut family = encoder.encode_descriptor(
            "build",
            "The running binary: version and git commit",
            None,
            MetricType::Info,
        )?;
        family.encode_info(&[
            ("version", crate::build::VERSION),
            ("commit", crate::build::commit()),
        ])?;

        let store = self.state.cache().store();
        for (name, help, value) in [
            (
                "errors",
                "Responses with a 5xx status made by mdproxy",
                Stats::get(&stats.errors),
            ),
            (
                "background_refreshes",
                "Stale-while-revalidate refreshes started",
                Stats::get(&stats.refreshes),
            ),
            (
                "upstream_budget_dropped",
                "Background refreshes and prewarms dropped for want of upstream budget",
                Stats::get(&stats.budget_dropped),
            ),
            (
                "hub_polls",
                "Upstream quote poll requests",
                Stats::get(&stats.hub_polls),
            ),
            (
                "hub_stalled",
                "Subscribers disconnected for stalling (not reading)",
                Stats::get(&stats.hub_stalled),
            ),
            (
                "cache_evictions",
                "Entries evicted to make room",
                store.evictions(),
            ),
        ] {
            counter(&mut encoder, name, help, value)?;
        }

        let hub = &self.hub;
        let open = snap.policy.calendar().is_open(self.state.clock().now());
        for (name, help, value) in [
            ("cache_entries", "Entries in the cache", store.entry_count()),
            (
                "cache_bytes",
                "Weighted size of the cache in bytes",
                store.weighted_size(),
            ),
            (
                "cache_max_bytes",
                "The cache's capacity, cache.max_bytes",
                store.max_bytes(),
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
                "upstream_budget_rps",
                "Upstream requests per second allowed to this node (limits.upstream_rps)",
                u64::from(snap.config.limits.upstream_rps),
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
            (
                "ready",
                "1 once /readyz answers 200 (the upstream answered, or the cache is warm)",
                u64::from(self.state.readiness().is_ok()),
            ),
        ] {
            gauge(&mut encoder, name, help, value)?;
        }
        if let Some(cluster) = self.state.cluster() {
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
            cluster_link_metrics(&mut encoder, cluster)?;
        }
        if let Some(disk) = store.disk() {
            disk_metrics(&mut encoder, disk)?;
        }
        heap_metrics(&mut encoder)
    }
}

/// Which Redis the node uses, the failovers it followed and its time alone.
fn cluster_link_metrics(
    encoder: &mut DescriptorEncoder<'_>,
    cluster: &mdproxy_fleet::Cluster,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(
        "cluster_redis",
        "The host:port of the Redis in use (the master the sentinels named)",
        None,
        MetricType::Info,
    )?;
    family.encode_info(&[("address", cluster.redis_address())])?;
    counter(
        encoder,
        "cluster_failovers",
        "Times the master was found at another address than before",
        cluster.failovers(),
    )?;
    let alone = ConstCounter::new(cluster.alone_for().as_secs_f64());
    alone.encode(encoder.encode_descriptor(
        "cluster_alone_seconds",
        "Time this node has worked without Redis since it started",
        None,
        alone.metric_type(),
    )?)
}

/// The disk tier's metrics (`cache.disk_path`), when it is on.
fn disk_metrics(
    encoder: &mut DescriptorEncoder<'_>,
    disk: &crate::cache::disk::Disk,
) -> fmt::Result {
    use std::sync::atomic::Ordering::Relaxed;
    let s = disk.stats();
    for (name, help, value) in [
        (
            "disk_bytes",
            "Bytes the disk tier's files take on disk",
            disk.used_bytes(),
        ),
        (
            "disk_max_bytes",
            "The disk tier's bound, cache.disk_bytes",
            disk.capacity(),
        ),
        (
            "disk_entries",
            "Records on the disk tier (estimated: bytes used over the mean record written)",
            disk.entries_estimate(),
        ),
        (
            "disk_writable",
            "1 while the disk tier takes writes (0: failing, memory only)",
            u64::from(disk.is_writable()),
        ),
    ] {
        gauge(encoder, name, help, value)?;
    }
    for (name, help, value) in [
        (
            "disk_hits",
            "Reads answered by the disk tier",
            s.hits.load(Relaxed),
        ),
        (
            "disk_promotions",
            "Disk tier hits put in memory (the others were served from disk alone)",
            s.promoted.load(Relaxed),
        ),
        (
            "disk_misses",
            "Reads the disk tier could not answer",
            s.misses.load(Relaxed),
        ),
        (
            "disk_writes",
            "Records written to the disk tier",
            s.writes.load(Relaxed),
        ),
        (
            "disk_written_bytes",
            "Bytes of records written to the disk tier",
            s.written_bytes.load(Relaxed),
        ),
    ] {
        counter(encoder, name, help, value)?;
    }
    let mut family = encoder.encode_descriptor(
        "disk_dropped",
        "Records the disk tier dropped or did not write, by reason",
        None,
        MetricType::Counter,
    )?;
    for (reason, n) in [
        ("corrupt", &s.corrupt),
        ("truncated", &s.truncated),
        ("foreign", &s.foreign),
        ("expired", &s.expired),
        ("purged", &s.purged),
        ("too_large", &s.too_large),
        ("queue_full", &s.queue_full),
        ("write_failure", &s.write_failures),
        ("read_error", &s.read_errors),
    ] {
        ConstCounter::new(n.load(Relaxed)).encode(family.encode_family(&[("reason", reason)])?)?;
    }
    let paths = disk.read_paths();
    let mut family = encoder.encode_descriptor(
        "disk_engine_reads",
        "Reads of the disk tier's engine, by path: page_cache (copied in place, all \
         its pages cached) or pool (handed to the engine's threads)",
        None,
        MetricType::Counter,
    )?;
    for (path, n) in [("page_cache", &paths.in_place), ("pool", &paths.pooled)] {
        ConstCounter::new(n.load(Relaxed)).encode(family.encode_family(&[("path", path)])?)?;
    }
    let h = &s.read_latency;
    let mut family = encoder.encode_descriptor(
        "disk_read_duration",
        "Time a disk tier read took, hit or miss",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    family.encode_histogram::<NoLabelSet>(h.sum_secs(), h.count(), &h.buckets(), None)
}

/// The standard `process_*` metrics, read from `/proc/self` at scrape time.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> fmt::Result {
        process_metrics(encoder)
    }
}

#[cfg(target_os = "linux")]
fn process_metrics(mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
    let Ok(me) = procfs::process::Process::myself() else {
        return Ok(());
    };
    if let Ok(stat) = me.stat() {
        let ticks = procfs::ticks_per_second() as f64;
        let cpu = (stat.utime + stat.stime) as f64 / ticks;
        let c = ConstCounter::new(cpu);
        c.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent",
            None,
            c.metric_type(),
        )?)?;
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size",
            stat.rss_bytes().get(),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size",
            stat.vsize,
        )?;
        if let Ok(boot) = procfs::boot_time_secs() {
            let start = boot as f64 + stat.starttime as f64 / ticks;
            let g = ConstGauge::new(start);
            g.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch",
                None,
                g.metric_type(),
            )?)?;
        }
    }
    if let Ok(fds) = me.fd_count() {
        gauge(
            &mut encoder,
            "process_open_fds",
            "Open file descriptors",
            fds as u64,
        )?;
    }
    if let Ok(limits) = me.limits()
        && let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit
    {
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum open file descriptors",
            max,
        )?;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn process_metrics(_encoder: DescriptorEncoder<'_>) -> fmt::Result {
    Ok(())
}

/// What the allocator holds: bytes in live allocations and bytes it keeps resident
/// (the difference is freed memory not yet returned to the system).
#[cfg(feature = "jemalloc")]
fn heap_metrics(encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_err() {
        return Ok(());
    }
    if let (Ok(allocated), Ok(resident)) = (stats::allocated::read(), stats::resident::read()) {
        gauge(
            encoder,
            "heap_allocated_bytes",
            "Bytes in live heap allocations (jemalloc)",
            allocated as u64,
        )?;
        gauge(
            encoder,
            "heap_resident_bytes",
            "Bytes the allocator keeps resident, freed ones not yet returned included (jemalloc)",
            resident as u64,
        )?;
    }
    Ok(())
}

#[cfg(not(feature = "jemalloc"))]
fn heap_metrics(_encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
    Ok(())
}
