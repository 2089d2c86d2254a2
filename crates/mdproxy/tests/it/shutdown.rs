//! Graceful shutdown (README's commands: "`SIGINT`/`SIGTERM` stop accepting, stop the
//! scheduler, let open requests finish (up to `server.shutdown_grace_ms`) and exit"):
//! through `App::shutdown()` in process, and through `mdproxy serve` and a
//! real SIGTERM. The simulator's hang switch holds a request in flight for exactly
//! as long as a test wants, so nothing depends on how fast the machine is.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{Env, TOKEN, eventually, header};

/// Upstream requests must not time out on their own while a test holds them.
const LONG_UPSTREAM_TIMEOUT_MS: u64 = 60_000;
/// A target no test here caches before it is held in flight.
const HELD: &str = "/news/mainline";

/// Tries new TCP connections to `addr` until one is refused, for at most `limit`.
async fn refuses_connections(addr: SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return true,
            // Accepted by the kernel before the listener closed: try again.
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    false
}

/// Starts a GET of `url` with the test token in its own task.
fn spawn_get(
    client: &reqwest::Client,
    url: String,
) -> tokio::task::JoinHandle<reqwest::Result<(u16, bytes::Bytes)>> {
    let request = client.get(url).bearer_auth(TOKEN);
    tokio::spawn(async move {
        let r = request.send().await?;
        let status = r.status().as_u16();
        Ok((status, r.bytes().await?))
    })
}

/// A proxy on a Saturday evening (no market-hours effects) with `grace`.
async fn env_with_grace(grace_ms: u64) -> Env {
    support::start_with(
        |_| {},
        |c| {
            c.server.shutdown_grace_ms = grace_ms;
            c.upstream.timeout_ms = LONG_UPSTREAM_TIMEOUT_MS;
        },
        Some(support::clock_at("2026-11-21T20:00:00+08:00")),
    )
    .await
}

/// A request in flight when shutdown starts is answered in full within the grace
/// period, while new connections are refused as soon as shutdown has started; the
/// shutdown returns once that request is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_request_completes_while_new_connections_are_refused() {
    let env = env_with_grace(30_000).await;
    env.sim.set_hang(true);
    let request = spawn_get(&env.client, env.url(HELD));
    assert!(eventually(Duration::from_secs(10), || env.sim.hits(HELD) == 1).await);

    let Env { sim, proxy, .. } = env;
    let addr = proxy.addr;
    let shutdown = tokio::spawn(proxy.shutdown());
    assert!(
        refuses_connections(addr, Duration::from_secs(10)).await,
        "no new connection after shutdown started"
    );
    assert!(!request.is_finished(), "still held by the upstream");
    assert!(
        !shutdown.is_finished(),
        "shutdown waits for the open request"
    );

    sim.set_hang(false);
    let (status, body) = tokio::time::timeout(Duration::from_secs(20), request)
        .await
        .expect("the held request is answered")
        .unwrap()
        .expect("answered in full, not cut");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["success"], true);
    tokio::time::timeout(Duration::from_secs(20), shutdown)
        .await
        .expect("shutdown returns once the request is done")
        .unwrap();
    assert_eq!(sim.hits(HELD), 1);
}

/// With a short grace and an upstream that never answers, `shutdown()` returns after
/// the grace and the request still open is cut: its client sees the connection end
/// without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_period_cuts_a_hanging_request() {
    let env = env_with_grace(300).await;
    env.sim.set_hang(true);
    let request = spawn_get(&env.client, env.url(HELD));
    assert!(eventually(Duration::from_secs(10), || env.sim.hits(HELD) == 1).await);
    let Env { sim, proxy, .. } = env;
    tokio::time::timeout(Duration::from_secs(10), proxy.shutdown())
        .await
        .expect("shutdown returns after the grace, not after the upstream");
    let mut request = request;
    let outcome = tokio::time::timeout(Duration::from_secs(10), &mut request).await;
    // Release the upstream so that a request still open shows what it would get.
    sim.set_hang(false);
    match outcome {
        Ok(joined) => assert!(
            joined.unwrap().is_err(),
            "cut: the client sees no answer after the grace"
        ),
        Err(_) => {
            let late = tokio::time::timeout(Duration::from_secs(10), request).await;
            let late = late.map(|j| j.unwrap().map(|(status, _)| status));
            panic!(
                "the request was still open 10 s after the grace ended; released, it got {late:?}"
            );
        }
    }
}

/// `mdproxy serve` with its config in a temporary directory, in front of `upstream`.
struct Serve {
    process: support::Watched,
    addr: SocketAddr,
    dir: std::path::PathBuf,
}

