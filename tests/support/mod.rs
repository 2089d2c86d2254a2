//! Test support: a simulator and a proxy on ephemeral loopback ports, and an HTTP
//! client that talks to them. Everything stops when the `Env` is dropped.
#![allow(dead_code)]

pub mod redis;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use mdproxy::app::App;
use mdproxy::config::{Config, Secret};
use mdproxy::market::{Clock, ManualClock, SystemClock};
use mdproxy::sim::{SimConfig, SimHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The client token every test proxy accepts.
pub const TOKEN: &str = "test-token";
/// The upstream token every test simulator requires.
pub const UPSTREAM_TOKEN: &str = "upstream-secret-4f9a";

/// A simulator, a proxy in front of it, and a client.
pub struct Env {
    pub sim: SimHandle,
    pub proxy: App,
    pub client: reqwest::Client,
    pub clock: Option<Arc<ManualClock>>,
}

/// An HTTP client for loopback tests (no system proxy, bounded waits).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(256)
        .build()
        .unwrap()
}

/// A sim config on an ephemeral port with the test upstream token.
pub fn sim_config() -> SimConfig {
    SimConfig {
        listen: "127.0.0.1:0".into(),
        token: Secret::new(UPSTREAM_TOKEN),
        stream_interval_ms: 100,
        ..SimConfig::default()
    }
}

/// GET `target` (relative to `/api/v1`) from a simulator with its key: the status
/// and the JSON body.
pub async fn sim_json(
    sim: &SimHandle,
    client: &reqwest::Client,
    target: &str,
) -> (u16, serde_json::Value) {
    let r = client
        .get(format!("{}{target}", sim.base_url()))
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The proxy config for a simulator.
pub fn proxy_config(sim: &SimHandle) -> Config {
    let mut config = mdproxy::demo::config_for(sim, "127.0.0.1:0", Secret::new(TOKEN));
    config.upstream.timeout_ms = 2_000;
    config.upstream.connect_timeout_ms = 500;
    // Tests that count upstream requests must not see prewarm traffic, and only the
    // budget tests want a budget.
    config.scheduler.enabled = false;
    config.limits.upstream_rps = 0;
    // Tests that count upstream failures must see every request reach the upstream;
    // the breaker tests turn it on.
    config.upstream.breaker_failures = 0;
    // Nor the start-up probe; tests/admin.rs turns it on.
    config.upstream.probe_target = String::new();
    config
}

/// Saturday 7 March 2026, 12:00 China time: the market is closed all day, so what a
/// test caches stays fresh whatever the real date is.
pub const SATURDAY_NOON: &str = "2026-03-07T04:00:00Z";

/// A clock standing still on a Saturday ([`SATURDAY_NOON`]).
pub fn saturday() -> Arc<ManualClock> {
    clock_at(SATURDAY_NOON)
}

/// Starts with defaults and a clock standing at [`SATURDAY_NOON`]: no test reads the
/// real date, and cached answers are fresh until Monday's open.
pub async fn start() -> Env {
    start_with(|_| {}, |_| {}, Some(saturday())).await
}

/// A clock standing at `rfc3339`.
pub fn clock_at(rfc3339: &str) -> Arc<ManualClock> {
    ManualClock::new(
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc),
    )
}

/// Starts with adjusted configs; `clock` (if any) drives both sides.
pub async fn start_with(
    sim: impl FnOnce(&mut SimConfig),
    proxy: impl FnOnce(&mut Config),
    clock: Option<Arc<ManualClock>>,
) -> Env {
    let dyn_clock: Arc<dyn Clock> = match &clock {
        Some(c) => c.clone(),
        None => Arc::new(SystemClock),
    };
    let mut sim_cfg = sim_config();
    sim(&mut sim_cfg);
    let sim = mdproxy::sim::start(&sim_cfg, dyn_clock.clone())
        .await
        .unwrap();
    let mut cfg = proxy_config(&sim);
    proxy(&mut cfg);
    let proxy = mdproxy::app::start(&cfg, dyn_clock).await.unwrap();
    Env {
        sim,
        proxy,
        client: client(),
        clock,
    }
}

impl Env {
    /// The proxy URL of a target relative to `/api/v1`.
    pub fn url(&self, target: &str) -> String {
        format!("{}{target}", self.proxy.base_url())
    }

