//! The fleet on a Redis Cluster (issue 30, `cluster.mode = "cluster"`), against
//! real processes on loopback: three masters with a replica each, three mdproxy
//! nodes given two of the masters as seeds. Fills are shared and coalesced across
//! nodes whose keys land on different shards, a purge by prefix reaches every
//! shard and every node, the scripts that read two keys (quota, hub lease) run on
//! one shard by their hash tag; and a shard's master killed under load (the shard
//! that carries the events channel) costs no request, the nodes follow the
//! promoted replica and hear the events again; and the same cluster over TLS with
//! an ACL user shares fills and purges; servers without sharded pub/sub get the
//! classic kind. Every server is `redis-server`
//! (Debian's 7.0: sharded pub/sub is there); `scripts/test` installs it.

use crate::support;

use std::time::Duration;

use mdproxy_config::{Config, Secret};
use mdproxy_core::app::App;
use mdproxy_fleet::limits::{QuotaAsk, QuotaVerdict};
use support::redis::{
    RedisCluster, at_once, certificates, forgotten, get, joined, node, purge, scratch,
    through_failover,
};
use support::{Env, header};

const DETAIL: &str = "/stock/detail/{code}";
/// Shards of the test cluster.
const SHARDS: usize = 3;
/// Within this of a shard master's death every node uses the promoted replica.
/// Measured on the 2-core machine: about 2 to 4 s (the cluster's node timeout of
/// 1 s, the replica's election, then a node's 0.5 s retry); generous for a
/// loaded machine.
const FOLLOW_WITHIN: Duration = Duration::from_secs(30);

/// A simulator (`latency_ms`), and three nodes on `redis` that know two of its
/// masters; all joined.
async fn on_cluster(redis: &RedisCluster, latency_ms: u64) -> (Env, App, App) {
    on_cluster_as(redis, latency_ms, |_| {}).await
}

/// [`on_cluster`], the nodes' config as `configure` leaves it.
async fn on_cluster_as(
    redis: &RedisCluster,
    latency_ms: u64,
    configure: impl FnOnce(&mut Config),
) -> (Env, App, App) {
    let seeds = redis.seeds()[..2].to_vec();
    let env = support::start_with(
        |s| s.latency_ms = latency_ms,
        |c| {
            c.cluster.mode = "cluster".into();
            c.cluster.nodes = seeds;
            c.cluster.node_id = "node-0".into();
            c.admin.listen = "127.0.0.1:0".into();
            c.admin.token = Secret::new("admin-secret");
            configure(c);
        },
        Some(support::saturday()),
    )
    .await;
    let (b, c) = (node(&env, "node-1").await, node(&env, "node-2").await);
    joined(&[&env.proxy, &b, &c]).await;
    (env, b, c)
}

/// `target` filled on `filler` is a shared hit on each of `readers`; purged on
/// node-0, it leaves every reader's memory (the purge's event reached them).
async fn shared_then_purged(env: &Env, filler: &App, readers: &[&App], target: &str) {
    assert_eq!(header(&get(filler, target).await, "x-cache"), "MISS");
    for n in readers {
        let shared = get(n, target).await;
        assert!(
            header(&shared, "cache-status").ends_with("; detail=shared"),
            "{target}: {}",
            header(&shared, "cache-status")
        );
    }
    purge(env, &format!("target={target}")).await;
    assert!(
        forgotten(readers, &[target.to_owned()]).await,
        "the purge of {target} never reached the other nodes"
    );
}

/// The shared entries on each shard.
async fn entries_by_shard(redis: &RedisCluster) -> Vec<usize> {
    let mut counts = Vec::new();
    for i in 0..SHARDS {
        counts.push(redis.keys_on(i, "mdproxy:v1:entry:*").await.len());
    }
    counts
}

