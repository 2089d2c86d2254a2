//! The cache's metrics: what memory holds and evicts, the refreshes it started, the
//! keys held back after a failure, and the disk tier's own (when it is on), read at
//! scrape time.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::cache::readthrough::ReadThrough;
use crate::stats::expose;

/// Registers the cache's metrics (and the disk tier's) in `registry`.
pub fn register(cache: &ReadThrough, registry: &mut Registry) {
    registry.register_collector(Box::new(CacheMetrics(cache.clone())));
    if let Some(disk) = cache.store().disk() {
        crate::cache::disk::metrics::register(disk, registry);
    }
}

struct CacheMetrics(ReadThrough);

impl fmt::Debug for CacheMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CacheMetrics")
    }
}

impl Collector for CacheMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let (cache, store) = (&self.0, self.0.store());
        for (name, help, value) in [
            (
                "background_refreshes",
                "Stale-while-revalidate refreshes started",
                cache.refreshes(),
            ),
            (
                "cache_evictions",
                "Entries evicted to make room",
                store.evictions(),
            ),
            (
                "cache_negatives_relayed",
                "Upstream \"not found\" answers relayed without being kept (first asks under freshness.negative_keep = second_ask)",
                store.negatives_relayed(),
            ),
        ] {
            expose::counter(&mut encoder, name, help, value)?;
        }
        for (name, help, value) in [
            (
                "keys_backing_off",
                "Keys whose last fill failed, answered from stale (or with the failure) until their backoff ends",
                cache.failures().len() as u64,
            ),
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
        ] {
            expose::gauge(&mut encoder, name, help, value)?;
        }
        Ok(())
    }
}
