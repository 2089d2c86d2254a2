//! The fleet on a highly available Redis (issue 30), against real processes on
//! loopback: a master, a replica and three sentinels whose master is killed while
//! three nodes serve (no request fails, the nodes follow the promoted replica by
//! themselves, the upstream requests of the window stay within what working alone
//! costs, shared fills work again), and a TLS Redis with an ACL user (a node
//! with the user's password, a CA file and a client certificate shares its fills;
//! one with a wrong password says why, works alone and never shows a password).
//! After the failover one node polls the hub for the cluster again within one
//! lease. The sentinels can be asked over TLS too. Every server is `redis-server` (Debian's 7.0; sentinels are `redis-server
//! --sentinel`); `scripts/test` installs it where it is missing.

use crate::support;

use std::time::Duration;

use mdproxy_config::{Config, Secret};
use mdproxy_core::app::App;
use support::redis::{
    ACL_USER, Lines, MASTER, Redis, certificates, free_port, get, joined, node, one_node_polls,
    scratch, sentinel_topology, through_failover,
};
use support::{Env, header};

/// The bound within which every node uses the promoted replica, from the master's
/// death. Measured on the 2-core CI machine: about 2 to 4 s (down-after 0.5 s, the
/// sentinels' vote and promotion, then one of the nodes' 0.5 s retries); the bound
/// is generous so that a loaded machine does not fail it.
const FOLLOW_WITHIN: Duration = Duration::from_secs(30);

/// A simulator and a first node (`node-0`) on the sentinels of `sentinels`, on the
/// Saturday clock, its config as `configure` leaves it.
async fn on_sentinels(sentinels: &[Redis], configure: impl FnOnce(&mut Config)) -> Env {
    let addrs: Vec<String> = sentinels.iter().map(Redis::addr).collect();
    support::start_with(
        |_| {},
        |c| {
            c.cluster.sentinels = addrs;
            c.cluster.sentinel_master = MASTER.into();
            c.cluster.node_id = "node-0".into();
            configure(c);
        },
        Some(support::saturday()),
    )
    .await
}

/// A fill on `a` is served by `b` from the shared store.
async fn shares_a_fill(env: &Env, a: &App, b: &App, target: &str, endpoint: &str) {
    let before = env.sim.hits(endpoint);
    let first = get(a, target).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-cache"), "MISS");
    let shared = get(b, target).await;
    assert_eq!(header(&shared, "x-cache"), "HIT");
    assert!(
        header(&shared, "cache-status").ends_with("; detail=shared"),
        "{}",
        header(&shared, "cache-status")
    );
    assert_eq!(env.sim.hits(endpoint), before + 1, "one upstream request");
}

