//! Test support: a simulator and a proxy on ephemeral loopback ports, and an HTTP
//! client that talks to them. Everything stops when the `Env` is dropped.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mdproxy::app::App;
use mdproxy::cache::market::{Clock, ManualClock, SystemClock};
use mdproxy::config::{Config, Secret};
use mdproxy::sim::{SimConfig, SimHandle};

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

/// The proxy config for a simulator.
pub fn proxy_config(sim: &SimHandle) -> Config {
    let mut config = mdproxy::demo::config_for(sim, "127.0.0.1:0", Secret::new(TOKEN));
    config.upstream.timeout_ms = 2_000;
    config.upstream.connect_timeout_ms = 500;
    // Tests that count upstream requests must not see prewarm traffic, and only the
    // budget tests want a budget.
    config.scheduler.enabled = false;
    config.limits.upstream_rps = 0;
    config
}

/// Starts with defaults and the system clock.
pub async fn start() -> Env {
    start_with(|_| {}, |_| {}, None).await
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

    /// GET with the test token and extra headers.
    pub async fn get_with(&self, target: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.client.get(self.url(target)).bearer_auth(TOKEN);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }
}

/// A response's header as a string ("" when absent).
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The JSON body of an error response, checked to be the envelope.
pub async fn error_of(r: reqwest::Response) -> (u16, String, Option<String>) {
    let status = r.status().as_u16();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["success"], false, "{v}");
    (
        status,
        v["error"]["code"].as_str().unwrap().to_owned(),
        v["error"]["param"].as_str().map(str::to_owned),
    )
}

/// One server-sent event.
#[derive(Debug, Clone, Default)]
pub struct Event {
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

    /// The codes of a `quote` event.
    pub fn codes(&self) -> Vec<String> {
        self.quotes()
            .iter()
            .map(|q| q["code"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Reads events from a streaming response.
pub struct SseReader {
    response: reqwest::Response,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> SseReader {
        SseReader {
            response,
            buffer: String::new(),
        }
    }

    /// The next event, or `None` when the stream ends or `wait` passes.
    pub async fn next(&mut self, wait: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut e = Event::default();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        e.event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        e.id = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        e.data = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("retry: ") {
                        e.retry = v.parse().ok();
                    } else if line.starts_with(':') {
                        e.comment = true;
                    }
                }
                return Some(e);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .ok()?
                .ok()??;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
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
