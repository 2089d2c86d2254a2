//! The disk tier's metrics (`mdproxy_disk_*`): what it holds, whether it takes
//! writes, its reads, writes and drops, and how its engine read, at scrape time.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::{Registry, Unit};

use crate::cache::disk::Disk;
use crate::stats::expose;

/// Registers `disk`'s metrics in `registry`.
pub fn register(disk: &Disk, registry: &mut Registry) {
    registry.register_collector(Box::new(DiskMetrics(disk.clone())));
}

struct DiskMetrics(Disk);

impl fmt::Debug for DiskMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DiskMetrics")
    }
}

impl Collector for DiskMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let disk = &self.0;
        gauges(&mut encoder, disk)?;
        counters(&mut encoder, disk)?;
        reads(&mut encoder, disk)
    }
}

/// What the tier holds and whether it takes writes.
fn gauges(encoder: &mut DescriptorEncoder<'_>, disk: &Disk) -> fmt::Result {
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
        expose::gauge(encoder, name, help, value)?;
    }
    Ok(())
}

/// Reads, writes and drops so far.
fn counters(encoder: &mut DescriptorEncoder<'_>, disk: &Disk) -> fmt::Result {
    let s = disk.stats();
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
        expose::counter(encoder, name, help, value)?;
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
    Ok(())
}

/// How reads went: by the engine's path, and their time.
fn reads(encoder: &mut DescriptorEncoder<'_>, disk: &Disk) -> fmt::Result {
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
    let h = &disk.stats().read_latency;
    let mut family = encoder.encode_descriptor(
        "disk_read_duration",
        "Time a disk tier read took, hit or miss",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    family.encode_histogram::<NoLabelSet>(h.sum_secs(), h.count(), &h.buckets(), None)
}
