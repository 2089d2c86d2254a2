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

    /// `redis-server args`, waited for until `port` accepts.
    pub fn spawn(args: &[String], port: u16, dir: Option<PathBuf>) -> Redis {
        let child = Command::new("redis-server")
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .expect(
                "redis-server is not installed: run scripts/test, or apt-get install redis-server",
            );
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
pub async fn node(env: &super::Env, name: &str) -> mdproxy::app::App {
    let mut config = (*env.proxy.state().snapshot().config).clone();
    config.server.listen = "127.0.0.1:0".into();
    config.cluster.node_id = name.into();
    let clock = env.clock.clone().expect("a manual clock");
    mdproxy::app::start(&config, clock).await.unwrap()
}

/// Waits until every node's Redis link is up.
pub async fn joined(nodes: &[&mdproxy::app::App]) {
    for n in nodes {
        let cluster = n.state().cluster().unwrap().clone();
        assert!(
            super::eventually(Duration::from_secs(20), || cluster.is_up()).await,
            "node never joined"
        );
    }
}

/// `GET target` on `node` with the test token.
pub async fn get(node: &mdproxy::app::App, target: &str) -> reqwest::Response {
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
/// `REPLICATE` (Redis 7), a node declared failing after 1 s of silence.
pub struct RedisCluster {
    /// The masters as formed, shard by shard (a failover does not reorder them).
    pub masters: Vec<Option<Redis>>,
    /// Each master's replica, same order.
    pub replicas: Vec<Redis>,
    /// The first slot of each shard, same order.
    pub first_slots: Vec<u16>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Forms the cluster and waits until every node says `cluster_state:ok` and
    /// every replica is in sync.
    pub async fn start(masters: usize) -> RedisCluster {
        let dir = scratch(&format!("cluster-{}", free_port()));
        let node = |port: u16| {
            let conf = dir.join(format!("nodes-{port}.conf"));
            Redis::with(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf.display().to_string(),
                    "--cluster-node-timeout",
                    "1000",
                    "--repl-diskless-sync-delay",
                    "0",
                ],
            )
        };
        let primaries: Vec<Redis> = (0..masters).map(|_| node(free_port())).collect();
        let replicas: Vec<Redis> = (0..masters).map(|_| node(free_port())).collect();
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
                    .arg(other.port),
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
            dir,
        }
    }

    /// `redis://127.0.0.1:port` of each master as formed: the seed nodes.
    pub fn seeds(&self) -> Vec<String> {
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
