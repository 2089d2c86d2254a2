//! Three proxy nodes on one Redis in front of one simulator behave as one cache
//! toward the upstream (issue 10, first part): one upstream request per cold key for
//! the whole cluster, fills shared between nodes, warm restarts, cluster-wide purge,
//! and a Redis outage that costs no request. A real `redis-server` is started on an
//! ephemeral loopback port; `scripts/test` installs it where it is missing.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mdproxy::app::App;
use mdproxy::config::Secret;
use support::{Env, header};

/// A `redis-server` child on a loopback port, killed when dropped.
struct Redis {
    port: u16,
    child: Child,
}

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Redis::on(port)
    }

    fn on(port: u16) -> Redis {
        Redis::with(port, &[])
    }

    /// On `port` with extra arguments (`--requirepass`).
    fn with(port: u16, extra: &[&str]) -> Redis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(extra)
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect(
                "redis-server is not installed: run scripts/test, or apt-get install redis-server",
            );
        // Owned at once, so it is killed and waited for whatever happens next.
        let redis = Redis { port, child };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not listen on {addr}");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn stop(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A simulator answering after `latency`, and a Redis.
async fn cluster_env(latency: Duration) -> (Env, Redis) {
    let redis = Redis::start();
    let url = redis.url();
    let env = support::start_with(
        |s| s.latency_ms = latency.as_millis() as u64,
        |c| {
            c.cluster.redis_url = Secret::new(url);
            c.cluster.node_id = "node-0".into();
            c.admin.listen = "127.0.0.1:0".into();
            c.admin.token = Secret::new("admin-secret");
        },
        Some(support::saturday()),
    )
    .await;
    (env, redis)
}

/// Another node: same simulator, same Redis, same clock.
async fn node(env: &Env, name: &str) -> App {
    let mut config = (*env.proxy.state().snapshot().config).clone();
    config.server.listen = "127.0.0.1:0".into();
    config.cluster.node_id = name.into();
    let clock = env.clock.clone().expect("a manual clock");
    mdproxy::app::start(&config, clock).await.unwrap()
}

/// Waits until every node's Redis link is up.
async fn joined(nodes: &[&App]) {
    for n in nodes {
        let cluster = n.state().cache().cluster().unwrap().clone();
        assert!(
            support::eventually(Duration::from_secs(10), || cluster.is_up()).await,
            "node never joined"
        );
    }
}

async fn get(node: &App, target: &str) -> reqwest::Response {
    support::client()
        .get(format!("{}{target}", node.base_url()))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap()
}

/// 150 simultaneous requests for one cold key over three nodes reach the upstream
/// once; every client gets the same body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cold_key_reaches_the_upstream_once_for_the_cluster() {
    let (env, _redis) = cluster_env(Duration::from_millis(300)).await;
    let (b, c) = (node(&env, "node-1").await, node(&env, "node-2").await);
    joined(&[&env.proxy, &b, &c]).await;
    let nodes = Arc::new([env.proxy.base_url(), b.base_url(), c.base_url()]);
    let client = support::client();
    let asks = (0..150).map(|i| {
        let (nodes, client) = (Arc::clone(&nodes), client.clone());
        async move {
            let r = client
                .get(format!("{}/stock/detail/600519", nodes[i % 3]))
                .bearer_auth(support::TOKEN)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap())
        }
    });
    let answers = futures_util::future::join_all(asks).await;
    assert!(answers.iter().all(|(s, b)| *s == 200 && *b == answers[0].1));
    assert_eq!(
        env.sim.hits("/stock/detail/{code}"),
        1,
        "one upstream request"
    );
}

/// A fill on one node is served by the others from the shared store (`HIT`,
/// `detail=shared`), and a node started afterwards is warm.
#[tokio::test]
async fn a_fill_is_shared_and_a_new_node_starts_warm() {
    let (env, _redis) = cluster_env(Duration::ZERO).await;
    let b = node(&env, "node-1").await;
    joined(&[&env.proxy, &b]).await;
    let first = get(&env.proxy, "/market/indices").await;
    assert_eq!(header(&first, "x-cache"), "MISS");
    let body = first.bytes().await.unwrap();
    let shared = get(&b, "/market/indices").await;
    assert_eq!(header(&shared, "x-cache"), "HIT");
    assert!(
        header(&shared, "cache-status").ends_with("; detail=shared"),
        "{}",
        header(&shared, "cache-status")
    );
    assert_eq!(shared.bytes().await.unwrap(), body);

    b.shutdown().await;
    let restarted = node(&env, "node-1").await;
    joined(&[&restarted]).await;
    let warm = get(&restarted, "/market/indices").await;
    assert_eq!(header(&warm, "x-cache"), "HIT");
    assert_eq!(warm.bytes().await.unwrap(), body);
    assert_eq!(env.sim.hits("/market/indices"), 1);
}