    /// GET with the test token.
    pub async fn get(&self, target: &str) -> reqwest::Response {
        self.client
            .get(self.url(target))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// `method` on a target relative to `/api/v1` over a raw connection, with the
    /// test token and extra headers.
    pub async fn raw(&self, method: &str, target: &str, extra: &[(&str, &str)]) -> RawResponse {
        let auth = format!("Bearer {TOKEN}");
        let mut all = vec![("Authorization", auth.as_str())];
        all.extend_from_slice(extra);
        raw_request(
            self.proxy.addr,
            method,
            &format!("{}{target}", mdproxy::api::router::API_PREFIX),
            &all,
        )
        .await
    }

    /// GET with the test token and extra headers.
    pub async fn get_with(&self, target: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.client.get(self.url(target)).bearer_auth(TOKEN);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }
}

/// Every value of a response's header, in order (one per header line).
pub fn headers(r: &reqwest::Response, name: &str) -> Vec<String> {
    r.headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// A response's header as a string ("" when absent). Only the first value: use
/// [`headers`] where a header may come more than once (`Vary`).
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// A response read off a raw TCP connection: exactly the bytes the server sent.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Everything after the header block, up to the server closing the connection.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first value of a header (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name` (a header may come on several lines).
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The only value of `name`; fails when it is given more than once.
    pub fn one(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "{name} given {} times", all.len());
        all.first().copied()
    }

    /// Whether any `Vary` line lists `field`.
    pub fn varies_on(&self, field: &str) -> bool {
        self.all("vary")
            .iter()
            .flat_map(|v| v.split(','))
            .any(|f| f.trim().eq_ignore_ascii_case(field))
    }
}

/// Polls `check` every 20 ms for at most `limit`; true when it held.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// [`eventually`] for a check that must ask over the network: polled every 50 ms
/// until it holds or `limit` passes.
pub async fn eventually_async<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check().await
}