/// Sentinel failover under load: the master is killed while three nodes serve
/// warm and cold keys; no request fails (the nodes work alone in the window), all
/// follow the promoted replica within [`FOLLOW_WITHIN`] without a restart, count
/// one failover, show the new address, and share fills again. The upstream
/// requests are counted: in the window (from the kill until the last node
/// follows) at most one per node for each key asked in it, and over the whole run
/// at most one per key plus one per other node for each key asked in the window
/// (what working alone costs, and no more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn the_nodes_follow_a_sentinel_failover_and_no_request_fails() {
    let (master, replica, sentinels) = sentinel_topology().await;
    let env = on_sentinels(&sentinels, |c| c.admin.listen = "127.0.0.1:0".into()).await;
    let (b, c) = (node(&env, "node-1").await, node(&env, "node-2").await);
    let nodes: [&App; 3] = [&env.proxy, &b, &c];
    joined(&nodes).await;
    for n in nodes {
        assert_eq!(n.state().cluster().unwrap().redis_address(), master.addr());
    }
    shares_a_fill(&env, &env.proxy, &b, "/market/indices", "/market/indices").await;

    // Requests on the three nodes all through the failover, warm and cold codes.
    let promoted = replica.addr();
    let followed = |n: &App| {
        let c = n.state().cluster().unwrap();
        c.is_up() && c.redis_address() == promoted
    };
    through_failover(
        &env,
        &nodes,
        "sentinel failover",
        FOLLOW_WITHIN,
        || master.stop(),
        followed,
    )
    .await;

    for n in nodes {
        let cluster = n.state().cluster().unwrap();
        assert_eq!(cluster.failovers(), 1);
        assert!(cluster.alone_for() > Duration::ZERO);
    }
    shares_a_fill(
        &env,
        &b,
        &env.proxy,
        "/stock/detail/600519",
        "/stock/detail/{code}",
    )
    .await;
    let admin = env.proxy.admin_addr.unwrap();
    let status = support::json(&format!("http://{admin}/status.json")).await;
    assert_eq!(status["cluster"]["redis"], promoted.as_str());
    assert_eq!(status["cluster"]["failovers"], 1);
    let metrics = support::text(&format!("http://{admin}/metrics")).await;
    assert!(
        metrics.contains(&format!(
            "mdproxy_cluster_redis_info{{address=\"{promoted}\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("mdproxy_cluster_failovers_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mdproxy_cluster_alone_seconds_total "),
        "{metrics}"
    );
    b.shutdown().await;
    c.shutdown().await;
    drop(sentinels);
}

/// The hub's lease through a Sentinel failover: in the window every node polls for
/// its own subscribers (alone, as when Redis is down); once every node uses the
/// promoted replica, one lease later, one node polls for the cluster again (the
/// lease and its term may have been lost with the old master: the first node to
/// ask the new one takes it, the others follow its boards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn one_node_polls_the_hub_again_one_lease_after_a_failover() {
    let (master, replica, sentinels) = sentinel_topology().await;
    let env = on_sentinels(&sentinels, |c| {
        c.hub.closed_interval_ms = 200;
        // The lease covers a poll's longest wait: 2 × 200 ms + 1,000 + 200 + 500 ms.
        c.upstream.timeout_ms = 1_000;
        c.limits.client_wait_ms = 200;
    })
    .await;
    const LEASE: Duration = Duration::from_millis(2_100);
    let (b, c) = (node(&env, "node-1").await, node(&env, "node-2").await);
    let nodes: [&App; 3] = [&env.proxy, &b, &c];
    joined(&nodes).await;
    let mut readers = Vec::new();
    for (n, code) in nodes.iter().zip(["600519", "000001", "300750"]) {
        let r = get(n, &format!("/stock/indicator/realtime/sse?codes={code}")).await;
        assert_eq!(r.status(), 200);
        let mut reader = support::SseReader::new(r);
        assert!(reader.next_quote(Duration::from_secs(10)).await.is_some());
        readers.push(reader);
    }
    master.stop();
    let promoted = replica.addr();
    let followed = |n: &App| {
        let c = n.state().cluster().unwrap();
        c.is_up() && c.redis_address() == promoted
    };
    assert!(
        support::eventually(FOLLOW_WITHIN, || nodes.iter().all(|n| followed(n))).await,
        "the nodes did not follow within {FOLLOW_WITHIN:?}"
    );
    tokio::time::sleep(LEASE).await;
    one_node_polls(&env.sim, &nodes).await;
    // A new subscriber on each node, for a code nobody asked before, gets its
    // quote: registered with the new master, in the leader's union, on its board.
    for (n, code) in nodes.iter().zip(["601318", "000858", "600036"]) {
        let r = get(n, &format!("/stock/indicator/realtime/sse?codes={code}")).await;
        let event = support::SseReader::new(r)
            .next_quote(Duration::from_secs(10))
            .await
            .expect("a quote after the failover");
        assert_eq!(event.codes(), [code.to_owned()]);
    }
    drop(readers);
    b.shutdown().await;
    c.shutdown().await;
    drop(sentinels);
}