/// A purge on one node drops the key from the shared store and from every node's
/// own cache: the next request anywhere asks the upstream again.
#[tokio::test]
async fn a_purge_on_one_node_is_seen_by_all() {
    let (env, _redis) = cluster_env(Duration::ZERO).await;
    let b = node(&env, "node-1").await;
    joined(&[&env.proxy, &b]).await;
    get(&env.proxy, "/market/indices").await;
    assert_eq!(header(&get(&b, "/market/indices").await, "x-cache"), "HIT");
    let admin = env.proxy.admin_addr.unwrap();
    let purged = support::client()
        .post(format!("http://{admin}/purge?target=/market/indices"))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status(), 200);
    let store = b.state().cache().store().clone();
    assert!(
        support::eventually(Duration::from_secs(5), || {
            futures_util::FutureExt::now_or_never(store.get("/market/indices"))
                .flatten()
                .is_none()
        })
        .await,
        "node-1 still holds the purged key"
    );
    assert_eq!(header(&get(&b, "/market/indices").await, "x-cache"), "MISS");
    assert_eq!(env.sim.hits("/market/indices"), 2);
}

/// Redis stopped mid-test costs no client request: the nodes work alone (shown in
/// `/status`), and join again when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_costs_no_request_and_the_nodes_rejoin() {
    let (env, redis) = cluster_env(Duration::ZERO).await;
    let b = node(&env, "node-1").await;
    joined(&[&env.proxy, &b]).await;
    let port = redis.stop();
    for i in 0..20 {
        for n in [&env.proxy, &b] {
            let r = get(n, &format!("/stock/detail/{}", 600_000 + i)).await;
            assert!(r.status() == 200 || r.status() == 404, "{}", r.status());
        }
    }
    let cluster = env.proxy.state().cache().cluster().unwrap().clone();
    assert!(!cluster.is_up());
    let admin = env.proxy.admin_addr.unwrap();
    let status: serde_json::Value = support::client()
        .get(format!("http://{admin}/status.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["cluster"]["state"], "alone");
    assert!(
        !status.to_string().contains("redis://"),
        "no URL in /status.json"
    );

    let _back = Redis::on(port);
    joined(&[&env.proxy, &b]).await;
    let r = get(&env.proxy, "/market/indices").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&get(&b, "/market/indices").await, "x-cache"), "HIT");
}

