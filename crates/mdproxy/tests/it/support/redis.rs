//! Real Redis processes for the cluster tests: `redis-server` children (a plain
//! server, a replica, a sentinel, a TLS server) on loopback ports, killed when
//! dropped, a log collector to check what a node said (and never said), and the
//! nodes of a cluster (another node, all joined, a request to one).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A loopback port nothing listens on now (Redis cannot bind `:0` and say which
/// port it took: the port of a dropped listener is the nearest thing).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `redis-server` child on a loopback port, killed when dropped (its scratch
/// directory removed).
pub struct Redis {
    pub port: u16,
    child: Child,
    dir: Option<PathBuf>,
}

impl Redis {
    /// A plain Redis on a free port.
    pub fn start() -> Redis {
        Redis::on(free_port())
    }

    /// A plain Redis on `port`.
    pub fn on(port: u16) -> Redis {
        Redis::with(port, &[])
    }

    /// On `port` with extra arguments (`--requirepass`), nothing saved; what a
    /// replica receives from its master lands in a scratch directory of its own.
    pub fn with(port: u16, extra: &[&str]) -> Redis {
        let dir = scratch(&format!("server-{port}"));
        let mut args = vec![
            "--port".to_owned(),
            port.to_string(),
            "--bind".to_owned(),
            "127.0.0.1".to_owned(),
            "--dir".to_owned(),
            dir.display().to_string(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args.extend(["--save", "", "--appendonly", "no"].map(str::to_owned));
        Redis::spawn(&args, port, Some(dir))
    }

    /// A sentinel on a free port watching `master` (as `name`) with quorum 2,
    /// declaring it down after `down_after_ms`.
    pub fn sentinel(name: &str, master: u16, down_after_ms: u64) -> Redis {
        let port = free_port();
        let dir = scratch(&format!("sentinel-{port}"));
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {name} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {name} {down_after_ms}\n\
                 sentinel failover-timeout {name} 10000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir.display()
            ),
        )
        .unwrap();
        let args = [conf.display().to_string(), "--sentinel".to_owned()];
        Redis::spawn(&args, port, Some(dir))
    }

    /// A Redis on `port` that also speaks TLS on a second port (the returned one),
    /// with the server certificate of `tls` (from [`certificates`]), client
    /// certificates optional.
    pub fn with_tls(port: u16, tls: &[String; 5]) -> (Redis, u16) {
        let tls_port = free_port();
        let tls_port_text = tls_port.to_string();
        let redis = Redis::with(port, &tls_args(&tls_port_text, tls));
        (redis, tls_port)
    }

    /// A sentinel watching the master at `127.0.0.1:master` (as `name`, quorum 1,
    /// over TLS), on a plain port and on a TLS port (the returned one).
    pub fn tls_sentinel(name: &str, master: u16, tls: &[String; 5]) -> (Redis, u16) {
        let (port, tls_port) = (free_port(), free_port());
        let dir = scratch(&format!("sentinel-{port}"));
        let conf = dir.join("sentinel.conf");
        let [ca, cert, key, _, _] = tls;
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 tls-port {tls_port}\ntls-cert-file {cert}\ntls-key-file {key}\n\
                 tls-ca-cert-file {ca}\ntls-auth-clients optional\ntls-replication yes\n\
                 sentinel monitor {name} 127.0.0.1 {master} 1\n",
                dir.display()
            ),
        )
        .unwrap();
        let args = [conf.display().to_string(), "--sentinel".to_owned()];
        (Redis::spawn(&args, port, Some(dir)), tls_port)
    }

    /// `redis-server args`, waited for until `port` accepts.
    pub fn spawn(args: &[String], port: u16, dir: Option<PathBuf>) -> Redis {
        let child = Command::new(mdproxy_testkit::outside::program("redis-server"))
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        // Owned at once, so it is killed and waited for whatever happens next.
        let redis = Redis { port, child, dir };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..300 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not listen on {addr}");
    }

    /// `redis://127.0.0.1:port/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills it (no save, no goodbye) and gives its port back.
    pub fn stop(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The ACL user `mdproxy` (password `acl-pa55`) with its keys and channels under
/// `mdproxy:`, as `redis-server` arguments.
pub const ACL_USER: [&str; 7] = [
    "--user",
    "mdproxy",
    "on",
    ">acl-pa55",
    "~mdproxy:*",
    "&mdproxy:*",
    "+@all",
];

/// The arguments that make a server speak TLS on `tls_port` too, with the server
/// certificate of `tls` (from [`certificates`]), client certificates optional.
fn tls_args<'a>(tls_port: &'a str, tls: &'a [String; 5]) -> [&'a str; 10] {
    let [ca, cert, key, _, _] = tls;
    [
        "--tls-port",
        tls_port,
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key,
        "--tls-ca-cert-file",
        ca,
        "--tls-auth-clients",
        "optional",
    ]
}

