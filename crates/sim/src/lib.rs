//! The simulated upstream, the other side of the wire, modelled on the real one's
//! public docs (routes, shapes, key forms, failure envelopes), with fault switches and
//! counters for tests. It reads requests itself; it shares paths with the proxy only.

mod api;
mod body;
mod company;
mod docs;
pub mod market;
mod refusal;
mod request;
mod state;
mod stream;
pub mod universe;
mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use mdproxy_market::Clock;

pub use state::{MAX_RAW, ThrottleMode, Throttling};
pub use wire::DIRTY_PATHS;

use state::{Faults, Limit, RawLog, Shared, Stats};

/// Where every path of the API lives.
const API_PREFIX: &str = "/api/v1";

/// Settings of a simulator.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Address to listen on (`127.0.0.1:0` for an ephemeral port).
    pub listen: String,
    /// The API key the simulator requires (as a bearer token, an `x-api-key`
    /// header or an `x-api-key` query parameter); empty accepts any request.
    pub token: String,
    /// Added to every answer.
    pub latency_ms: u64,
    /// Random extra latency, 0..=jitter_ms.
    pub jitter_ms: u64,
    /// Fraction of requests answered 500 (0.0..=1.0).
    pub error_rate: f64,
    /// Push interval of the stream endpoint.
    pub stream_interval_ms: u64,
    /// Whether [`DIRTY_PATHS`] answer bodies with raw control characters in strings
    /// (not strict JSON), as the real upstream's may.
    pub dirty_bodies: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: "127.0.0.1:9090".into(),
            token: "sim-upstream-token".into(),
            latency_ms: 0,
            jitter_ms: 0,
            error_rate: 0.0,
            stream_interval_ms: 3_000,
            dirty_bodies: false,
        }
    }
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
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Requests served for one documented route (its template, e.g. `/stock/kline`
    /// or `/stock/financial/snapshot/{code}`).
    ///
    /// # Panics
    /// When `template` is not documented (a test bug).
    pub fn hits(&self, template: &str) -> u64 {
        let id = docs::position(template)
            .unwrap_or_else(|| panic!("{template} is not a route of the simulator"));
        self.shared.stats.by_route[id].load(Ordering::SeqCst)
    }

    /// Requests served for one target exactly as received: path relative to
    /// `/api/v1` and raw query (e.g. `/stock/detail/600519.SH`,
    /// `/market/sector-flow/list?dimension=region`); of the first 100,000 distinct
    /// targets (a later new one reads 0).
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

    /// The headers of the latest request received (any path), as they came: what
    /// the upstream is told besides the target (`traceparent`, `x-request-id`...).
    pub fn last_request_headers(&self) -> Option<http::HeaderMap> {
        self.shared
            .raw
            .last_headers
            .lock()
            .expect("raw log lock is never poisoned")
            .clone()
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

    /// From now on, requests for `path` (relative to `/api/v1`, without query, e.g.
    /// `/stock/kline` or `/fund/detail/159915`) fail the way the real upstream reports
    /// its own failures: HTTP 200 with `{"success":false,"data":null,"message":...}`.
    /// They still count as served.
    pub fn fail_path(&self, path: &str, message: &str) {
        self.failing_paths()
            .insert(path.to_owned(), message.to_owned());
    }

    /// Undoes [`fail_path`](Self::fail_path) for `path`.
    pub fn heal_path(&self, path: &str) {
        self.failing_paths().remove(path);
    }

    /// Undoes every [`fail_path`](Self::fail_path).
    pub fn heal_all(&self) {
        self.failing_paths().clear();
    }

    fn failing_paths(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.shared
            .faults
            .failing_paths
            .lock()
            .expect("fault lock is never poisoned")
    }

    /// Switches invalid JSON bodies for [`DIRTY_PATHS`] on or off: raw control
    /// characters (a newline, U+0001) inside strings, still
    /// `{"success":true,"data":...}`.
    pub fn set_dirty_bodies(&self, on: bool) {
        self.shared.faults.dirty.store(on, Ordering::SeqCst);
    }

    /// Answers `path` (relative to `/api/v1`, any query) although the docs do not
    /// list it, as a route the upstream added after them: `{"success":true,"data":
    /// {"path":..,"query":..}}`.
    pub fn serve_undocumented(&self, path: &str) {
        self.shared
            .faults
            .undocumented
            .lock()
            .expect("fault lock is never poisoned")
            .push(path.to_owned());
    }

    /// Sets (or with `None` lifts) the source's own limit.
    pub fn set_throttling(&self, throttling: Option<Throttling>) {
        *self
            .shared
            .faults
            .throttling
            .lock()
            .expect("fault lock is never poisoned") = throttling.map(|throttling| Limit {
            throttling,
            window: i64::MIN,
            count: 0,
            banned_until_ms: i64::MIN,
        });
    }

    /// Times a ban began (the source's ban mode), and throttling answers given.
    pub fn bans(&self) -> u64 {
        self.shared.faults.bans.load(Ordering::SeqCst)
    }

    /// Throttling answers given (429s, and answers while banned).
    pub fn throttled(&self) -> u64 {
        self.shared.faults.throttled.load(Ordering::SeqCst)
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
    faults.dirty.store(config.dirty_bodies, Ordering::SeqCst);
    let shared = Arc::new(Shared {
        token: config.token.clone(),
        faults,
        stats: Stats {
            total: AtomicU64::new(0),
            by_route: docs::routes().iter().map(|_| AtomicU64::new(0)).collect(),
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
    let task = tokio::spawn(serve(listener, Arc::clone(&shared)));
    tracing::info!(%addr, "simulated upstream listening");
    Ok(SimHandle {
        addr,
        shared,
        task: Some(task),
    })
}

/// The simulator's own accept loop: hyper-util's auto builder (HTTP/1.1 and h2c)
/// for each connection, until the stop token; then the connections get a second to
/// finish.
async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = shared.stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let handler_shared = Arc::clone(&shared);
        let service = hyper::service::service_fn(move |req| {
            let shared = Arc::clone(&handler_shared);
            async move { Ok::<_, std::convert::Infallible>(wire::handle(&shared, req).await) }
        });
        let connection = builder
            .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service)
            .into_owned();
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = watched.await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
}
