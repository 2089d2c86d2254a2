//! Coalesced waiters on one cold key: how long after the upstream's answer the
//! proxy releases them, and how many upstream requests they cost (issue 11, goal 2).
//!
//! Starts the simulator (`COALESCE_UPSTREAM_MS` of latency, default 200) and a proxy
//! in front of it in process (scheduler, start-up probe and upstream budget off), then
//! opens `COALESCE_WAITERS` (default 200) HTTP/1.1 keep-alive connections and warms
//! each with one request before measuring, so no connect time is counted. Each of
//! `COALESCE_ROUNDS` (default 20) rounds sends one request per connection at once
//! for a key nobody asked before (`/stock/detail/CODE`, a different listed code each
//! round), times each waiter from its own write to the last byte of its answer, and
//! counts the upstream requests the round cost (the simulator's own counter).
//! Prints p50/p99/max of waiter latency minus the upstream latency, and the upstream
//! requests per round; then the same rounds against a floor (a bare hyper server
//! whose waiters for one key share one timer of the upstream latency), to show what
//! the harness and the machine add by themselves. The simulator, the proxy (and
//! later the floor) and the waiters each run on their own tokio runtime. Then, for
//! each anchor `COALESCE_ANCHORS` names (`nginx`, `varnish`; `scripts/coalesce.sh`
//! names those installed), the same rounds against it in front of the same
//! simulator, at its best for this: nginx with `proxy_cache_lock` and its cache on
//! tmpfs, Varnish with its waiting list (streaming off, so each answer has a
//! length the harness reads). Figures are printed, never asserted (the machine is
//! shared).
//!
//! `scripts/coalesce.sh` builds it in release and runs it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdproxy_config::Secret;
use mdproxy_core::app::App;
use mdproxy_market::{Clock, SystemClock};
use mdproxy_sim::{SimConfig, SimHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

const TOKEN: &str = "coalesce-token";
/// What warms each connection: one miss, then hits.
const WARM_TARGET: &str = "/api/v1/market/indices";
/// Bound on every single wait (connect, one answer): nothing here hangs.
const WAIT: Duration = Duration::from_secs(10);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One kept-alive HTTP/1.1 connection to the proxy, with its read buffer.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = tokio::time::timeout(WAIT, TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| format!("connect: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Sends GET `target` and reads the whole answer: its status and body length.
    async fn get(&mut self, target: &str) -> Result<(u16, usize), String> {
        let request = format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        );
        self.stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        tokio::time::timeout(WAIT, self.read_answer())
            .await
            .map_err(|_| format!("no answer to {target} within {WAIT:?}"))?
    }

    /// Reads one answer with a `Content-Length` (the proxy's answers all have one).
    async fn read_answer(&mut self) -> Result<(u16, usize), String> {
        self.buf.clear();
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buf[..head_end]).map_err(|e| e.to_string())?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| format!("not an HTTP status line: {head:?}"))?;
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .ok_or_else(|| format!("answer without Content-Length: {head:?}"))?;
        while self.buf.len() < head_end + length {
            self.fill().await?;
        }
        if self.buf.len() > head_end + length {
            return Err("bytes after the answer (none were asked for)".into());
        }
        Ok((status, length))
    }

    async fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self
            .stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the proxy closed the connection".into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// A new connection to the proxy, warmed by one answered request.