/// A fresh directory under the test target's scratch space.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("redis-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Log lines written by the process, collected for a test (tasks on a
/// current-thread runtime write through the test thread's subscriber).
#[derive(Clone, Default)]
pub struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A subscriber writing here (plain text) for the current thread, while the
    /// guard lives.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
}

/// Another node of `env`'s cluster: same simulator, same Redis settings, same clock.
pub async fn node(env: &super::Env, name: &str) -> mdproxy_core::app::App {
    let mut config = (*env.proxy.state().snapshot().config).clone();
    config.server.listen = "127.0.0.1:0".into();
    config.cluster.node_id = name.into();
    let clock = env.clock.clone().expect("a manual clock");
    mdproxy_core::app::start(&config, clock).await.unwrap()
}

/// Waits until every node's Redis link is up.
pub async fn joined(nodes: &[&mdproxy_core::app::App]) {
    for n in nodes {
        let cluster = n.state().cluster().unwrap().clone();
        assert!(
            super::eventually(Duration::from_secs(20), || cluster.is_up()).await,
            "node never joined"
        );
    }
}

/// `GET target` on `node` with the test token.
pub async fn get(node: &mdproxy_core::app::App, target: &str) -> reqwest::Response {
    super::client()
        .get(format!("{}{target}", node.base_url()))
        .bearer_auth(super::TOKEN)
        .send()
        .await
        .unwrap()
}

/// The answer to `cmd` from the Redis (or sentinel) on `port`.
pub async fn ask<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    cmd.query_async(&mut conn).await
}

/// A Redis Cluster on loopback: `masters` shards, each with one replica, the
/// slots split evenly; formed with `CLUSTER ADDSLOTSRANGE`, `MEET` and
/// `REPLICATE` (Redis 7), a node declared failing after 1 s of silence. The
/// helpers here ask each node on its plain port.
pub struct RedisCluster {
    /// The masters as formed, shard by shard (a failover does not reorder them).
    pub masters: Vec<Option<Redis>>,
    /// Each master's replica, same order.
    pub replicas: Vec<Redis>,
    /// The first slot of each shard, same order.
    pub first_slots: Vec<u16>,
    /// Each master's TLS port, same order (none without TLS).
    tls_ports: Vec<u16>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Forms the cluster and waits until every node says `cluster_state:ok` and
    /// every replica is in sync.
    pub async fn start(masters: usize) -> RedisCluster {
        RedisCluster::form(masters, None, &[]).await
    }

    /// The same, each server with `extra` arguments (`--rename-command ...`).
    pub async fn start_with(masters: usize, extra: &[&str]) -> RedisCluster {
        RedisCluster::form(masters, None, extra).await
    }

    /// The same, with TLS besides the plain port (`tls` from [`certificates`]):
    /// TLS between the nodes too, client certificates optional, and the ACL user
    /// `mdproxy` (password `acl-pa55`, its keys and channels under `mdproxy:`);
    /// [`RedisCluster::seeds`] are then `rediss://` URLs.
    pub async fn start_tls(masters: usize, tls: &[String; 5]) -> RedisCluster {
        RedisCluster::form(masters, Some(tls), &[]).await
    }