/// TLS and an ACL user: a Redis that speaks only TLS (client certificates
/// required) and knows only the user `mdproxy` (its keys and channels under
/// `mdproxy:`). Two nodes with the user, its password, the CA and a client
/// certificate share a fill; a third with a wrong password says why at start
/// (Redis's reason, never a password), serves alone, and no page, metric or log
/// line holds either password.
#[tokio::test]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn a_tls_redis_with_an_acl_user_is_shared_and_a_wrong_password_fails_closed() {
    let lines = Lines::default();
    let _guard = lines.capture();
    let dir = scratch("tls");
    let [ca, server_cert, server_key, client_cert, client_key] = certificates(&dir);
    let port = free_port();
    let port_text = port.to_string();
    let args: Vec<String> = [
        "--port",
        "0",
        "--tls-port",
        &port_text,
        "--bind",
        "127.0.0.1",
        "--tls-cert-file",
        &server_cert,
        "--tls-key-file",
        &server_key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "yes",
        "--user",
        "default",
        "off",
    ]
    .into_iter()
    .chain(ACL_USER)
    .chain(["--save", "", "--appendonly", "no"])
    .map(str::to_owned)
    .collect();
    let _redis = Redis::spawn(&args, port, None);
    let env = support::start_with(
        |_| {},
        |c| {
            c.cluster.redis_url = Secret::new(format!("rediss://127.0.0.1:{port}/0"));
            c.cluster.username = "mdproxy".into();
            c.cluster.password = Secret::new("acl-pa55");
            c.cluster.tls_ca_file = ca.clone();
            c.cluster.tls_cert_file = client_cert.clone();
            c.cluster.tls_key_file = client_key.clone();
            c.cluster.node_id = "node-0".into();
            c.admin.listen = "127.0.0.1:0".into();
        },
        Some(support::saturday()),
    )
    .await;
    let b = node(&env, "node-1").await;
    for n in [&env.proxy, &b] {
        let cluster = n.state().cluster().unwrap().clone();
        assert!(
            support::eventually(Duration::from_secs(20), || cluster.is_up()).await,
            "node never joined: {}",
            lines.text()
        );
    }
    assert_eq!(
        env.proxy.state().cluster().unwrap().redis_address(),
        format!("127.0.0.1:{port}")
    );
    shares_a_fill(&env, &env.proxy, &b, "/market/indices", "/market/indices").await;

    let mut wrong = (*env.proxy.state().snapshot().config).clone();
    wrong.server.listen = "127.0.0.1:0".into();
    wrong.admin.listen = "127.0.0.1:0".into();
    wrong.cluster.node_id = "wrong-pw".into();
    wrong.cluster.password = Secret::new("wr0ng-pa55");
    let alone = mdproxy_core::app::start(&wrong, env.clock.clone().unwrap())
        .await
        .unwrap();
    let said = || {
        let text = lines.text();
        text.lines()
            .any(|l| l.contains("Redis unreachable at start") && l.contains("wrong-pw"))
    };
    assert!(
        support::eventually(Duration::from_secs(10), said).await,
        "{}",
        lines.text()
    );
    assert!(
        lines.text().contains("Password authentication failed"),
        "Redis's reason is said: {}",
        lines.text()
    );
    assert!(!alone.state().cluster().unwrap().is_up());
    let before = env.sim.hits("/market/indices");
    let own = get(&alone, "/market/indices").await;
    assert_eq!(own.status(), 200);
    assert_eq!(header(&own, "x-cache"), "MISS", "alone: its own fill");
    assert_eq!(env.sim.hits("/market/indices"), before + 1);

    for n in [&env.proxy, &alone] {
        let admin = n.admin_addr.unwrap();
        for page in ["status", "status.json", "metrics"] {
            let text = support::text(&format!("http://{admin}/{page}")).await;
            for secret in ["acl-pa55", "wr0ng-pa55"] {
                assert!(!text.contains(secret), "{page}: {text}");
            }
        }
    }
    for secret in ["acl-pa55", "wr0ng-pa55"] {
        assert!(!lines.text().contains(secret), "{}", lines.text());
    }
    alone.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// TLS to the sentinels too (`sentinel_tls`): a master and a sentinel that both
/// speak TLS (the sentinel watches the master over TLS). Two nodes that ask the
/// sentinel over TLS find the master's TLS address and share a fill; a node that
/// asks the same TLS port in plain text finds nothing and works alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn the_sentinels_are_asked_over_tls() {
    let files = certificates(&scratch("sentinel-tls"));
    let (master, master_tls) = Redis::with_tls(free_port(), &files);
    let (sentinel, sentinel_tls) = Redis::tls_sentinel(MASTER, master_tls, &files);
    let ask_master = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER)
        .clone();
    assert!(
        support::eventually_async(Duration::from_secs(30), || async {
            let found: Option<(String, u16)> = support::redis::ask(sentinel.port, &ask_master)
                .await
                .unwrap_or_default();
            found.is_some_and(|(_, port)| port == master_tls)
        })
        .await,
        "the sentinel never named the master"
    );
    let [ca, _, _, client_cert, client_key] = files.clone();
    let tls = move |c: &mut Config| {
        c.cluster.sentinels = vec![format!("127.0.0.1:{sentinel_tls}")];
        c.cluster.sentinel_master = MASTER.into();
        c.cluster.tls = true;
        c.cluster.sentinel_tls = true;
        c.cluster.tls_ca_file = ca;
        c.cluster.tls_cert_file = client_cert;
        c.cluster.tls_key_file = client_key;
        c.cluster.node_id = "node-0".into();
    };
    let env = support::start_with(|_| {}, tls, Some(support::saturday())).await;
    let b = node(&env, "node-1").await;
    joined(&[&env.proxy, &b]).await;
    assert_eq!(
        env.proxy.state().cluster().unwrap().redis_address(),
        format!("127.0.0.1:{master_tls}")
    );
    shares_a_fill(&env, &env.proxy, &b, "/market/indices", "/market/indices").await;

    let mut plain = (*env.proxy.state().snapshot().config).clone();
    plain.server.listen = "127.0.0.1:0".into();
    plain.cluster.node_id = "node-plain".into();
    plain.cluster.sentinel_tls = false;
    let alone = mdproxy_core::app::start(&plain, env.clock.clone().unwrap())
        .await
        .unwrap();
    // Refused, not merely slow: two attempts ended in an error, and the node never
    // joined.
    let cluster = alone.state().cluster().unwrap().clone();
    assert!(
        support::eventually(Duration::from_secs(20), || cluster.failed_sessions() >= 2).await,
        "the node never finished an attempt"
    );
    assert!(
        !cluster.is_up() && cluster.redis_address().is_empty(),
        "a plain-text ask of a TLS sentinel found the master"
    );
    alone.shutdown().await;
    b.shutdown().await;
    drop((master, sentinel));
}
