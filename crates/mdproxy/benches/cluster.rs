//! Two costs of running several nodes on Redis, against the upstream's own latency
//! measured in the same run: a hit served from the shared store (another node's
//! fill: one Redis round trip, then the node's own cache), and the waiters' latency
//! on a cluster-wide coalesced miss (one node asks the upstream, the others wait for
//! its publication). Each is measured on three topologies in turn, in one run: one
//! Redis, a master found through three sentinels, and a Redis Cluster of three
//! masters (one replica each), all `redis-server` processes on loopback ports, with
//! the simulator (`CLUSTER_UPSTREAM_MS` of latency, default 50) and three proxy
//! nodes in process. `CLUSTER_KEYS` (default 200) keys per figure;
//! `CLUSTER_TOPOLOGIES` (default `single,sentinel,cluster`) picks which.

#[path = "../tests/it/support/mod.rs"]
#[allow(unused)]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mdproxy_config::{Config, Secret};
use mdproxy_core::app::App;
use mdproxy_market::{Clock, ManualClock};
use mdproxy_sim::SimConfig;
use support::redis::{MASTER, Redis, RedisCluster, sentinel_topology};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>, reference: Duration) {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "{name:<56} p50 {:>8.2} ms  p99 {:>8.2} ms  (p50 / upstream latency: {:.3})",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        p50.as_secs_f64() / reference.as_secs_f64()
    );
}

async fn timed(client: &reqwest::Client, url: String) -> Duration {
    let started = Instant::now();
    let r = client.get(url).bearer_auth("bench").send().await.unwrap();
    // A 404 (a code the simulator lists no more) is an answer too, cached and shared.
    assert!(
        r.status() == 200 || r.status() == 404,
        "{} {}",
        r.status(),
        r.url()
    );
    r.bytes().await.unwrap();
    started.elapsed()
}

/// The Redis processes of one topology, kept alive while it is measured.
enum Topology {
    Single(Redis),
    /// The sentinels, and the master and replica they watch (held, not read).
    Sentinel {
        sentinels: Vec<Redis>,
        _servers: [Redis; 2],
    },
    Cluster(RedisCluster),
}

impl Topology {
    async fn start(name: &str) -> Topology {
        match name {
            "single" => Topology::Single(Redis::start()),
            "sentinel" => {
                let (master, replica, sentinels) = sentinel_topology().await;
                Topology::Sentinel {
                    sentinels,
                    _servers: [master, replica],
                }
            }
            "cluster" => Topology::Cluster(RedisCluster::start(3).await),
            other => panic!("CLUSTER_TOPOLOGIES: {other:?} is not single, sentinel or cluster"),
        }
    }

    /// `config`'s `[cluster]` pointed at it.
    fn point(&self, config: &mut Config) {
        config.cluster = mdproxy_config::ClusterConfig::default();
        match self {
            Topology::Single(redis) => config.cluster.redis_url = Secret::new(redis.url()),
            Topology::Sentinel { sentinels, .. } => {
                config.cluster.sentinels = sentinels.iter().map(Redis::addr).collect();
                config.cluster.sentinel_master = MASTER.into();
            }
            Topology::Cluster(cluster) => {
                config.cluster.mode = "cluster".into();
                config.cluster.nodes = cluster.seeds();
            }
        }
    }
}

fn main() {
    let upstream_ms = env_or("CLUSTER_UPSTREAM_MS", 50);
    let keys = env_or("CLUSTER_KEYS", 200);
    let topologies =
        std::env::var("CLUSTER_TOPOLOGIES").unwrap_or_else(|_| "single,sentinel,cluster".into());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let clock = ManualClock::new(
            chrono::DateTime::parse_from_rfc3339("2026-03-07T04:00:00Z")
                .unwrap()
                .with_timezone(&chrono::Utc),
        );
        let sim = mdproxy_sim::start(
            &SimConfig {
                listen: "127.0.0.1:0".into(),
                token: "sim".into(),
                latency_ms: upstream_ms,
                ..SimConfig::default()
            },
            clock.clone(),
        )
        .await
        .unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let universe = mdproxy_sim::universe::universe();
        let stocks: Vec<&str> = universe
            .stocks
            .iter()
            .map(|s| s.code.as_str())
            .filter(|c| universe.stock(c).is_some())
            .collect();
        let code = |key: u64| stocks[key as usize % stocks.len()].to_owned();

        // The reference: the upstream's own latency, asked directly.
        let mut upstream = Vec::new();
        for k in 0..keys.min(50) {
            let started = Instant::now();
            client
                .get(format!(
                    "{}/stock/detail/{}",
                    sim.base_url(),
                    code(4_000 + k)
                ))
                .bearer_auth("sim")
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            upstream.push(started.elapsed());
        }
        upstream.sort();
        let reference = percentile(&upstream, 0.5);
        report(
            "upstream, asked directly (reference)",
            upstream.clone(),
            reference,
        );

        let mut config = mdproxy::demo::config_for(&sim, "127.0.0.1:0", Secret::new("bench"));
        config.scheduler.enabled = false;
        config.limits.upstream_rps = 0;
        let client = Arc::new(client);
        for (t, name) in topologies.split(',').enumerate() {
            let topology = Topology::start(name).await;
            topology.point(&mut config);
            let mut nodes: Vec<App> = Vec::new();
            for i in 0..3 {
                config.cluster.node_id = format!("bench-{i}");
                nodes.push(
                    mdproxy_core::app::start(&config, clock.clone())
                        .await
                        .unwrap(),
                );
            }
            for n in &nodes {
                let cluster = n.state().cluster().unwrap().clone();
                for _ in 0..500 {
                    if cluster.is_up() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                assert!(cluster.is_up(), "{name}: a node never joined");
            }
            // Each topology asks codes the others did not.
            let base = 600_000 + 10_000 * t as u64;
            let url =
                |n: usize, key: u64| format!("{}/stock/detail/{}", nodes[n].base_url(), base + key);
            let hits_before = sim.hits("/stock/detail/{code}");

            // A hit from the shared store: node 0 fills, node 1 reads.
            let mut shared = Vec::new();
            let mut local = Vec::new();
            for k in 0..keys {
                timed(&client, url(0, k)).await;
                shared.push(timed(&client, url(1, k)).await);
                local.push(timed(&client, url(1, k)).await);
            }
            report(
                &format!("{name}: hit from the shared store (other node's fill)"),
                shared,
                reference,
            );
            report(
                &format!("{name}: hit from the node's own cache"),
                local,
                reference,
            );

            // A coalesced miss: 30 waiters over three nodes for one cold key.
            let mut waiters = Vec::new();
            for k in 0..keys.min(50) {
                let key = 5_000 + k;
                let asks = (0..30).map(|i| timed(&client, url(i % 3, key)));
                waiters.extend(futures_util::future::join_all(asks).await);
            }
            report(
                &format!("{name}: waiters of a cluster-wide coalesced miss"),
                waiters,
                reference,
            );
            println!(
                "{name}: upstream requests for {} coalesced keys: {}",
                keys.min(50),
                sim.hits("/stock/detail/{code}") - hits_before - keys
            );
            for n in nodes {
                n.shutdown().await;
            }
            drop(topology);
        }
        let _ = clock.now();
    });
}
