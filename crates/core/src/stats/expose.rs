//! Writing a subsystem's figures in the Prometheus exposition: each subsystem
//! registers a collector of its own (`register_metrics`), which reads its atomics at
//! scrape time and writes them with these helpers. Nothing here knows a subsystem.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::histogram::Histogram;

/// One unlabelled counter.
///
/// # Errors
/// When the encoder's writer fails.
pub fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> fmt::Result {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

/// One unlabelled gauge (saturating at `i64::MAX`).
///
/// # Errors
/// When the encoder's writer fails.
pub fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> fmt::Result {
    let g = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

/// One labelled series of a histogram family.
///
/// # Errors
/// When the encoder's writer fails.
pub fn histogram(
    family: &mut MetricEncoder<'_>,
    labels: &[(&str, &str)],
    h: &Histogram,
) -> fmt::Result {
    family
        .encode_family(&labels)?
        .encode_histogram::<NoLabelSet>(h.sum_secs(), h.count(), &h.buckets(), None)
}