/// Shared fills, coalescing and a purge by prefix across shards; the two-key
/// scripts on one shard; the status page names the three masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn fills_coalescing_and_purges_work_across_shards() {
    let redis = RedisCluster::start(SHARDS).await;
    let (env, b, c) = on_cluster(&redis, 200).await;
    let nodes = [&env.proxy, &b, &c];

    // Twelve listed codes, each filled on one node and then a shared hit on the
    // next.
    let codes: Vec<String> = support::listed_codes(12);
    for (i, code) in codes.iter().enumerate() {
        let target = format!("/stock/detail/{code}");
        let first = get(nodes[i % 3], &target).await;
        assert_eq!(header(&first, "x-cache"), "MISS", "{target}");
        let shared = get(nodes[(i + 1) % 3], &target).await;
        assert!(
            header(&shared, "cache-status").ends_with("; detail=shared"),
            "{target}: {}",
            header(&shared, "cache-status")
        );
    }
    assert_eq!(env.sim.hits(DETAIL), 12, "one upstream request a code");
    let spread = entries_by_shard(&redis).await;
    assert_eq!(spread.iter().sum::<usize>(), 12, "{spread:?}");
    assert!(
        spread.iter().filter(|n| **n > 0).count() >= 2,
        "the entries sit on one shard: {spread:?}"
    );

    // 90 simultaneous requests for one cold key over the three nodes: one
    // upstream request (the lock and the announcement on their shards).
    let answers = at_once(&nodes, "/stock/detail/600519", 90).await;
    assert!(answers.iter().all(|(s, b)| *s == 200 && *b == answers[0].1));
    assert_eq!(env.sim.hits_for("/stock/detail/600519"), 1, "coalesced");

    // A purge by prefix on node-0 empties every shard and every node's memory.
    let admin = env.proxy.admin_addr.unwrap();
    purge(&env, "prefix=/stock/detail/").await;
    assert_eq!(entries_by_shard(&redis).await, vec![0; SHARDS]);
    let keys: Vec<String> = codes.iter().map(|c| format!("/stock/detail/{c}")).collect();
    assert!(
        forgotten(&nodes, &keys).await,
        "a node still holds a purged key"
    );
    let again = get(&c, &format!("/stock/detail/{}", codes[3])).await;
    assert_eq!(header(&again, "x-cache"), "MISS");

    // The quota script reads the minute's and the day's count together, the hub's
    // lease the holder and the term: each pair on one shard by its hash tag.
    let limits = env.proxy.state().fleet().limits().clone();
    let ask = QuotaAsk {
        per_minute: 2,
        per_day: 100,
        reserve: 0,
        client: true,
        minute: 29_000_000,
        day: "2026-03-07".into(),
        minute_ends_in: Duration::from_secs(30),
        day_ends_in: Duration::from_secs(3_600),
    };
    let mut verdicts = Vec::new();
    for _ in 0..3 {
        verdicts.push(limits.take_quota("t", ask.clone()).await.unwrap().verdict);
    }
    assert_eq!(
        verdicts,
        [
            QuotaVerdict::Counted,
            QuotaVerdict::Counted,
            QuotaVerdict::MinuteSpent
        ]
    );
    let lease = Duration::from_secs(5);
    let first = env.proxy.state().fleet().leadership().lead_hub(lease).await;
    let second = b.state().fleet().leadership().lead_hub(lease).await;
    // Both answered (a cross-slot script would fail), and one of them at most
    // leads (the hub of a third node may hold the lease).
    let leaders = [first, second]
        .iter()
        .filter(|t| matches!(t, Ok(Some(_))))
        .count();
    assert!(
        first.is_ok() && second.is_ok() && leaders <= 1,
        "{first:?} {second:?}"
    );

    let status = support::json(&format!("http://{admin}/status.json")).await;
    assert_eq!(status["cluster"]["state"], "up");
    let shown = status["cluster"]["redis"].as_str().unwrap().to_owned();
    for i in 0..SHARDS {
        let port = redis.serving(i).await;
        assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    }
    b.shutdown().await;
    c.shutdown().await;
}

