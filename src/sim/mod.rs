//! The simulated upstream: the whole API from the catalogue, deterministic data,
//! its own bearer token, fault switches (latency, jitter, error rate, `fail_next`,
//! hanging requests) and request counters that tests read in-process or over HTTP at
//! `/_sim/stats`, plus a raw-request recorder that sees every request before any of
//! the simulator's own checks. Used by `mdproxy sim`, `mdproxy demo`, the tests and the benches.

pub mod api;
pub mod market;
pub mod universe;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::catalog::catalog;
use crate::api::params;
use crate::api::router::{API_PREFIX, Router};
use crate::cache::market::Clock;
use crate::config::Secret;
use crate::edge::body::{self, Body};
use crate::edge::response::IntoResponse;
use crate::error::Error;

/// Settings of a simulator.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Address to listen on (`127.0.0.1:0` for an ephemeral port).
    pub listen: String,
    /// Bearer token the simulator requires; empty accepts any request.
    pub token: Secret,
    /// Added to every answer.
    pub latency_ms: u64,
    /// Random extra latency, 0..=jitter_ms.
    pub jitter_ms: u64,
    /// Fraction of requests answered 500 (0.0..=1.0).
    pub error_rate: f64,
    /// Push interval of the stream endpoint.
    pub stream_interval_ms: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: "127.0.0.1:9090".into(),
            token: Secret::new("sim-upstream-token"),
            latency_ms: 0,
            jitter_ms: 0,
            error_rate: 0.0,
            stream_interval_ms: 3_000,
        }
    }
}

/// Fault switches, changeable while the simulator runs.
#[derive(Debug, Default)]
struct Faults {
    latency_ms: AtomicU64,
    jitter_ms: AtomicU64,
    /// Error rate in parts per million.
    error_ppm: AtomicU32,
    /// The next n API requests answer 500.
    fail_next: AtomicU64,
    /// API requests hang until the simulator stops.
    hang: AtomicBool,
}

/// Request counters.
#[derive(Debug)]
struct Stats {
    total: AtomicU64,
    /// By catalogue id.
    by_endpoint: Vec<AtomicU64>,
    /// By canonical target (path and query).
    by_target: Mutex<HashMap<String, u64>>,
    /// When each API request arrived (bounded: the first [`MAX_LOGGED`]).
    arrivals: Mutex<Vec<std::time::Instant>>,
}

/// Most request arrival times kept for tests that check a rate.
const MAX_LOGGED: usize = 100_000;

/// Most raw request URIs kept by the recorder (the latest ones).
pub const MAX_RAW: usize = 1_000;

/// Every request received, recorded before the simulator checks anything (token,
/// route, method, parameters), so a test can tell that a request never reached the
/// upstream at all rather than that the upstream refused it.
#[derive(Debug, Default)]
struct RawLog {
    /// All requests received since start (or the last clear).
    count: AtomicU64,
    /// The raw URIs (path and query as received) of the latest [`MAX_RAW`].
    uris: Mutex<VecDeque<String>>,
}

