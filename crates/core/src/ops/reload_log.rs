//! The reload attempts of this process: how many were applied and refused (for the
//! metrics) and the last few with their reason (for `/status`).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;

/// Reload attempts `/status` remembers.
const KEPT: usize = 10;

/// One configuration reload attempt.
#[derive(Clone, Debug)]
pub struct ReloadRecord {
    pub at: DateTime<Utc>,
    pub applied: bool,
    /// The generation applied, or why the file was refused.
    pub detail: String,
}

/// The log of reload attempts.
#[derive(Debug, Default)]
pub struct ReloadLog {
    records: Mutex<VecDeque<ReloadRecord>>,
    applied: AtomicU64,
    refused: AtomicU64,
}

impl ReloadLog {
    /// Records an attempt: counted, and remembered among the last few.
    pub fn record(&self, applied: bool, detail: String) {
        let counter = if applied {
            &self.applied
        } else {
            &self.refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut records = self.records.lock().expect("reload log is never poisoned");
        if records.len() == KEPT {
            records.pop_front();
        }
        records.push_back(ReloadRecord {
            at: Utc::now(),
            applied,
            detail,
        });
    }

    /// The last attempts, newest last.
    pub fn records(&self) -> Vec<ReloadRecord> {
        let records = self.records.lock().expect("reload log is never poisoned");
        records.iter().cloned().collect()
    }

    /// Attempts applied so far.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Attempts refused so far (an invalid file).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Registers `config_reloads` (by result) in `registry`.
    pub fn register_metrics(log: &Arc<ReloadLog>, registry: &mut Registry) {
        registry.register_collector(Box::new(ReloadMetrics(Arc::clone(log))));
    }
}

#[derive(Debug)]
struct ReloadMetrics(Arc<ReloadLog>);

impl Collector for ReloadMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let mut family = encoder.encode_descriptor(
            "config_reloads",
            "Configuration reload attempts by result",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [("applied", self.0.applied()), ("refused", self.0.refused())] {
            ConstCounter::new(n).encode(family.encode_family(&[("result", result)])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloads_are_remembered_newest_last_and_bounded() {
        let log = ReloadLog::default();
        for i in 0..15 {
            log.record(i % 2 == 0, format!("attempt {i}"));
        }
        let kept = log.records();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept.last().unwrap().detail, "attempt 14");
        assert_eq!(log.applied(), 8);
        assert_eq!(log.refused(), 7);
    }
}
