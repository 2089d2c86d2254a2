//! Real Redis processes for the cluster tests: `redis-server` children (a plain
//! server, a replica, a sentinel, a TLS server) on loopback ports, killed when
//! dropped, a log collector to check what a node said (and never said), and the
//! nodes of a cluster (another node, all joined, a request to one).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

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

    /// On `port` with extra arguments (`--requirepass`), nothing saved to disk.
    pub fn with(port: u16, extra: &[&str]) -> Redis {
        let mut args = vec![
            "--port".to_owned(),
            port.to_string(),
            "--bind".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args.extend(["--save", "", "--appendonly", "no"].map(str::to_owned));
        Redis::spawn(&args, port, None)
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