impl RawLog {
    fn record(&self, uri: &http::Uri) {
        let mut uris = self.uris.lock().expect("raw log lock is never poisoned");
        if uris.len() == MAX_RAW {
            uris.pop_front();
        }
        uris.push_back(uri.to_string());
        // Counted under the lock so that count and list agree after a clear.
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

struct Shared {
    router: Router,
    token: Secret,
    faults: Faults,
    stats: Stats,
    raw: RawLog,
    stream_interval: Duration,
    clock: Arc<dyn Clock>,
    stop: CancellationToken,
}

/// A running simulator. Dropping it stops it.
pub struct SimHandle {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl SimHandle {
    /// `http://ADDR/api/v1`: the base URL to give the proxy.
    pub fn base_url(&self) -> String {
        format!("http://{}{API_PREFIX}", self.addr)
    }

    /// The token the simulator requires.
    pub fn token(&self) -> &Secret {
        &self.shared.token
    }

    /// Requests received for one endpoint (by path template, e.g. `/stock/kline`).
    ///
    /// # Panics
    /// When `template` is not in the catalogue (a test bug).
    pub fn hits(&self, template: &str) -> u64 {
        let endpoint = catalog()
            .by_path(template)
            .unwrap_or_else(|| panic!("{template} is not a catalogue path"));
        self.shared.stats.by_endpoint[endpoint.id].load(Ordering::SeqCst)
    }

    /// Requests received for one canonical target (e.g. `/stock/detail/600519.SH`).
    pub fn hits_for(&self, target: &str) -> u64 {
        let map = self
            .shared
            .stats
            .by_target
            .lock()
            .expect("stats lock is never poisoned");
        map.get(target).copied().unwrap_or(0)
    }

    /// Arrival times of the API requests received (the first 100,000).
    pub fn arrivals(&self) -> Vec<std::time::Instant> {
        self.shared
            .stats
            .arrivals
            .lock()
            .expect("stats lock is never poisoned")
            .clone()
    }

    /// All API requests received.
    pub fn total(&self) -> u64 {
        self.shared.stats.total.load(Ordering::SeqCst)
    }

    /// Every request received (any path, method or token, valid or not), counted
    /// before the simulator's own checks; since start or the last
    /// [`clear_raw_requests`](Self::clear_raw_requests).
    pub fn raw_count(&self) -> u64 {
        self.shared.raw.count.load(Ordering::SeqCst)
    }

    /// The raw URIs (path and query, exactly as received) of the latest 1,000
    /// requests, oldest first.
    pub fn raw_requests(&self) -> Vec<String> {
        self.shared
            .raw
            .uris
            .lock()
            .expect("raw log lock is never poisoned")
            .iter()
            .cloned()
            .collect()
    }

    /// Forgets the recorded raw requests and sets [`raw_count`](Self::raw_count) to 0.
    pub fn clear_raw_requests(&self) {
        let mut uris = self
            .shared
            .raw
            .uris
            .lock()
            .expect("raw log lock is never poisoned");
        uris.clear();
        self.shared.raw.count.store(0, Ordering::SeqCst);
    }

    /// Sets the fixed latency.
    pub fn set_latency(&self, latency: Duration) {
        self.shared
            .faults
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// Sets the fraction of requests answered 500.
    pub fn set_error_rate(&self, rate: f64) {
        self.shared
            .faults
            .error_ppm
            .store((rate.clamp(0.0, 1.0) * 1e6) as u32, Ordering::SeqCst);
    }

    /// Answers the next `n` API requests with 500.
    pub fn fail_next(&self, n: u64) {
        self.shared.faults.fail_next.store(n, Ordering::SeqCst);
    }

    /// Makes API requests hang while on: they answer once it is switched off (or
    /// fail when the simulator stops).
    pub fn set_hang(&self, hang: bool) {
        self.shared.faults.hang.store(hang, Ordering::SeqCst);
    }

    /// Stops the simulator and waits for it.
    pub async fn shutdown(mut self) {
        self.shared.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

/// Starts a simulator on `config.listen`, reading time from `clock`.
///
/// # Errors
/// When the address cannot be bound.
pub async fn start(config: &SimConfig, clock: Arc<dyn Clock>) -> std::io::Result<SimHandle> {
    let listener = TcpListener::bind(&config.listen).await?;
    let addr = listener.local_addr()?;
    let faults = Faults::default();
    faults.latency_ms.store(config.latency_ms, Ordering::SeqCst);
    faults.jitter_ms.store(config.jitter_ms, Ordering::SeqCst);
    faults.error_ppm.store(
        (config.error_rate.clamp(0.0, 1.0) * 1e6) as u32,
        Ordering::SeqCst,
    );
    let shared = Arc::new(Shared {
        router: Router::new(catalog()),
        token: config.token.clone(),
        faults,
        stats: Stats {
            total: AtomicU64::new(0),
            by_endpoint: catalog()
                .endpoints()
                .iter()
                .map(|_| AtomicU64::new(0))
                .collect(),
            by_target: Mutex::new(HashMap::new()),
            arrivals: Mutex::new(Vec::new()),
        },
        raw: RawLog::default(),
        stream_interval: Duration::from_millis(config.stream_interval_ms.max(10)),
        clock,
        stop: CancellationToken::new(),
    });
    // Build the universe now rather than inside the first request.
    let _ = universe::universe();
    let handler_shared = Arc::clone(&shared);
    let handler = move |req: Request<hyper::body::Incoming>, _connection| {
        let shared = Arc::clone(&handler_shared);
        async move { Ok::<_, std::convert::Infallible>(handle(&shared, req).await) }
    };
    let stop = shared.stop.clone();
    let tracker = tokio_util::task::TaskTracker::new();
    let task = tokio::spawn(crate::edge::server::serve(
        listener,
        handler,
        crate::edge::server::ConnectionLimits::internal(10_000, 10_000, Duration::from_secs(30)),
        Duration::from_secs(1),
        tracker,
        async move { stop.cancelled().await },
    ));
    tracing::info!(%addr, "simulated upstream listening");
    Ok(SimHandle {
        addr,
        shared,
        task: Some(task),
    })
}

fn json_response(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut r = Response::new(body::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle<B>(shared: &Shared, req: Request<B>) -> Response<Body> {
    shared.raw.record(req.uri());
    let path = req.uri().path();
    if path == "/_sim/stats" {
        return stats_response(shared);
    }
    let Some(api_path) = path.strip_prefix(API_PREFIX) else {
        return Error::NotFound.to_response();
    };
    if !shared.token.is_empty() {
        let ok =
            crate::edge::auth::bearer(req.headers()).is_some_and(|t| t == shared.token.expose());
        if !ok {
            return Error::Unauthorized.to_response();
        }
    }
    let Some(route) = shared.router.route(api_path) else {
        return Error::NotFound.to_response();
    };
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return Error::MethodNotAllowed.to_response();
    }
    let valid = match params::validate(route.endpoint, route.params(), req.uri().query()) {
        Ok(v) => v,
        Err(e) => return e.to_response(),
    };
    shared.stats.total.fetch_add(1, Ordering::SeqCst);
    {
        let mut arrivals = shared
            .stats
            .arrivals
            .lock()
            .expect("stats lock is never poisoned");
        if arrivals.len() < MAX_LOGGED {
            arrivals.push(std::time::Instant::now());
        }
    }
    shared.stats.by_endpoint[valid.endpoint.id].fetch_add(1, Ordering::SeqCst);
    *shared
        .stats
        .by_target
        .lock()
        .expect("stats lock is never poisoned")
        .entry(valid.target.clone())
        .or_default() += 1;

    let faults = &shared.faults;
    // Hang while the switch is on (checked every 20 ms), or until the simulator stops.
    while faults.hang.load(Ordering::SeqCst) {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            () = shared.stop.cancelled() => return Error::Internal.to_response(),
        }
    }
    let latency = faults.latency_ms.load(Ordering::SeqCst)
        + fastrand::u64(0..=faults.jitter_ms.load(Ordering::SeqCst));
    if latency > 0 {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(latency)) => {}
            () = shared.stop.cancelled() => return Error::Internal.to_response(),
        }
    }
    let failing = faults
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
        || fastrand::u32(0..1_000_000) < faults.error_ppm.load(Ordering::SeqCst);
    if failing {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from_static(br#"{"success":false,"message":"simulated upstream failure"}"#),
        );
    }

    if valid.endpoint.streaming {
        return stream(shared, &valid);
    }
    match api::answer(&valid, shared.clock.now()) {
        Ok(data) => {
            let body = serde_json::to_vec(&json!({ "success": true, "data": data }))
                .expect("generated JSON serialises");
            json_response(StatusCode::OK, body.into())
        }
        Err(api::Miss::NotFound(message)) => {
            let body = serde_json::to_vec(&json!({ "success": false, "message": message }))
                .expect("generated JSON serialises");
            json_response(StatusCode::NOT_FOUND, body.into())
        }
    }
}

fn stats_response(shared: &Shared) -> Response<Body> {
    let endpoints: serde_json::Map<String, serde_json::Value> = catalog()
        .endpoints()
        .iter()
        .zip(&shared.stats.by_endpoint)
        .filter_map(|(e, n)| {
            let n = n.load(Ordering::SeqCst);
            (n > 0).then(|| (e.path.clone(), n.into()))
        })
        .collect();
    let body =
        json!({ "total": shared.stats.total.load(Ordering::SeqCst), "endpoints": endpoints });
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).expect("stats serialise").into(),
    )
}

/// The simulator's own quote stream: every interval, quotes for the requested codes,
/// `pz` per event.
fn stream(shared: &Shared, valid: &params::Valid) -> Response<Body> {
    let codes: Vec<&'static universe::Stock> = valid
        .query_value("codes")
        .map(|c| {
            c.split(',')
                .filter_map(|c| universe::universe().stock(c))
                .collect()
        })
        .unwrap_or_default();
    let pz: usize = valid
        .query_value("pz")
        .and_then(|p| p.parse().ok())
        .unwrap_or(20);
    let clock = Arc::clone(&shared.clock);
    let stop = shared.stop.clone();
    let mut interval = tokio::time::interval(shared.stream_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let first = Bytes::from_static(b"retry: 3000\n\n");
    let ticks = futures_util::stream::unfold(
        (interval, codes, clock, stop),
        move |(mut interval, codes, clock, stop)| async move {
            tokio::select! {
                _ = interval.tick() => {}
                () = stop.cancelled() => return None,
            }
            let now = clock.now();
            let mut out = String::new();
            for chunk in codes.chunks(pz.max(1)) {
                let items: Vec<serde_json::Value> =
                    chunk.iter().map(|s| api_quote(s, now)).collect();
                out.push_str(&format!(
                    "event: quote\nid: {}\ndata: {}\n\n",
                    now.timestamp() / market::SNAPSHOT_SECS,
                    serde_json::Value::from(items)
                ));
            }
            if out.is_empty() {
                out.push_str(": keepalive\n\n");
            }
            Some((Bytes::from(out), (interval, codes, clock, stop)))
        },
    );
    let chunks = futures_util::stream::once(async move { first }).chain(ticks);
    let mut r = Response::new(body::stream(chunks.boxed()));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn api_quote(s: &universe::Stock, now: chrono::DateTime<chrono::Utc>) -> serde_json::Value {
    let sec = market::Security {
        seed: s.seed,
        base_price: s.base_price,
        listed: s.listed,
        shares_wan: s.shares_wan,
    };
    market::quote(sec, s.limit(), now).to_json(&s.full_code(), &s.name)
}