/// The first answer of `ask` in `coding` (its `Content-Encoding`, given first in
/// the pair): a request for a coding that the entry's fill did not make (no client
/// had asked for it) gets the identity body while it is made in the background, so
/// a test asks again, every 10 ms for at most 3 s.
pub async fn once_coded<T, F, Fut>(coding: &str, mut ask: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (String, T)>,
{
    let mut given = Vec::new();
    for _ in 0..300 {
        let (got, answer) = ask().await;
        if got == coding {
            return answer;
        }
        given.push(got);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never {coding}: given {given:?}");
}

/// Sends `method target` (a path with query) over a fresh connection with
/// `Connection: close` and reads until the server closes it, so any byte sent after
/// the headers shows up in `body` (an HTTP client would not read a HEAD or 304 body).
pub async fn raw_request(
    addr: std::net::SocketAddr,
    method: &str,
    target: &str,
    extra: &[(&str, &str)],
) -> RawResponse {
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in extra {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut bytes))
        .await
        .expect("the server closes a Connection: close exchange")
        .unwrap();
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete header block");
    let head = std::str::from_utf8(&bytes[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    RawResponse {
        status,
        headers,
        body: bytes[split + 4..].to_vec(),
    }
}

/// The JSON body of an error response, checked to be the real API's failure
/// envelope (`success: false`, `data: null`, a readable `message`) with mdproxy's
/// `error` detail (whose message is the same text).
pub async fn error_of(r: reqwest::Response) -> (u16, String, Option<String>) {
    let status = r.status().as_u16();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["success"], false, "{v}");
    assert!(
        v.get("data").is_some_and(serde_json::Value::is_null),
        "data: null: {v}"
    );
    let message = v["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "a top-level message: {v}");
    assert_eq!(v["error"]["message"], message, "{v}");
    (
        status,
        v["error"]["code"].as_str().unwrap().to_owned(),
        v["error"]["param"].as_str().map(str::to_owned),
    )
}

/// One server-sent event.
#[derive(Debug, Clone, Default)]
pub struct Event {
    /// The `event:` field ("" for a block without data, such as a keepalive).
    pub event: String,
    pub id: String,
    pub data: String,
    /// Comment lines (keepalives) and `retry:` come as their own "events".
    pub comment: bool,
    pub retry: Option<u64>,
}

impl Event {
    /// The quotes of a `quote` event.
    pub fn quotes(&self) -> Vec<serde_json::Value> {
        serde_json::from_str::<Vec<serde_json::Value>>(&self.data).unwrap()
    }

    /// The codes of a `quote` event's upstream rows, as the simulator writes them
    /// (six digits: its universe holds stocks only, so they are unique).
    pub fn codes(&self) -> Vec<String> {
        self.quotes().iter().map(row_code).collect()
    }
}

/// The `code` of an upstream quote row, read as the simulator wrote it (not with
/// the proxy's own parsing: the test is the oracle).
pub fn row_code(row: &serde_json::Value) -> String {
    row["code"]
        .as_str()
        .expect("a quote row has a code")
        .to_owned()
}

/// What reading a stream gave: an event, its clean end, a broken body, or nothing
/// within the wait (a stream that stays silent has not ended).
#[derive(Debug)]
pub enum Next {
    Event(Event),
    End,
    Broken(String),
    Timeout,
}

/// Reads events from a streaming response.
///
/// Fields are parsed by the `eventsource-stream` crate. That crate follows the
/// EventSource spec and dispatches only blocks that carry `data:`, so comments
/// (keepalives) and a `retry:` alone never reach its caller. Tests check both, so
/// this reader cuts the body into blocks (at a blank line), hands each block to the
/// crate, and for a block the crate does not dispatch asks it again with an empty
/// `data:` line added: the crate still parses `retry:`/`id:`, and the result comes
/// back as an event with empty `event` and `data`. `comment` is set when the block
/// had a line starting with `:` (the one thing the crate drops outright).
pub struct SseReader {
    response: reqwest::Response,
    buffer: Vec<u8>,
    ended: bool,
}

/// Where the first blank line (LF LF, CR LF CR LF or CR CR) of `buf` starts, and
/// how long it is.
fn block_end(buf: &[u8]) -> Option<(usize, usize)> {
    [&b"\n\n"[..], b"\r\n\r\n", b"\r\r"]
        .iter()
        .filter_map(|sep| {
            buf.windows(sep.len())
                .position(|w| w == *sep)
                .map(|at| (at, sep.len()))
        })
        .min()
}

/// The events the crate dispatches for `bytes` (one complete input).
fn crate_events(bytes: Vec<u8>) -> Vec<eventsource_stream::Event> {
    use eventsource_stream::Eventsource;
    use futures_util::{FutureExt, StreamExt};
    let stream = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]);
    stream
        .eventsource()
        .map(|e| e.expect("a valid event stream"))
        .collect::<Vec<_>>()
        .now_or_never()
        .expect("parsing an in-memory block does not wait")
}

/// One block (without its terminating blank line) as an [`Event`].
fn parse_block(content: &[u8]) -> Event {
    let comment = content
        .split(|b| *b == b'\n' || *b == b'\r')
        .any(|line| line.first() == Some(&b':'));
    let mut whole = content.to_vec();
    whole.extend_from_slice(b"\n\n");
    let mut events = crate_events(whole);
    assert!(events.len() <= 1, "one block is at most one event");
    let (e, has_data) = match events.pop() {
        Some(e) => (e, true),
        None => {
            let mut probe = content.to_vec();
            probe.extend_from_slice(b"\ndata:\n\n");
            let e = crate_events(probe)
                .pop()
                .expect("a block with a data line is dispatched");
            (e, false)
        }
    };
    Event {
        event: if has_data { e.event } else { String::new() },
        id: e.id,
        data: if has_data { e.data } else { String::new() },
        comment,
        retry: e.retry.map(|d| d.as_millis() as u64),
    }
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> SseReader {
        SseReader {
            response,
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next event, or why there is none within `wait`.
    pub async fn next_or_end(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some((at, len)) = block_end(&self.buffer) {
                let block: Vec<u8> = self.buffer.drain(..at + len).collect();
                return Next::Event(parse_block(&block[..at]));
            }
            if self.ended {
                // An unfinished block at the end is discarded, as the spec says.
                return Next::End;
            }
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Err(_) => return Next::Timeout,
                Ok(Err(e)) => return Next::Broken(e.to_string()),
                Ok(Ok(None)) => self.ended = true,
                Ok(Ok(Some(chunk))) => self.buffer.extend_from_slice(&chunk),
            }
        }
    }

    /// The next event, or `None` when the stream ends or `wait` passes.
    pub async fn next(&mut self, wait: Duration) -> Option<Event> {
        match self.next_or_end(wait).await {
            Next::Event(e) => Some(e),
            Next::End | Next::Broken(_) | Next::Timeout => None,
        }
    }

    /// The next `quote` event, skipping retry and keepalive lines.
    pub async fn next_quote(&mut self, wait: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.next(left).await?;
            if e.event == "quote" {
                return Some(e);
            }
        }
    }
}

/// Moves `clock` forward by one simulated 3 s snapshot every `every` (real time), so
/// simulated quotes change; at most `steps` times. Stops when the handle drops.
pub fn tick_clock(
    clock: Arc<ManualClock>,
    every: Duration,
    steps: u32,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for _ in 0..steps {
            tokio::time::sleep(every).await;
            clock.advance(Duration::from_secs(3));
        }
    })
}