    async fn form(masters: usize, tls: Option<&[String; 5]>, extra: &[&str]) -> RedisCluster {
        let dir = scratch(&format!("cluster-{}", free_port()));
        // The bus port is given: the default (the port + 10,000) may not exist.
        let node = |port: u16| {
            let conf = dir.join(format!("nodes-{port}.conf"));
            let bus = free_port();
            let mut args: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf.display().to_string(),
                "--cluster-port",
                &bus.to_string(),
                "--cluster-node-timeout",
                "1000",
                "--repl-diskless-sync-delay",
                "0",
            ]
            .map(str::to_owned)
            .to_vec();
            let tls_port = tls.map(|tls| {
                let tls_port = free_port();
                args.extend(tls_args(&tls_port.to_string(), tls).map(str::to_owned));
                args.extend(
                    ["--tls-cluster", "yes", "--tls-replication", "yes"]
                        .into_iter()
                        .chain(ACL_USER)
                        .map(str::to_owned),
                );
                tls_port
            });
            args.extend(extra.iter().map(|a| (*a).to_owned()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            (Redis::with(port, &args), bus, tls_port)
        };
        let primaries: Vec<(Redis, u16, Option<u16>)> =
            (0..masters).map(|_| node(free_port())).collect();
        let replicas: Vec<(Redis, u16, Option<u16>)> =
            (0..masters).map(|_| node(free_port())).collect();
        let tls_ports: Vec<u16> = primaries.iter().filter_map(|p| p.2).collect();
        let buses: std::collections::HashMap<u16, u16> = primaries
            .iter()
            .chain(&replicas)
            .map(|(r, bus, _)| (r.port, *bus))
            .collect();
        let primaries: Vec<Redis> = primaries.into_iter().map(|p| p.0).collect();
        let replicas: Vec<Redis> = replicas.into_iter().map(|p| p.0).collect();
        let per = 16_384 / masters;
        let first_slots: Vec<u16> = (0..masters).map(|i| (i * per) as u16).collect();
        for (i, m) in primaries.iter().enumerate() {
            let last = if i + 1 == masters {
                16_383
            } else {
                (i + 1) * per - 1
            };
            let _: () = ask(
                m.port,
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(i * per)
                    .arg(last),
            )
            .await
            .unwrap();
        }
        let first = primaries[0].port;
        for other in primaries.iter().chain(&replicas).skip(1) {
            let _: () = ask(
                first,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(other.port)
                    .arg(buses[&other.port]),
            )
            .await
            .unwrap();
        }
        let all = 2 * masters;
        let knows_all = |port: u16| async move {
            let nodes: String = ask(port, redis::cmd("CLUSTER").arg("NODES"))
                .await
                .unwrap_or_default();
            nodes.lines().count() == all
        };
        for r in &replicas {
            assert!(
                super::eventually_async(Duration::from_secs(30), || knows_all(r.port)).await,
                "the nodes never met"
            );
        }
        for (m, r) in primaries.iter().zip(&replicas) {
            let id: String = ask(m.port, redis::cmd("CLUSTER").arg("MYID"))
                .await
                .unwrap();
            let _: () = ask(r.port, redis::cmd("CLUSTER").arg("REPLICATE").arg(&id))
                .await
                .unwrap();
        }
        let ready = |port: u16, replica: bool| async move {
            let info: String = ask(port, redis::cmd("CLUSTER").arg("INFO"))
                .await
                .unwrap_or_default();
            let synced = !replica || {
                let repl: String = ask(port, redis::cmd("INFO").arg("replication"))
                    .await
                    .unwrap_or_default();
                repl.contains("master_link_status:up")
            };
            info.contains("cluster_state:ok") && synced
        };
        for (port, replica) in primaries
            .iter()
            .map(|m| (m.port, false))
            .chain(replicas.iter().map(|r| (r.port, true)))
        {
            assert!(
                super::eventually_async(Duration::from_secs(60), || ready(port, replica)).await,
                "the cluster never came up (node {port})"
            );
        }
        RedisCluster {
            masters: primaries.into_iter().map(Some).collect(),
            replicas,
            first_slots,
            tls_ports,
            dir,
        }
    }

    /// `redis://127.0.0.1:port` of each master as formed (`rediss://` and its TLS
    /// port with TLS): the seed nodes.
    pub fn seeds(&self) -> Vec<String> {
        if !self.tls_ports.is_empty() {
            return self
                .tls_ports
                .iter()
                .map(|port| format!("rediss://127.0.0.1:{port}"))
                .collect();
        }
        self.masters
            .iter()
            .flatten()
            .map(|m| format!("redis://127.0.0.1:{}", m.port))
            .collect()
    }

    /// The shard (its index) that holds `key`.
    pub async fn shard_of(&self, key: &str) -> usize {
        let port = self.replicas[0].port;
        let slot: u16 = ask(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .await
            .unwrap();
        self.first_slots.iter().rposition(|s| *s <= slot).unwrap()
    }

    /// The port of the node that serves shard `i` now (its replica once it took
    /// over).
    pub async fn serving(&self, i: usize) -> u16 {
        let replica = self.replicas[i].port;
        let role: Vec<redis::Value> = ask(replica, &redis::cmd("ROLE")).await.unwrap();
        match (&role[0], &self.masters[i]) {
            (redis::Value::BulkString(r), _) if r == b"master" => replica,
            (_, Some(m)) => m.port,
            _ => replica,
        }
    }

    /// The keys of shard `i` that match `pattern`, asked of the node serving it.
    pub async fn keys_on(&self, i: usize, pattern: &str) -> Vec<String> {
        ask(self.serving(i).await, redis::cmd("KEYS").arg(pattern))
            .await
            .unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.masters.clear();
        self.replicas.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The name the sentinels of [`sentinel_topology`] know the master by.
pub const MASTER: &str = "mymaster";
/// Sentinel's `down-after-milliseconds`: a silent master is down after this.
pub const DOWN_AFTER_MS: u64 = 500;

/// Whether the sentinel on `port` knows the replica and the two other sentinels
/// (what a failover needs).
async fn sentinel_ready(port: u16) -> bool {
    let fields: Vec<String> =
        match ask(port, redis::cmd("SENTINEL").arg("master").arg(MASTER)).await {
            Ok(fields) => fields,
            Err(_) => return false,
        };
    let field = |name: &str| {
        fields
            .iter()
            .position(|f| f == name)
            .and_then(|i| fields.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field("num-slaves") >= 1 && field("num-other-sentinels") >= 2
}

/// A master, its replica (in sync) and three sentinels that know each other (the
/// master known as [`MASTER`], down after [`DOWN_AFTER_MS`] of silence).
pub async fn sentinel_topology() -> (Redis, Redis, Vec<Redis>) {
    let master = Redis::with(free_port(), &["--repl-diskless-sync-delay", "0"]);
    let master_port = master.port.to_string();
    let replica = Redis::with(
        free_port(),
        &[
            "--replicaof",
            "127.0.0.1",
            &master_port,
            "--repl-diskless-sync-delay",
            "0",
        ],
    );
    let sentinels: Vec<Redis> = (0..3)
        .map(|_| Redis::sentinel(MASTER, master.port, DOWN_AFTER_MS))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info: String = ask(replica.port, redis::cmd("INFO").arg("replication"))
            .await
            .unwrap_or_default();
        let mut ready = info.contains("master_link_status:up");
        for s in &sentinels {
            ready = ready && sentinel_ready(s.port).await;
        }
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sentinels never saw the replica and each other"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (master, replica, sentinels)
}

/// A failover under load from `nodes`: a second of load, then `kill` (a
/// [`Redis::stop`]), then load
/// until every node passes `followed` (asserted within `within`) and half a second
/// more. No request may fail, and the upstream requests stay within what working
/// alone in the window costs ([`UpstreamCost::check`]); the figures are printed
/// with `label`.
pub async fn through_failover(
    env: &super::Env,
    nodes: &[&mdproxy_core::app::App],
    label: &str,
    within: Duration,
    kill: impl FnOnce() -> u16,
    followed: impl Fn(&mdproxy_core::app::App) -> bool,
) {
    const DETAIL: &str = "/stock/detail/{code}";
    let started_hits = env.sim.hits(DETAIL);
    let load = FailoverLoad::start(nodes);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let killed = Instant::now();
    let hits_at_kill = env.sim.hits(DETAIL);
    kill();
    let all_followed = super::eventually(within, || nodes.iter().all(|n| followed(n))).await;
    let window = killed.elapsed();
    let in_window = env.sim.hits(DETAIL) - hits_at_kill;
    // Some more load on the new master, then the tally.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answers = load.finish().await;
    assert!(
        all_followed,
        "{label}: the nodes did not follow within {within:?}"
    );
    UpstreamCost {
        nodes: nodes.len() as u64,
        killed,
        window,
        in_window,
        whole_run: env.sim.hits(DETAIL) - started_hits,
    }
    .check(&answers, label);
}

/// One answer of a [`FailoverLoad`]: when it came, the code asked, its status (0:
/// no answer at all).
type Answered = (Instant, u32, u16);

/// Requests on the nodes in turn every 10 ms while a failover happens: 50 warm
/// codes, and every fourth request a code nobody asked before.
struct FailoverLoad {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Answered>>,
}

impl FailoverLoad {
    /// Starts asking `nodes` (at most 3,000 requests).
    fn start(nodes: &[&mdproxy_core::app::App]) -> FailoverLoad {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let urls: Vec<String> = nodes.iter().map(|n| n.base_url()).collect();
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let client = super::client();
            let mut answers = Vec::new();
            for i in 0..3_000u32 {
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let code = if i % 4 == 3 {
                    601_000 + i
                } else {
                    600_000 + i % 50
                };
                let status = client
                    .get(format!(
                        "{}/stock/detail/{code}",
                        urls[i as usize % urls.len()]
                    ))
                    .bearer_auth(super::TOKEN)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0);
                answers.push((Instant::now(), code, status));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            answers
        });
        FailoverLoad { stop, task }
    }

    /// Stops it; every answer.
    async fn finish(self) -> Vec<Answered> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// What a failover cost the upstream, from the simulator's counts of the detail
/// endpoint: in the window (from `killed` for `window`) and over the whole load.
struct UpstreamCost {
    nodes: u64,
    killed: Instant,
    window: Duration,
    in_window: u64,
    whole_run: u64,
}

impl UpstreamCost {
    /// Checks `answers` and the counts: no request failed, and the upstream saw at
    /// most one request per node for each code asked in the window and, over the
    /// whole load, one per code plus one per other node for each code asked in the
    /// window (what working alone costs, and no more). A write the dead master had
    /// not passed to its replica is lost with it: the window opens 100 ms before
    /// the kill.
    fn check(&self, answers: &[Answered], label: &str) {
        assert!(answers.len() > 20, "too little load: {}", answers.len());
        let failed: Vec<u16> = answers
            .iter()
            .map(|(_, _, s)| *s)
            .filter(|s| ![200, 404].contains(s))
            .collect();
        assert!(failed.is_empty(), "failed during the failover: {failed:?}");
        let (start, end) = (
            self.killed - Duration::from_millis(100),
            self.killed + self.window,
        );
        let codes: std::collections::HashSet<u32> = answers.iter().map(|a| a.1).collect();
        let alone: std::collections::HashSet<u32> = answers
            .iter()
            .filter(|(at, _, _)| *at >= start && *at <= end)
            .map(|a| a.1)
            .collect();
        let (keys, alone) = (codes.len() as u64, alone.len() as u64);
        eprintln!(
            "{label} window {:?}: {} upstream requests for {alone} codes asked in it; \
             whole run {} for {keys} codes",
            self.window, self.in_window, self.whole_run
        );
        assert!(
            self.in_window <= self.nodes * alone,
            "{} upstream requests in the window for {alone} codes",
            self.in_window
        );
        assert!(
            self.whole_run <= keys + (self.nodes - 1) * alone,
            "{} upstream requests for {keys} codes, {alone} of them asked alone",
            self.whole_run
        );
    }
}

/// `n` requests for `target` at once, spread over `nodes`: each status and body.
pub async fn at_once(
    nodes: &[&mdproxy_core::app::App],
    target: &str,
    n: usize,
) -> Vec<(u16, bytes::Bytes)> {
    let urls: Vec<String> = nodes.iter().map(|n| n.base_url()).collect();
    let client = super::client();
    let asks = (0..n).map(|i| {
        let request = client
            .get(format!("{}{target}", urls[i % urls.len()]))
            .bearer_auth(super::TOKEN);
        async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap())
        }
    });
    futures_util::future::join_all(asks).await
}

/// Counted, not timed: of the next ten upstream polls of the hub, every one is one
/// node's (nodes polling on their own would each add theirs). The polling node.
pub async fn one_node_polls(
    sim: &mdproxy_sim::SimHandle,
    nodes: &[&mdproxy_core::app::App],
) -> usize {
    let polls = |n: &mdproxy_core::app::App| n.hub().polls();
    let before: Vec<u64> = nodes.iter().map(|n| polls(n)).collect();
    let upstream = sim.hits("/stock/list");
    assert!(
        super::eventually(Duration::from_secs(20), || sim.hits("/stock/list")
            >= upstream + 10)
        .await,
        "the cluster stopped polling"
    );
    let after: Vec<u64> = nodes.iter().map(|n| polls(n)).collect();
    let grew: Vec<usize> = (0..nodes.len())
        .filter(|i| after[*i] > before[*i])
        .collect();
    assert_eq!(grew.len(), 1, "one node polls: {before:?} -> {after:?}");
    let led = after[grew[0]] - before[grew[0]];
    assert!(
        sim.hits("/stock/list") - upstream <= led + 1,
        "upstream polls beyond the leader's own"
    );
    grew[0]
}

/// Waits until no store of `nodes` holds any of `keys` (a purge reached them).
pub async fn forgotten(nodes: &[&mdproxy_core::app::App], keys: &[String]) -> bool {
    let stores: Vec<_> = nodes
        .iter()
        .map(|n| n.state().cache().store().clone())
        .collect();
    super::eventually(Duration::from_secs(5), || {
        stores.iter().all(|s| {
            keys.iter().all(|k| {
                futures_util::FutureExt::now_or_never(s.get(k))
                    .flatten()
                    .is_none()
            })
        })
    })
    .await
}

/// `POST /purge?<how>` on the admin listener of `env`'s node (its token
/// `admin-secret`), answered 200.
pub async fn purge(env: &super::Env, how: &str) {
    let admin = env.proxy.admin_addr.unwrap();
    let purged = super::client()
        .post(format!("http://{admin}/purge?{how}"))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status(), 200, "{how}");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files
/// in `dir`: (ca, server cert, server key, client cert, client key).
pub fn certificates(dir: &std::path::Path) -> [String; 5] {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    // Each with its own name: a leaf named like its issuer looks self-signed.
    let named = |sans: Vec<String>, cn: &str| {
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
    };
    let mut ca_params = named(Vec::new(), "mdproxy test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = named(vec![name.to_owned()], name)
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("127.0.0.1");
    let (client_cert, client_key) = leaf("mdproxy");
    let files = [
        ("ca.pem", ca.pem()),
        ("server.pem", server_cert),
        ("server.key", server_key),
        ("client.pem", client_cert),
        ("client.key", client_key),
    ];
    files.map(|(name, pem)| {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path.display().to_string()
    })
}

/// A loopback relay to a Redis whose connections can be frozen: a frozen one
/// stays open and carries nothing either way, as a connection to a host that
/// vanished without a FIN or RST (half-open). Connections made after a freeze
/// are relayed. Its tasks end with the test's runtime.
pub struct Freezer {
    pub addr: SocketAddr,
    /// A flag for each connection accepted so far: set, it is frozen.
    frozen: Arc<std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>>,
}

impl Freezer {
    /// A relay to the Redis on `port`.
    pub async fn to(port: u16) -> Freezer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen: Arc<std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>> = Arc::default();
        let flags = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
                flags.lock().unwrap().push(Arc::clone(&flag));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(relay(client_read, server_write, Arc::clone(&flag)));
                tokio::spawn(relay(server_read, client_write, flag));
            }
        });
        Freezer { addr, frozen }
    }

    /// Freezes every connection accepted so far.
    pub fn freeze(&self) {
        for flag in self.frozen.lock().unwrap().iter() {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.frozen.lock().unwrap().len()
    }
}

/// Copies `from` to `to` until either ends; once `frozen`, drops what it reads
/// and holds both ends open for good.
async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.load(std::sync::atomic::Ordering::SeqCst) {
            let _held = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
