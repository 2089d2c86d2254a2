//! Latency histograms of plain atomics, sharded by thread so two cores counting the
//! same series do not pass a cache line back and forth; read (and summed) at scrape
//! time. The subsystems that time something keep their own.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Upper bounds of the latency histograms' buckets, in seconds (Prometheus `le`);
/// from a cache hit (tens of µs) to an upstream at its timeout (seconds; a K-line's
/// is 90).
pub const LATENCY_BUCKETS: [f64; 18] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 90.0,
];

/// Bucket bounds in microseconds, for [`Histogram::observe`].
const BUCKET_MICROS: [u64; 18] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 90_000_000,
];

/// Shards of the counters every request adds to.
pub(crate) const SHARDS: usize = 4;

/// The shard of the calling thread: threads take them in turn as they first count.
pub(crate) fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

/// One shard's value, alone on its cache lines (two, for the adjacent-line
/// prefetcher).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// A latency histogram of plain atomics (one add per observation for its bucket and
/// one for the sum, in the thread's shard; the count is the buckets' sum, added up
/// when read; no lock on the hit path). Buckets are kept per bucket, not
/// cumulative, as prometheus-client's encoder takes them.
#[derive(Debug, Default)]
pub struct Histogram {
    shards: [Padded<HistogramShard>; SHARDS],
}

#[derive(Debug, Default)]
struct HistogramShard {
    /// `buckets[i]`: observations in `(bound[i-1], bound[i]]`; the last one is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Counts one observation of `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKET_MICROS.partition_point(|&bound| bound < micros);
        let shard = &self.shards[shard()].0;
        shard.buckets[i].fetch_add(1, Ordering::Relaxed);
        shard.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.totals().iter().sum()
    }

    /// Sum of the observations, in seconds.
    pub fn sum_secs(&self) -> f64 {
        let micros: u64 = self
            .shards
            .iter()
            .map(|s| s.0.sum_micros.load(Ordering::Relaxed))
            .sum();
        micros as f64 / 1e6
    }

    /// `(upper bound, observations in this bucket)`, the last bound +Inf.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        LATENCY_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.totals())
            .collect()
    }

    /// Adds `other`'s observations to this snapshot (for totals over endpoints).
    pub fn merge_into(&self, totals: &mut [u64; LATENCY_BUCKETS.len() + 1]) {
        for (t, n) in totals.iter_mut().zip(self.totals()) {
            *t += n;
        }
    }

    /// Observations per bucket, over the shards.
    fn totals(&self) -> [u64; LATENCY_BUCKETS.len() + 1] {
        let mut totals = [0; LATENCY_BUCKETS.len() + 1];
        for shard in &self.shards {
            for (t, n) in totals.iter_mut().zip(&shard.0.buckets) {
                *t += n.load(Ordering::Relaxed);
            }
        }
        totals
    }
}

/// The `q` quantile (0..1) of per-bucket counts, in seconds: the upper bound of the
/// bucket it falls in, or `None` without observations (Prometheus's
/// `histogram_quantile` without the interpolation).
pub fn quantile(buckets: &[u64; LATENCY_BUCKETS.len() + 1], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_from_every_thread_add_up() {
        let h = Histogram::default();
        // More threads than shards, so some share one.
        std::thread::scope(|scope| {
            for _ in 0..SHARDS * 2 + 1 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        h.observe(Duration::from_micros(300));
                    }
                });
            }
        });
        let n = (SHARDS as u64 * 2 + 1) * 100;
        assert_eq!(h.count(), n);
        assert!((h.sum_secs() - n as f64 * 0.000_3).abs() < 1e-9);
        assert_eq!(h.buckets()[2], (0.000_5, n));
    }

    #[test]
    fn histograms_bucket_and_estimate_quantiles() {
        let h = Histogram::default();
        for micros in [50, 100, 101, 3_000, 200_000_000] {
            h.observe(Duration::from_micros(micros));
        }
        assert_eq!(h.count(), 5);
        let buckets = h.buckets();
        assert_eq!(buckets[0], (0.000_1, 2), "100 µs is ≤ the first bound");
        assert_eq!(buckets[1], (0.000_25, 1));
        assert_eq!(*buckets.last().unwrap(), (f64::INFINITY, 1), "200 s");
        let mut totals = [0; LATENCY_BUCKETS.len() + 1];
        h.merge_into(&mut totals);
        assert_eq!(quantile(&totals, 0.5), Some(0.000_25));
        assert_eq!(quantile(&totals, 1.0), Some(f64::INFINITY));
        assert_eq!(quantile(&[0; LATENCY_BUCKETS.len() + 1], 0.5), None);
    }
}