/// A shard's master killed under load: the shard of the events channel, so that
/// fills' announcements and purges must find the promoted replica. No request
/// fails; every node uses the new master within [`FOLLOW_WITHIN`]; the upstream
/// requests stay within what working alone in the window costs (one per node for
/// each code asked in it); afterwards a purge on one node reaches the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn a_shard_failover_costs_no_request() {
    let mut redis = RedisCluster::start(SHARDS).await;
    let (env, b, c) = on_cluster(&redis, 0).await;
    let nodes: [&App; 3] = [&env.proxy, &b, &c];
    let shard = redis.shard_of("mdproxy:v1:events").await;
    let promoted = redis.replicas[shard].port;

    let on_promoted = format!("127.0.0.1:{promoted}");
    let followed = |n: &App| {
        let c = n.state().cluster().unwrap();
        c.is_up() && c.redis_address().contains(&on_promoted)
    };
    let master = redis.masters[shard].take().unwrap();
    through_failover(
        &env,
        &nodes,
        "shard failover",
        FOLLOW_WITHIN,
        || master.stop(),
        followed,
    )
    .await;

    for n in nodes {
        assert_eq!(n.state().cluster().unwrap().failovers(), 1);
    }

    // The events channel lives on the promoted replica now: a fill is shared and
    // a purge on node-0 reaches node-2's memory.
    shared_then_purged(&env, &c, &[&b], "/stock/detail/600777").await;
    b.shutdown().await;
    c.shutdown().await;
}

/// TLS and an ACL user on a Redis Cluster: TLS between the shards too, the nodes
/// given `rediss://` seeds, the CA and a client certificate, and the user
/// `mdproxy` (its keys and channels only). Fills are shared across shards, a purge
/// by prefix `SCAN`s every master over TLS, and the two-key scripts run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn a_tls_cluster_with_an_acl_user_is_shared() {
    let files = certificates(&scratch("cluster-tls"));
    let redis = RedisCluster::start_tls(SHARDS, &files).await;
    let [ca, _, _, client_cert, client_key] = files.clone();
    let (env, b, c) = on_cluster_as(&redis, 0, |c| {
        c.cluster.username = "mdproxy".into();
        c.cluster.password = Secret::new("acl-pa55");
        c.cluster.tls_ca_file = ca;
        c.cluster.tls_cert_file = client_cert;
        c.cluster.tls_key_file = client_key;
    })
    .await;
    let codes = support::listed_codes(9);
    for (i, code) in codes.iter().enumerate() {
        let target = format!("/stock/detail/{code}");
        assert_eq!(header(&get(&env.proxy, &target).await, "x-cache"), "MISS");
        let shared = get([&b, &c][i % 2], &target).await;
        assert!(
            header(&shared, "cache-status").ends_with("; detail=shared"),
            "{target}: {}",
            header(&shared, "cache-status")
        );
    }
    let spread = entries_by_shard(&redis).await;
    assert_eq!(spread.iter().sum::<usize>(), 9, "{spread:?}");
    purge(&env, "prefix=/stock/detail/").await;
    assert_eq!(entries_by_shard(&redis).await, vec![0; SHARDS]);
    let lease = Duration::from_secs(5);
    assert!(b.state().fleet().leadership().lead_hub(lease).await.is_ok());
    let admin = env.proxy.admin_addr.unwrap();
    let status = support::json(&format!("http://{admin}/status.json")).await;
    assert_eq!(status["cluster"]["state"], "up");
    let shown = status["cluster"]["redis"].as_str().unwrap();
    assert_eq!(shown.split(',').count(), SHARDS, "{shown}");
    assert!(!status.to_string().contains("acl-pa55"));
    b.shutdown().await;
    c.shutdown().await;
}

/// A Redis Cluster whose servers lack sharded pub/sub (Redis 6; here the two
/// commands renamed away): the nodes fall back to the classic kind, which the
/// cluster's bus carries to every node, so a purge on one node still reaches the
/// others' memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server: scripts/test installs it and runs the ignored tests"]
async fn without_sharded_pub_sub_the_events_take_the_classic_kind() {
    let without = [
        "--rename-command",
        "SSUBSCRIBE",
        "",
        "--rename-command",
        "SPUBLISH",
        "",
    ];
    let redis = RedisCluster::start_with(SHARDS, &without).await;
    let refused = support::redis::ask::<i64>(
        redis.serving(0).await,
        redis::cmd("SPUBLISH").arg("mdproxy:v1:events").arg("x"),
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("unknown command"), "{refused}");
    let (env, b, c) = on_cluster(&redis, 0).await;
    shared_then_purged(&env, &env.proxy, &[&b, &c], "/stock/detail/600519").await;
    b.shutdown().await;
    c.shutdown().await;
}
