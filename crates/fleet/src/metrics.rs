//! The fleet's metrics (`mdproxy_cluster_*`): whether Redis answers, which one is in
//! use, the failovers followed, the time alone and the answers found in the shared
//! store, read from this node's membership at scrape time.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::member::Cluster;

/// Registers `cluster`'s metrics in `registry`.
pub fn register(cluster: &Cluster, registry: &mut Registry) {
    registry.register_collector(Box::new(FleetMetrics(cluster.clone())));
}

struct FleetMetrics(Cluster);

impl fmt::Debug for FleetMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FleetMetrics")
    }
}

impl Collector for FleetMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let cluster = &self.0;
        let up = ConstGauge::new(i64::from(cluster.is_up()));
        up.encode(encoder.encode_descriptor(
            "cluster_redis_up",
            "1 while Redis answers (0: this node works alone)",
            None,
            up.metric_type(),
        )?)?;
        let nodes = ConstGauge::new(i64::try_from(cluster.nodes()).unwrap_or(i64::MAX));
        nodes.encode(encoder.encode_descriptor(
            "cluster_nodes",
            "Nodes the last heartbeat counted on Redis (cluster.expected_nodes before it)",
            None,
            nodes.metric_type(),
        )?)?;
        let share = ConstGauge::new(cluster.budget_share());
        share.encode(encoder.encode_descriptor(
            "cluster_budget_share",
            "Part of the upstream budget the nodes on Redis draw: 1, or the nodes alive over cluster.expected_nodes",
            None,
            share.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "cluster_shared_hits",
                "Answers found in the cluster's shared store",
                cluster.shared_hits(),
            ),
            (
                "cluster_failovers",
                "Times the master was found at another address than before",
                cluster.failovers(),
            ),
            (
                "cluster_failed_sessions",
                "Attempts to connect to Redis, and sessions with it, that ended in an error",
                cluster.failed_sessions(),
            ),
            (
                "cluster_refused_commands",
                "Commands Redis refused to this node's ACL user (NOPERM): grant them",
                cluster.refusals(),
            ),
        ] {
            let c = ConstCounter::new(value);
            c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        let mut family = encoder.encode_descriptor(
            "cluster_redis",
            "The host:port of the Redis in use (the master the sentinels named)",
            None,
            MetricType::Info,
        )?;
        family.encode_info(&[("address", cluster.redis_address())])?;
        let alone = ConstCounter::new(cluster.alone_for().as_secs_f64());
        alone.encode(encoder.encode_descriptor(
            "cluster_alone_seconds",
            "Time this node has worked without Redis since it started",
            None,
            alone.metric_type(),
        )?)
    }
}