/// Runs a command to its end and returns what it printed on stdout; fails the test,
/// showing its stderr, when it does not exit 0.
pub fn stdout_of(command: &mut std::process::Command) -> Vec<u8> {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} exited {}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Every line `child` writes on stderr, forwarded as it comes (which also keeps the
/// pipe drained); the child must have been spawned with a piped stderr.
/// A fresh directory `<name>-<pid>` under the system's temporary one, and the path
/// of `file` in it (not written).
pub fn scratch_file(name: &str, file: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    (dir, path)
}

/// `serve.toml` holding `text` in a fresh scratch directory `name`: the directory
/// and the file.
pub fn serve_toml(name: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let (dir, path) = scratch_file(name, "serve.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// `mdproxy serve <args> --config <path>` with its stdout and stderr as given,
/// killed when dropped.
pub fn serve(
    path: &std::path::Path,
    args: &[&str],
    stdout: std::process::Stdio,
    stderr: std::process::Stdio,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"))
        .arg("serve")
        .args(args)
        .arg("--config")
        .arg(path)
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Sends signal `name` (`TERM`, `HUP`) to `child` with kill(1).
pub fn signal(child: &tokio::process::Child, name: &str) {
    let pid = child.id().expect("the child runs").to_string();
    let sent = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} {pid}");
}

pub fn stderr_lines(
    child: &mut tokio::process::Child,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use tokio::io::AsyncBufReadExt;
    let (lines_tx, lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stderr = child.stderr.take().expect("stderr is piped");
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// GETs `url` (an admin address, say) without a token and returns its body.
/// The JSON document at `url` (`/status.json`, the simulator's stats).
pub async fn json(url: &str) -> serde_json::Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The first `n` A-share codes the simulator lists.
pub fn listed_codes(n: usize) -> Vec<String> {
    mdproxy::sim::universe::universe()
        .stocks
        .iter()
        .take(n)
        .map(|s| s.code.clone())
        .collect()
}

pub async fn text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The pinned Python tools (schemathesis, the OpenAPI validator, the Prometheus
/// parser), installed by `scripts/python-tools` into the target directory when
/// missing; returns the virtual environment's `bin/`.
pub fn python_tools() -> std::path::PathBuf {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the tmp dir is inside the target dir");
    let mut install =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/python-tools"));
    let stdout = stdout_of(install.arg(target.join("pyenv")));
    std::path::PathBuf::from(String::from_utf8(stdout).unwrap().trim())
}

/// A simulator on a loopback port that takes `token` as its API key.
pub async fn sim_with_token(token: &str) -> SimHandle {
    mdproxy::sim::start(
        &SimConfig {
            listen: "127.0.0.1:0".into(),
            token: Secret::new(token),
            ..Default::default()
        },
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
}

impl Env {
    /// GETs `url` (an admin address, say) without a token.
    pub async fn fetch(&self, url: &str) -> reqwest::Response {
        self.client.get(url).send().await.unwrap()
    }

    /// [`fetch`](Self::fetch)'s body as text.
    pub async fn text(&self, url: &str) -> String {
        self.fetch(url).await.text().await.unwrap()
    }
}

/// A hand-written upstream: answers each request with the next scripted response
/// (a 500 when the script has run out) and counts what it received.
pub struct Scripted {
    pub addr: SocketAddr,
    /// Each answer, and how long to hold it back.
    script: Arc<Mutex<VecDeque<(Duration, String)>>>,
    received: Arc<AtomicU64>,
}

impl Scripted {
    pub async fn start() -> Scripted {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Mutex::new(VecDeque::<(Duration, String)>::new()));
        let received = Arc::new(AtomicU64::new(0));
        let (s, r) = (script.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (script, received) = (s.clone(), r.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    received.fetch_add(1, Ordering::SeqCst);
                    let (late, response) =
                        script.lock().unwrap().pop_front().unwrap_or_else(|| {
                            (
                                Duration::ZERO,
                                response("500 Internal Server Error", &[], "{}"),
                            )
                        });
                    tokio::time::sleep(late).await;
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Scripted {
            addr,
            script,
            received,
        }
    }

    /// Answers a coming request with `response` (in order).
    pub fn then(&self, response: String) {
        self.then_late(Duration::ZERO, response);
    }

    /// Answers a coming request with `response`, `late` after it arrived.
    pub fn then_late(&self, late: Duration, response: String) {
        self.script.lock().unwrap().push_back((late, response));
    }

    /// Requests received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

/// An HTTP/1.1 response with `Connection: close`.
pub fn response(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}
