//! The Prometheus exposition: one prometheus-client registry, built once at start,
//! in which each subsystem registered a collector of its own (the edge's request
//! counters, the upstream, the cache and its disk tier, the hub, the fleet, the
//! reload log). Collectors read their atomics at scrape time, so nothing is rebuilt
//! per scrape and no counter goes backwards. This file adds the node's own gauges
//! (configuration generation, market, readiness, build), the allocator's and the
//! standard `process_*` ones. Served as OpenMetrics text ([`CONTENT_TYPE`]).

use std::fmt;

#[cfg(target_os = "linux")]
use procfs::WithCurrentSystemInfo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::state::AppState;
use crate::stats::expose;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry served at `/metrics`.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// The exposition of `registry`, in which the subsystems registered theirs
    /// under the `mdproxy` prefix; the `process_*` metrics are added here with
    /// their standard names.
    pub fn new(mut registry: Registry) -> Metrics {
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

/// Registers the node's own metrics: the configuration generation, whether the
/// market is open, readiness, the build, and what the allocator holds.
pub fn register_node(state: &AppState, registry: &mut Registry) {
    registry.register_collector(Box::new(NodeMetrics(state.clone())));
}

struct NodeMetrics(AppState);

impl fmt::Debug for NodeMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NodeMetrics")
    }
}

impl Collector for NodeMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let state = &self.0;
        let snap = state.snapshot();
        let open = snap.policy.calendar().is_open(state.clock().now());
        let entries = state.cache().store().entry_count();
        let ready = state.upstream().health().readiness(entries).is_ok();
        for (name, help, value) in [
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
                u64::from(ready),
            ),
        ] {
            expose::gauge(&mut encoder, name, help, value)?;
        }
        let mut family = encoder.encode_descriptor(
            "build",
            "The running binary: version and git commit",
            None,
            MetricType::Info,
        )?;
        let build = [
            ("version", crate::build::VERSION),
            ("commit", crate::build::commit()),
        ];
        family.encode_info(&build)?;
        heap_metrics(&mut encoder)
    }
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
        expose::gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size",
            stat.rss_bytes().get(),
        )?;
        expose::gauge(
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
        expose::gauge(
            &mut encoder,
            "process_open_fds",
            "Open file descriptors",
            fds as u64,
        )?;
    }
    if let Ok(limits) = me.limits()
        && let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit
    {
        expose::gauge(
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
        expose::gauge(
            encoder,
            "heap_allocated_bytes",
            "Bytes in live heap allocations (jemalloc)",
            allocated as u64,
        )?;
        expose::gauge(
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