async fn warm(addr: SocketAddr) -> Conn {
    let mut conn = Conn::open(addr).await.expect("connect to the proxy");
    let (status, _) = conn.get(WARM_TARGET).await.expect("a warm-up answer");
    assert_eq!(status, 200, "warm-up {WARM_TARGET}");
    conn
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The simulator and the proxy, each on its own runtime: the waiters' tasks share
/// neither's worker threads, and the simulator does not queue behind the proxy's.
struct Servers {
    sim: SimHandle,
    proxy: App,
}

async fn start_sim(upstream_ms: u64, clock: Arc<dyn Clock>) -> SimHandle {
    let sim_config = SimConfig {
        listen: "127.0.0.1:0".into(),
        token: "coalesce-upstream".into(),
        latency_ms: upstream_ms,
        ..SimConfig::default()
    };
    mdproxy_sim::start(&sim_config, clock)
        .await
        .expect("the simulator starts")
}

async fn start_proxy(sim: &SimHandle, clock: Arc<dyn Clock>) -> App {
    let mut config = mdproxy::demo::config_for(sim, "127.0.0.1:0", Secret::new(TOKEN));
    // Nothing but the waiters may reach the upstream: no prewarm, no start-up probe,
    // and no budget to wait for.
    config.scheduler.enabled = false;
    config.upstream.probe_target = String::new();
    config.limits.upstream_rps = 0;
    // The connections on serving threads of their own (`server.work_stealing` off).
    config.server.work_stealing = std::env::var_os("COALESCE_SERVING_THREADS").is_none();
    config.validate().expect("the config is valid");
    mdproxy_core::app::start(&config, clock)
        .await
        .expect("the proxy starts")
}

fn runtime(name: &str, workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .thread_name(name)
        .build()
        .expect("a runtime starts")
}

/// One round's waiters: when each sent and got its answer (answered 200 only).
struct Round {
    sent: Vec<Instant>,
    done: Vec<Instant>,
    failures: usize,
}

/// Sends one request for `target` on every connection at once and waits for all.
/// A connection that fails is replaced by a fresh warm one.
async fn round(conns: &mut Vec<Conn>, addr: SocketAddr, target: &str) -> Round {
    let target = Arc::new(target.to_owned());
    let barrier = Arc::new(Barrier::new(conns.len()));
    let tasks: Vec<_> = conns
        .drain(..)
        .map(|mut conn| {
            let (barrier, target) = (Arc::clone(&barrier), Arc::clone(&target));
            tokio::spawn(async move {
                barrier.wait().await;
                let started = Instant::now();
                let answer = conn.get(&target).await;
                (conn, started, Instant::now(), answer)
            })
        })
        .collect();
    let mut r = Round {
        sent: Vec::with_capacity(tasks.len()),
        done: Vec::with_capacity(tasks.len()),
        failures: 0,
    };
    for task in tasks {
        let (conn, started, finished, answer) = task.await.expect("a waiter task");
        match answer {
            Ok((200, _)) => {
                r.sent.push(started);
                r.done.push(finished);
                conns.push(conn);
            }
            Ok((status, _)) => {
                eprintln!("{target}: status {status}");
                r.failures += 1;
                conns.push(conn);
            }
            Err(e) => {
                eprintln!("{target}: {e}");
                r.failures += 1;
                conns.push(warm(addr).await);
            }
        }
    }
    r
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `a - b` in milliseconds, negative when `a` is earlier.
fn diff_ms(a: Instant, b: Instant) -> f64 {
    if a >= b { ms(a - b) } else { -ms(b - a) }
}

/// What the rounds against one server showed.
#[derive(Default)]
struct Figures {
    /// Each waiter's latency minus the upstream latency.
    extra_ms: Vec<f64>,
    /// First to last answer of a round.
    spread_ms: Vec<f64>,
    /// First to last send of a round (the waiters' own stagger).
    send_spread_ms: Vec<f64>,
    failures: usize,
}

impl Figures {
    fn add(&mut self, r: &Round, upstream_ms: u64) {
        self.extra_ms.extend(
            r.sent
                .iter()
                .zip(&r.done)
                .map(|(s, d)| ms(*d - *s) - upstream_ms as f64),
        );
        if let (Some(first), Some(last)) = (r.done.iter().min(), r.done.iter().max()) {
            self.spread_ms.push(ms(*last - *first));
        }
        if let (Some(first), Some(last)) = (r.sent.iter().min(), r.sent.iter().max()) {
            self.send_spread_ms.push(ms(*last - *first));
        }
        self.failures += r.failures;
    }

    fn print(&mut self, name: &str, upstream_ms: u64) {
        for v in [
            &mut self.extra_ms,
            &mut self.spread_ms,
            &mut self.send_spread_ms,
        ] {
            v.sort_by(f64::total_cmp);
        }
        if self.extra_ms.is_empty() {
            println!(
                "  {name}: no waiter got an answer ({} failures)",
                self.failures
            );
            return;
        }
        println!(
            "  {name}: waiter latency - {upstream_ms} ms: p50 {:+.2} ms  p99 {:+.2} ms  max {:+.2} ms  \
             ({} answers, {} failures)",
            percentile(&self.extra_ms, 0.5),
            percentile(&self.extra_ms, 0.99),
            self.extra_ms[self.extra_ms.len() - 1],
            self.extra_ms.len(),
            self.failures
        );
        println!(
            "  {name}: first to last answer of a round p50 {:.2} ms, max {:.2} ms \
             (first to last send p50 {:.2} ms: the waiters' own stagger)",
            percentile(&self.spread_ms, 0.5),
            self.spread_ms[self.spread_ms.len() - 1],
            percentile(&self.send_spread_ms, 0.5)
        );
    }
}

/// The floor: a bare hyper server whose requests for one target all wait on one
/// shared timer of the upstream latency, started by the first, then get a prebuilt
/// body as long as the detail. What is left of the waiters' extra latency here is
/// the machine's and the harness's, not the proxy's.
async fn start_floor(upstream_ms: u64, body_len: usize) -> SocketAddr {
    use futures_util::FutureExt;
    use futures_util::future::{BoxFuture, Shared};
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use std::collections::HashMap;
    use std::sync::Mutex;

    type Wait = Shared<BoxFuture<'static, ()>>;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the floor server");
    let addr = listener.local_addr().expect("the floor's address");
    let waits: Arc<Mutex<HashMap<String, Wait>>> = Arc::default();
    let body = bytes::Bytes::from(vec![b' '; body_len]);
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).http1_only();
    builder.http1().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let (waits, body, builder) = (Arc::clone(&waits), body.clone(), Arc::clone(&builder));
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<_>| {
                    let path = req.uri().path().to_owned();
                    // The warm-up target answers at once; every other waits.
                    let wait = (path != WARM_TARGET).then(|| {
                        let mut waits = waits.lock().expect("never poisoned");
                        waits
                            .entry(path)
                            .or_insert_with(|| {
                                tokio::time::sleep(Duration::from_millis(upstream_ms))
                                    .boxed()
                                    .shared()
                            })
                            .clone()
                    });
                    let body = body.clone();
                    async move {
                        if let Some(wait) = wait {
                            wait.await;
                        }
                        let mut r = http::Response::new(http_body_util::Full::new(body));
                        r.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// An anchor process in front of the simulator, stopped (SIGTERM, so that nginx's
/// workers go with its master) and its files removed when dropped.
struct Anchor {
    name: &'static str,
    addr: SocketAddr,
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl Drop for Anchor {
    fn drop(&mut self) {
        mdproxy_testkit::process::stop_blocking(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Starts the anchor `name` in front of the simulator at `sim` (its token
/// `upstream_token`), and waits (bounded) until it listens.
fn start_anchor(name: &str, sim: SocketAddr, upstream_token: &str) -> Result<Anchor, String> {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("coalesce-{name}-{port}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // Varnish's unprivileged child reads its work directory.
    let _ = std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755));
    let (name, child) = match name {
        "nginx" => {
            // The cache on tmpfs, as an operator tuning nginx for speed keeps it.
            let cache = std::path::Path::new("/dev/shm").join(format!("coalesce-nginx-{port}"));
            let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
            let config = format!(
                "worker_processes 2;\ndaemon off;\nuser {user};\npid {d}/nginx.pid;\n\
                 error_log {d}/error.log warn;\nevents {{ worker_connections 4096; }}\n\
                 http {{\n  access_log off;\n  keepalive_requests 10000000;\n\
                 proxy_cache_path {cache} levels=1:2 keys_zone=md:16m max_size=256m inactive=1h use_temp_path=off;\n\
                 upstream sim {{ server {sim}; keepalive 64; }}\n\
                 server {{\n    listen 127.0.0.1:{port};\n    location /api/v1/ {{\n\
                 proxy_pass http://sim;\n      proxy_http_version 1.1;\n\
                 proxy_set_header Connection \"\";\n\
                 proxy_set_header Authorization \"Bearer {upstream_token}\";\n\
                 proxy_cache md;\n      proxy_cache_key $uri$is_args$args;\n\
                 proxy_cache_valid 200 1h;\n\
                 proxy_ignore_headers Cache-Control Expires Set-Cookie X-Accel-Expires;\n\
                 proxy_cache_lock on;\n      proxy_cache_lock_timeout 10s;\n    }}\n  }}\n}}\n",
                d = dir.display(),
                cache = cache.display(),
            );
            let path = dir.join("nginx.conf");
            std::fs::write(&path, config).map_err(|e| e.to_string())?;
            let child = std::process::Command::new("nginx")
                .arg("-c")
                .arg(&path)
                .arg("-p")
                .arg(&dir)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            ("nginx", child)
        }
        "varnish" => {
            let vcl = format!(
                "vcl 4.1;\nbackend sim {{ .host = \"{host}\"; .port = \"{sport}\"; }}\n\
                 sub vcl_recv {{ unset req.http.Authorization; return (hash); }}\n\
                 sub vcl_backend_fetch {{ set bereq.http.Authorization = \"Bearer {upstream_token}\"; return (fetch); }}\n\
                 sub vcl_backend_response {{ set beresp.ttl = 1h; set beresp.do_stream = false; return (deliver); }}\n",
                host = sim.ip(),
                sport = sim.port(),
            );
            let path = dir.join("default.vcl");
            std::fs::write(&path, vcl).map_err(|e| e.to_string())?;
            let _ = std::fs::set_permissions(
                &path,
                std::os::unix::fs::PermissionsExt::from_mode(0o644),
            );
            let child = std::process::Command::new("varnishd")
                .args([
                    "-F",
                    "-a",
                    &format!("127.0.0.1:{port}"),
                    "-s",
                    "malloc,256m",
                    "-T",
                    "none",
                ])
                .arg("-f")
                .arg(&path)
                .arg("-n")
                .arg(dir.join("varnish"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            ("varnish", child)
        }
        other => return Err(format!("unknown anchor {other} (nginx, varnish)")),
    };
    let child = child.map_err(|e| format!("{name} does not start: {e}"))?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let anchor = Anchor {
        name,
        addr,
        child,
        dir,
    };
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(anchor);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{name} never listened on {addr}"))
}

/// The rounds against `addr` on `waiters` fresh warm connections: the figures, and
/// the upstream requests each round cost.
async fn rounds_against(
    addr: SocketAddr,
    waiters: usize,
    codes: &[String],
    upstream_ms: u64,
    sim: &SimHandle,
) -> (Figures, Vec<u64>) {
    let mut conns = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        conns.push(warm(addr).await);
    }
    let mut figures = Figures::default();
    let mut asked = Vec::with_capacity(codes.len());
    for code in codes {
        let before = sim.total();
        let r = round(&mut conns, addr, &format!("/api/v1/stock/detail/{code}")).await;
        figures.add(&r, upstream_ms);
        asked.push(sim.total() - before);
    }
    (figures, asked)
}

fn main() {
    let upstream_ms = env_or("COALESCE_UPSTREAM_MS", 200);
    let waiters = env_or("COALESCE_WAITERS", 200) as usize;
    let rounds = env_or("COALESCE_ROUNDS", 20) as usize;

    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let sim_rt = runtime("sim", 1);
    let sim = sim_rt.block_on(start_sim(upstream_ms, Arc::clone(&clock)));
    // As many workers as the binary would have.
    let proxy_rt = runtime("proxy", cores);
    let proxy = proxy_rt.block_on(start_proxy(&sim, clock));
    let servers = Servers { sim, proxy };
    let addr = servers.proxy.addr;

    // Listed codes of the Shanghai main board from 600500 up: one cold key a round.
    let codes: Vec<String> = mdproxy_sim::universe::universe()
        .stocks
        .iter()
        .map(|s| s.code.clone())
        .filter(|c| c.as_str() >= "600500" && c.starts_with("60"))
        .take(rounds)
        .collect();
    assert_eq!(
        codes.len(),
        rounds,
        "not enough listed codes for {rounds} rounds"
    );

    let client_rt = runtime("waiters", cores);
    let proxy_handle = proxy_rt.handle().clone();
    client_rt.block_on(async {
        // Open and warm every connection, and the proxy's own connection to the
        // upstream: the first warm-up is a miss, the others hits.
        let mut conns = Vec::with_capacity(waiters);
        for _ in 0..waiters {
            conns.push(warm(addr).await);
        }

        // The upstream's own time for a cold key of the same kind, for reference.
        let direct = reqwest::Client::builder().no_proxy().build().unwrap();
        let mut upstream_own = Vec::new();
        let mut body_len = 0;
        for code in ["600000", "600004", "600006"] {
            let started = Instant::now();
            let r = direct
                .get(format!("{}/stock/detail/{code}", servers.sim.base_url()))
                .bearer_auth("coalesce-upstream")
                .send()
                .await
                .expect("the simulator answers");
            body_len = r.bytes().await.expect("the simulator's body").len();
            upstream_own.push(ms(started.elapsed()));
        }
        upstream_own.sort_by(f64::total_cmp);
        // Those three asks are not the proxy's.
        let before_rounds = servers.sim.total();

        let mut proxy_figures = Figures::default();
        // Measured from the simulator's own arrival time of the round's request.
        let mut ask_ms = Vec::with_capacity(rounds);
        let mut after_upstream_ms = Vec::with_capacity(rounds * waiters);
        let mut upstream_per_round = Vec::with_capacity(rounds);
        for code in &codes {
            let before = servers.sim.total();
            let r = round(&mut conns, addr, &format!("/api/v1/stock/detail/{code}")).await;
            proxy_figures.add(&r, upstream_ms);
            let asked = servers.sim.total() - before;
            upstream_per_round.push(asked);
            if asked == 1 {
                let arrivals = servers.sim.arrivals();
                if let (Some(&arrived), Some(first)) = (arrivals.last(), r.sent.iter().min()) {
                    ask_ms.push(diff_ms(arrived, *first));
                    let answered = arrived + Duration::from_millis(upstream_ms);
                    after_upstream_ms.extend(r.done.iter().map(|d| diff_ms(*d, answered)));
                }
            }
        }
        let proxy_upstream = servers.sim.total() - before_rounds;
        drop(conns);

        // The same rounds against the floor (on the proxy's runtime, which has
        // nothing else to do now), on fresh warm connections.
        let floor = proxy_handle
            .spawn(start_floor(upstream_ms, body_len))
            .await
            .expect("the floor starts");
        let mut conns = Vec::with_capacity(waiters);
        for _ in 0..waiters {
            conns.push(warm(floor).await);
        }
        let mut floor_figures = Figures::default();
        for code in &codes {
            let r = round(&mut conns, floor, &format!("/api/v1/stock/detail/{code}")).await;
            floor_figures.add(&r, upstream_ms);
        }

        println!(
            "coalescing: {rounds} rounds x {waiters} waiters on warm keep-alive connections, \
             one cold /stock/detail/CODE a round, upstream latency {upstream_ms} ms"
        );
        println!(
            "  the upstream's own time for a cold detail (direct): {:.1} / {:.1} / {:.1} ms",
            upstream_own[0], upstream_own[1], upstream_own[2]
        );
        proxy_figures.print("mdproxy", upstream_ms);
        ask_ms.sort_by(f64::total_cmp);
        after_upstream_ms.sort_by(f64::total_cmp);
        if !ask_ms.is_empty() && !after_upstream_ms.is_empty() {
            println!(
                "  mdproxy: first send to the upstream request's arrival p50 {:.2} ms, max {:.2} ms",
                percentile(&ask_ms, 0.5),
                ask_ms[ask_ms.len() - 1]
            );
            println!(
                "  mdproxy: answer - (arrival + {upstream_ms} ms): p50 {:+.2} ms  p99 {:+.2} ms  \
                 max {:+.2} ms (the simulator's timer, the transfer, the fill and the release)",
                percentile(&after_upstream_ms, 0.5),
                percentile(&after_upstream_ms, 0.99),
                after_upstream_ms[after_upstream_ms.len() - 1]
            );
        }
        let ones = upstream_per_round.iter().filter(|&&n| n == 1).count();
        println!(
            "  mdproxy: upstream requests per round {upstream_per_round:?} \
             ({ones} of {rounds} rounds took exactly 1; {proxy_upstream} in all)"
        );
        floor_figures.print(
            "floor (bare hyper, one shared timer, same harness)",
            upstream_ms,
        );
        let anchors = std::env::var("COALESCE_ANCHORS").unwrap_or_default();
        for name in anchors.split(',').filter(|n| !n.is_empty()) {
            let anchor = match start_anchor(name, servers.sim.addr, servers.sim.token()) {
                Ok(anchor) => anchor,
                Err(e) => {
                    println!("  {name}: not measured: {e}");
                    continue;
                }
            };
            let (mut figures, asked) =
                rounds_against(anchor.addr, waiters, &codes, upstream_ms, &servers.sim).await;
            figures.print(anchor.name, upstream_ms);
            println!("  {}: upstream requests per round {asked:?}", anchor.name);
        }
    });
    drop(client_rt);
    proxy_rt.block_on(servers.proxy.shutdown());
    sim_rt.block_on(servers.sim.shutdown());
}
