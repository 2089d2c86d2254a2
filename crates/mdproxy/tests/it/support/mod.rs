//! The product's test support: a simulator and a proxy on ephemeral loopback ports
//! (everything stops when the `Env` is dropped), the binary as a child process, and
//! real Redis servers ([`redis`]). What belongs to neither side of the wire comes
//! from `mdproxy-testkit`, re-exported here.
#![allow(dead_code)]

pub mod redis;

use std::sync::Arc;

use mdproxy_config::{Config, Secret};
use mdproxy_core::app::App;
use mdproxy_market::{Clock, ManualClock, SystemClock};
use mdproxy_sim::{SimConfig, SimHandle};
pub use mdproxy_testkit::clock::*;
pub use mdproxy_testkit::http::*;
pub use mdproxy_testkit::outside::program;
pub use mdproxy_testkit::process::*;
pub use mdproxy_testkit::scripted::*;
pub use mdproxy_testkit::sse::*;
pub use mdproxy_testkit::wait::*;

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

/// A sim config on an ephemeral port with the test upstream token.
pub fn sim_config() -> SimConfig {
    SimConfig {
        listen: "127.0.0.1:0".into(),
        token: UPSTREAM_TOKEN.into(),
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
    get_json(
        client,
        &format!("{}{target}", sim.base_url()),
        UPSTREAM_TOKEN,
    )
    .await
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

/// Starts with defaults and a clock standing at [`SATURDAY_NOON`]: no test reads the
/// real date, and cached answers are fresh until Monday's open.
pub async fn start() -> Env {
    start_with(|_| {}, |_| {}, Some(saturday())).await
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
    let sim = mdproxy_sim::start(&sim_cfg, dyn_clock.clone())
        .await
        .unwrap();
    let mut cfg = proxy_config(&sim);
    proxy(&mut cfg);
    let proxy = mdproxy_core::app::start(&cfg, dyn_clock).await.unwrap();
    Env {
        sim,
        proxy,
        client: client(),
        clock,
    }
}

/// Starts on Monday 2 March 2026 at 10:00 China time, the hub polling every 50 ms
/// and the clock moving 3 s every 100 ms while the handle lives (600 steps at
/// most): quotes move at each poll.
pub async fn start_moving(proxy: impl FnOnce(&mut Config)) -> (Env, tokio::task::JoinHandle<()>) {
    let clock = clock_at("2026-03-02T02:00:00Z");
    let env = start_with(
        |_| {},
        |c| {
            c.hub.session_interval_ms = 50;
            proxy(c);
        },
        Some(clock.clone()),
    )
    .await;
    let ticking = tick_clock(clock, std::time::Duration::from_millis(100), 600);
    (env, ticking)
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
            &format!("{}{target}", mdproxy_api::router::API_PREFIX),
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

/// A `mdproxy demo` child on ephemeral ports (`--listen` and `--admin-listen` on
/// `127.0.0.1:0`, and `args`) and what it printed: its base URL, its admin address
/// and its purge hint. Killed when dropped.
pub struct DemoProcess {
    pub process: Watched,
    /// `http://127.0.0.1:PORT/api/v1`.
    pub base: String,
    /// `127.0.0.1:PORT` of the admin listener.
    pub admin: String,
    /// The `purge: curl ...` line it printed.
    pub purge_hint: String,
}

impl DemoProcess {
    /// Starts it with `args` after the listeners' (`--log warn` unless they set a
    /// level) and waits for its addresses.
    pub async fn start(args: &[&str]) -> DemoProcess {
        use tokio::io::AsyncBufReadExt;
        let quiet: &[&str] = if args.contains(&"--log") {
            &[]
        } else {
            &["--log", "warn"]
        };
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"))
            .args([
                "demo",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .args(quiet)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut base, mut admin, mut purge_hint) = (None, None, None);
        let read = tokio::time::timeout(PROCESS_WAIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.strip_prefix("mdproxy demo: proxy ") {
                    base = rest.split_whitespace().next().map(str::to_owned);
                } else if let Some(rest) = line.strip_prefix("admin: http://") {
                    admin = rest.split("/status").next().map(str::to_owned);
                } else if line.starts_with("purge: ") {
                    purge_hint = Some(line.clone());
                }
                if base.is_some() && admin.is_some() && purge_hint.is_some() {
                    return;
                }
            }
        })
        .await;
        assert!(read.is_ok(), "demo printed its addresses");
        // The rest of stdout is drained, so the demo never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        DemoProcess {
            process: Watched::new(child),
            base: base.unwrap(),
            admin: admin.unwrap(),
            purge_hint: purge_hint.unwrap(),
        }
    }
}

/// A demo on ephemeral ports: the watched child, its base URL and admin address.
pub async fn demo_process() -> (Watched, String, String) {
    let demo = DemoProcess::start(&[]).await;
    (demo.process, demo.base, demo.admin)
}

/// The repository's root (README.md, deploy/, docs/, scripts/).
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A file of the repository, by its path from the root.
pub fn repo_file(path: &str) -> std::path::PathBuf {
    std::path::Path::new(ROOT).join(path)
}

/// README.md and the manual's pages (the `docs/` files named in lower case: the
/// upper-case ones are the upstream's documents and the benchmarks), each with its
/// path from the root.
pub fn manual() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_owned(), read_repo("README.md"))];
    let mut names: Vec<String> = std::fs::read_dir(repo_file("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n.starts_with(|c: char| c.is_ascii_lowercase()))
        .collect();
    names.sort();
    for name in names {
        let path = format!("docs/{name}");
        let text = read_repo(&path);
        pages.push((path, text));
    }
    pages
}

/// A file of the repository as text.
pub fn read_repo(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `bin/` of the Python tools that `scripts/test` installs (the tests that
/// use them are ignored without it); fails the test when they are missing.
pub fn python_tools() -> std::path::PathBuf {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the tmp dir is inside the target dir");
    mdproxy_testkit::outside::python_tools(target)
}

/// The first `n` A-share codes the simulator lists.
pub fn listed_codes(n: usize) -> Vec<String> {
    mdproxy_sim::universe::universe()
        .stocks
        .iter()
        .take(n)
        .map(|s| s.code.clone())
        .collect()
}

pub async fn sim_with_token(token: &str) -> SimHandle {
    mdproxy_sim::start(
        &SimConfig {
            listen: "127.0.0.1:0".into(),
            token: token.into(),
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
