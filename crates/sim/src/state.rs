//! The simulator's state shared by its server and its handlers: the fault and
//! throttling switches, the request counters and the raw request log.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use mdproxy_market::Clock;

/// Fault switches, changeable while the simulator runs.
#[derive(Debug, Default)]
pub(super) struct Faults {
    pub(super) latency_ms: AtomicU64,
    pub(super) jitter_ms: AtomicU64,
    /// Error rate in parts per million.
    pub(super) error_ppm: AtomicU32,
    /// The next n API requests answer 500.
    pub(super) fail_next: AtomicU64,
    /// API requests hang until the simulator stops.
    pub(super) hang: AtomicBool,
    /// Paths (relative to `/api/v1`, no query) answering HTTP 200 with
    /// `success: false` and this message.
    pub(super) failing_paths: Mutex<HashMap<String, String>>,
    /// [`super::DIRTY_PATHS`] answer invalid JSON.
    pub(super) dirty: AtomicBool,
    /// Paths the documentation does not list that answer anyway (a route the
    /// upstream added after its docs were written).
    pub(super) undocumented: Mutex<Vec<String>>,
    /// The source's own limit, when set, and its state.
    pub(super) throttling: Mutex<Option<Limit>>,
    /// Times a ban began, and throttling answers (429s and ban answers) given.
    pub(super) bans: AtomicU64,
    pub(super) throttled: AtomicU64,
}

/// A limit the upstream (or the source behind it) enforces: at most `limit` API
/// requests in each fixed `window` of the simulator's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttling {
    pub limit: u64,
    pub window: Duration,
    pub mode: ThrottleMode,
}

/// What the upstream does past its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleMode {
    /// `429` with `Retry-After`: the seconds until the window ends.
    TooManyRequests,
    /// The source bans the key: every request answers `200` with `success: false`
    /// ("socket hang up") for this long, whatever the window.
    Ban { lasts: Duration },
    /// The source warns, then bans: past the limit a request answers `200` with
    /// `success: false` ("socket hang up"), and once more than `warnings` of them
    /// come in one window the key is banned for `lasts` (every request answered
    /// alike, whatever the window). A client that slows at the first warnings is
    /// never banned; one that keeps its pace is.
    WarnThenBan { warnings: u64, lasts: Duration },
}

/// A throttling switch's state.
#[derive(Debug)]
pub(super) struct Limit {
    pub(super) throttling: Throttling,
    /// The window (in windows since the epoch of the simulator's clock) and its count.
    pub(super) window: i64,
    pub(super) count: u64,
    /// Banned until this instant of the simulator's clock (milliseconds).
    pub(super) banned_until_ms: i64,
}

/// Request counters.
#[derive(Debug)]
pub(super) struct Stats {
    pub(super) total: AtomicU64,
    /// By documented route, in the documented list's order.
    pub(super) by_route: Vec<AtomicU64>,
    /// By target as received (path relative to `/api/v1`, and query): the first
    /// [`MAX_TARGETS`] distinct ones. Unbounded, a flood of distinct keys grew it to
    /// millions, and each resize held the lock for hundreds of milliseconds: every
    /// server in front of the simulator saw the stall as its own p99.
    pub(super) by_target: Mutex<HashMap<String, u64>>,
    /// When each API request arrived (bounded: the first [`MAX_LOGGED`]).
    pub(super) arrivals: Mutex<Vec<std::time::Instant>>,
}

/// Most request arrival times kept for tests that check a rate.
pub(super) const MAX_LOGGED: usize = 100_000;

/// Most distinct targets counted one by one ([`Stats::by_target`]); later new
/// targets are counted only in the totals.
pub(super) const MAX_TARGETS: usize = 100_000;

/// Most raw request URIs kept by the recorder (the latest ones).
pub const MAX_RAW: usize = 1_000;

/// Every request received, recorded before the simulator checks anything (token,
/// route, method, parameters), so a test can tell that a request never reached the
/// upstream at all rather than that the upstream refused it.
#[derive(Debug, Default)]
pub(super) struct RawLog {
    /// All requests received since start (or the last clear).
    pub(super) count: AtomicU64,
    /// The raw URIs (path and query as received) of the latest [`MAX_RAW`].
    pub(super) uris: Mutex<VecDeque<String>>,
    /// The headers of the latest request.
    pub(super) last_headers: Mutex<Option<http::HeaderMap>>,
}

impl RawLog {
    pub(super) fn record(&self, uri: &http::Uri, headers: &http::HeaderMap) {
        *self
            .last_headers
            .lock()
            .expect("raw log lock is never poisoned") = Some(headers.clone());
        let mut uris = self.uris.lock().expect("raw log lock is never poisoned");
        if uris.len() == MAX_RAW {
            uris.pop_front();
        }
        uris.push_back(uri.to_string());
        // Counted under the lock so that count and list agree after a clear.
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

pub(super) struct Shared {
    pub(super) token: String,
    pub(super) faults: Faults,
    pub(super) stats: Stats,
    pub(super) raw: RawLog,
    pub(super) stream_interval: Duration,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) stop: CancellationToken,
}