impl Serve {
    async fn start(upstream: &mdproxy_sim::SimHandle, name: &str, grace_ms: u64) -> Serve {
        let (process, addr, dir) = Serve::spawn(upstream, name, grace_ms, "warn").await;
        let serve = Serve { process, addr, dir };
        // It answers (and the target held later is still cold).
        let r = support::client()
            .get(serve.url("/news/overview"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-cache"), "MISS");
        serve
    }

    /// Starts `mdproxy serve` on an ephemeral port in front of `upstream` and reads
    /// the address it bound from its start-up line (no port is guessed ahead).
    async fn spawn(
        upstream: &mdproxy_sim::SimHandle,
        name: &str,
        grace_ms: u64,
        log: &str,
    ) -> (support::Watched, SocketAddr, std::path::PathBuf) {
        let (dir, path) = support::serve_toml(
            &format!("mdproxy-{name}"),
            &format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 0\nshutdown_grace_ms = {grace_ms}\n[auth]\ntokens = [\"{TOKEN}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"{}\"\ntimeout_ms = {LONG_UPSTREAM_TIMEOUT_MS}\n[scheduler]\nenabled = false\n",
                upstream.base_url(),
                support::UPSTREAM_TOKEN
            ),
        );
        let mut child = support::serve(
            &path,
            &["--log", log],
            std::process::Stdio::piped(),
            std::process::Stdio::piped(),
        );
        // The signal handlers are installed before anything is started, so no settle
        // is needed after this line (tests/shutdown.rs checks an earlier signal too).
        let stdout = child.stdout.take().unwrap();
        let ready = async {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.strip_prefix("mdproxy serving http://") {
                    let addr = rest.split('/').next().unwrap();
                    return addr.parse::<SocketAddr>().unwrap();
                }
            }
            panic!("mdproxy serve ended before serving");
        };
        let addr = tokio::time::timeout(Duration::from_secs(20), ready)
            .await
            .expect("mdproxy serve came up");
        // Its stderr is read (and kept) as it comes, so the pipe never fills.
        (support::Watched::new(child), addr, dir)
    }

    fn url(&self, target: &str) -> String {
        format!("http://{}/api/v1{target}", self.addr)
    }

    fn signal(&self, name: &str) {
        self.process.signal(name);
    }

    /// Waits (bounded) for the process to exit and returns its status.
    async fn exit(&mut self) -> std::process::ExitStatus {
        self.process.exit().await
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// A simulator for the `serve` tests (its own clock: nothing here depends on time).
async fn upstream() -> mdproxy_sim::SimHandle {
    let clock: Arc<dyn mdproxy_market::Clock> = support::clock_at("2026-11-21T20:00:00+08:00");
    mdproxy_sim::start(&support::sim_config(), clock)
        .await
        .unwrap()
}

/// `mdproxy serve` on SIGTERM refuses new connections, answers the request it was
/// serving in full (within the grace), and exits 0.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_open_request_then_exits() {
    let sim = upstream().await;
    let mut serve = Serve::start(&sim, "drain", 30_000).await;
    sim.set_hang(true);
    let client = support::client();
    let request = spawn_get(&client, serve.url(HELD));
    assert!(eventually(Duration::from_secs(10), || sim.hits(HELD) == 1).await);
    serve.signal("TERM");
    assert!(
        refuses_connections(serve.addr, Duration::from_secs(10)).await,
        "no new connection after SIGTERM"
    );
    assert!(
        serve.process.child.try_wait().unwrap().is_none(),
        "still draining"
    );
    sim.set_hang(false);
    let (status, _) = tokio::time::timeout(Duration::from_secs(20), request)
        .await
        .expect("the held request is answered")
        .unwrap()
        .expect("answered in full, not cut");
    assert_eq!(status, 200);
    assert!(serve.exit().await.success());
}

/// A SIGTERM sent as soon as `mdproxy serve` has written its first log line (the
/// listener it bound: before it serves, long before its start-up banner) is a
/// clean stop, exit 0: the handlers are installed before anything starts. Before
/// the fix they were installed only once the banner was printed, so a supervisor
/// that stopped the process right after start killed it by the signal's default
/// action.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_right_after_start_is_a_clean_stop() {
    use std::os::unix::process::ExitStatusExt;
    let sim = upstream().await;
    let (dir, path) = support::serve_toml(
        "mdproxy-early",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 0\n[auth]\ntokens = [\"{TOKEN}\"]\n[upstream]\nbase_url = \"{}\"\ntoken = \"{}\"\n[scheduler]\nenabled = false\n",
            sim.base_url(),
            support::UPSTREAM_TOKEN
        ),
    );
    let mut serve = support::Watched::new(support::serve(
        &path,
        &["--log", "info"],
        std::process::Stdio::null(),
        std::process::Stdio::piped(),
    ));
    let first = serve.line_where(|_| true).await;
    assert!(!first.is_empty());
    let pid = serve.child.id().unwrap().to_string();
    // By then the process already catches SIGTERM (bit 15 of SigCgt, /proc's mask
    // of the signals it has handlers for).
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let caught = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
        .unwrap();
    assert!(
        caught & (1 << (15 - 1)) != 0,
        "SIGTERM is not caught yet: {first}"
    );
    let status = serve.terminate().await;
    assert_eq!(status.signal(), None, "killed by the signal: {status:?}");
    assert!(status.success(), "{status:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `mdproxy serve` on SIGTERM with a short grace and an upstream that never answers:
/// after the grace the process exits 0 and the open request is cut (the client sees
/// the connection end without an answer).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cuts_a_hanging_request_after_the_grace() {
    let sim = upstream().await;
    let mut serve = Serve::start(&sim, "cut", 300).await;
    sim.set_hang(true);
    let client = support::client();
    let request = spawn_get(&client, serve.url(HELD));
    assert!(eventually(Duration::from_secs(10), || sim.hits(HELD) == 1).await);
    serve.signal("TERM");
    assert!(serve.exit().await.success());
    let outcome = tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .expect("the client learns at once that the connection is gone")
        .unwrap();
    assert!(outcome.is_err(), "cut, not answered: {outcome:?}");
    sim.set_hang(false);
}