/// `limits.upstream_rps` and `upstream_burst` hold for the cluster: a flood of
/// distinct cold keys on three nodes reaches the upstream at the cluster's rate, not
/// three times it (every window of one second holds at most burst + rate arrivals).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_holds_the_upstream_budget_under_a_flood() {
    let redis = Redis::start();
    let url = redis.url();
    let env = support::start_with(
        |_| {},
        |c| {
            c.cluster.redis_url = Secret::new(url);
            c.limits.upstream_rps = 4;
            c.limits.upstream_burst = 4;
            c.limits.client_wait_ms = 20_000;
        },
        Some(support::saturday()),
    )
    .await;
    let (b, c) = (node(&env, "node-1").await, node(&env, "node-2").await);
    joined(&[&env.proxy, &b, &c]).await;
    let nodes = Arc::new([env.proxy.base_url(), b.base_url(), c.base_url()]);
    let client = support::client();
    let asks = (0..24).map(|i| {
        let (nodes, client) = (Arc::clone(&nodes), client.clone());
        async move {
            client
                .get(format!("{}/stock/detail/{}", nodes[i % 3], 600_000 + i))
                .bearer_auth(support::TOKEN)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(asks).await;
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 404),
        "{statuses:?}"
    );
    let arrivals = env.sim.arrivals();
    assert_eq!(arrivals.len(), 24);
    let busiest = arrivals
        .iter()
        .map(|start| {
            arrivals
                .iter()
                .filter(|t| **t >= *start && t.duration_since(*start) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap();
    assert!(
        busiest <= 4 + 4 + 1,
        "{busiest} upstream requests within one second"
    );
    drop(redis);
}

/// A scheduled job fires on every node, and runs on one: the first to claim the
/// second it fired in.
#[tokio::test]
async fn a_scheduled_job_runs_once_per_cluster() {
    let (env, _redis) = cluster_env(Duration::ZERO).await;
    let b = node(&env, "node-1").await;
    joined(&[&env.proxy, &b]).await;
    let plans = mdproxy::ops::scheduler::configured(&[mdproxy::config::JobConfig {
        name: "watchlist".into(),
        cron: "0 0 * * * *".into(),
        targets: vec!["/stock/kline?code=600519&period=day".into()],
        session_only: false,
    }]);
    // The same instant on both nodes (one clock), so the same firing.
    for n in [&env.proxy, &b] {
        mdproxy::ops::scheduler::run(n.state(), &plans[0]).await;
    }
    assert_eq!(env.sim.hits("/stock/kline"), 1, "one run for the cluster");
}

/// Three subscribers on three nodes: one node leads the hub and polls the union of
/// their codes, the others take its boards; each subscriber gets only its own codes,
/// and the upstream sees one poll per interval for the cluster, not one per node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hub_poll_per_interval_for_the_cluster() {
    let redis = Redis::start();
    let url = redis.url();
    let env = support::start_with(
        |_| {},
        |c| {
            c.cluster.redis_url = Secret::new(url);
            c.hub.closed_interval_ms = 200;
        },
        Some(support::saturday()),
    )
    .await;
    let (b, c) = (node(&env, "node-1").await, node(&env, "node-2").await);
    joined(&[&env.proxy, &b, &c]).await;
    // Let the heartbeats count all three nodes before the first poll.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let mut readers = Vec::new();
    for (n, code) in [(&env.proxy, "600519"), (&b, "000001"), (&c, "300750")] {
        let r = get(n, &format!("/stock/indicator/realtime/sse?codes={code}")).await;
        assert_eq!(r.status(), 200);
        readers.push((code, support::SseReader::new(r)));
    }
    for (code, reader) in &mut readers {
        let event = reader
            .next_quote(Duration::from_secs(10))
            .await
            .expect("a quote from the cluster's poll");
        assert_eq!(event.codes(), [code.to_string()], "only its own code");
    }
    let before = env.sim.hits("/stock/list");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let polls = env.sim.hits("/stock/list") - before;
    // Ten intervals of 200 ms: about ten polls for the cluster (three nodes polling
    // on their own would make about thirty).
    assert!(polls <= 14, "{polls} upstream polls in 2 s");
    assert!(polls >= 5, "{polls} upstream polls in 2 s");
    drop(redis);
}

/// The leader of the hub can die: the node that followed it takes the lease when it
/// runs out and polls for its subscribers itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_node_takes_over_the_hub_when_the_leader_dies() {
    let redis = Redis::start();
    let url = redis.url();
    let env = support::start_with(
        |_| {},
        |c| {
            c.cluster.redis_url = Secret::new(url);
            c.hub.closed_interval_ms = 200;
            // The lease covers a poll's longest wait: keep it short here
            // (2 × 200 ms + 1,000 + 200 + 500 ms).
            c.upstream.timeout_ms = 1_000;
            c.limits.client_wait_ms = 200;
        },
        Some(support::saturday()),
    )
    .await;
    let (leader, follower) = (node(&env, "node-1").await, node(&env, "node-2").await);
    joined(&[&leader, &follower]).await;
    // The first subscriber's node polls first, so it leads.
    let r = get(&leader, "/stock/indicator/realtime/sse?codes=600519").await;
    let mut led = support::SseReader::new(r);
    assert!(led.next_quote(Duration::from_secs(10)).await.is_some());
    let r = get(&follower, "/stock/indicator/realtime/sse?codes=000001").await;
    let mut followed = support::SseReader::new(r);
    assert!(followed.next_quote(Duration::from_secs(10)).await.is_some());

    drop(led);
    leader.shutdown().await;
    // The lease (2.1 s) runs out; then the follower polls.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let before = env.sim.hits("/stock/list");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        env.sim.hits("/stock/list") > before,
        "nobody polls after the leader died"
    );
    drop(redis);
}

/// The Redis URL's password never shows: not in `/status`, not in `/metrics`, not
/// in the config's `Debug`.
#[tokio::test]
async fn the_redis_password_never_shows() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _redis = Redis::with(port, &["--requirepass", "s3cret-pw"]);
    let url = format!("redis://:s3cret-pw@127.0.0.1:{port}/0");
    let env = support::start_with(
        |_| {},
        |c| {
            c.cluster.redis_url = Secret::new(url);
            c.admin.listen = "127.0.0.1:0".into();
        },
        Some(support::saturday()),
    )
    .await;
    joined(&[&env.proxy]).await;
    let admin = env.proxy.admin_addr.unwrap();
    for page in ["status", "metrics"] {
        let text = support::text(&format!("http://{admin}/{page}")).await;
        assert!(!text.contains("s3cret-pw"), "{page}: {text}");
    }
    let config = format!("{:?}", env.proxy.state().snapshot().config);
    assert!(!config.contains("s3cret-pw"));
}
