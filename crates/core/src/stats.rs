//! Every counter mdproxy keeps, in one structure that lives as long as the process:
//! a reload never touches it, so no Prometheus counter goes backwards. Plain atomics
//! indexed by endpoint and by enum (no labels to hash, no lock on a hit); the ones
//! every request adds to are sharded by thread, so two cores answering the same
//! endpoint do not pass a cache line back and forth. `ops::metrics` exposes them,
//! `ops::admin` reads them for `/status` and `/readyz`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use mdproxy_api::catalog::catalog;
use mdproxy_api::error::Error;

/// The `X-Cache` values belong to the contract (`api`); counted here.
pub use mdproxy_api::CacheStatus;

/// What became of one upstream request (or of the wish to make one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamOutcome {
    /// A 2xx `"success": true` answer.
    Ok,
    /// A 404, cached briefly as a negative answer.
    NotFound,
    /// No answer within the timeout.
    Timeout,
    /// Connection refused, reset, DNS failure.
    Unreachable,
    /// 5xx, a 3xx (never followed), or 429 aimed at the proxy's own rate.
    Failed,
    /// 401 or 403: the upstream refused the proxy's own token.
    TokenRefused,
    /// A 2xx whose body is not the envelope.
    InvalidBody,
    /// An answer larger than `upstream.max_body_bytes` (not read past the limit).
    TooLarge,
    /// A 200 with `"success": false`: the upstream reports its own failure (its
    /// source timed out, "socket hang up"). Never cached; stale-if-error applies.
    Reported,
    /// An answer relayed to the client as it is (a 4xx other than 404).
    Answer,
    /// Not asked: the circuit breaker was open.
    CircuitOpen,
    /// A client waited `limits.client_wait_ms` and the budget stayed short.
    Overloaded,
    /// Background work found no budget and was dropped.
    Dropped,
    /// `429` or `503`: the upstream throttles us (it pauses the upstream).
    Throttled,
    /// Not asked: the upstream's `Retry-After` pause runs.
    Paused,
    /// Not asked: a vendor quota is spent (or background work kept the reserve).
    OverQuota,
    /// A 2xx whose body was cut short (no length, the connection closed early).
    Truncated,
}

impl UpstreamOutcome {
    /// Every outcome, in counter order.
    pub const ALL: [UpstreamOutcome; 17] = [
        UpstreamOutcome::Ok,
        UpstreamOutcome::NotFound,
        UpstreamOutcome::Timeout,
        UpstreamOutcome::Unreachable,
        UpstreamOutcome::Failed,
        UpstreamOutcome::TokenRefused,
        UpstreamOutcome::InvalidBody,
        UpstreamOutcome::TooLarge,
        UpstreamOutcome::Reported,
        UpstreamOutcome::Answer,
        UpstreamOutcome::CircuitOpen,
        UpstreamOutcome::Overloaded,
        UpstreamOutcome::Dropped,
        UpstreamOutcome::Throttled,
        UpstreamOutcome::Paused,
        UpstreamOutcome::OverQuota,
        UpstreamOutcome::Truncated,
    ];

    /// Stable label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamOutcome::Ok => "ok",
            UpstreamOutcome::NotFound => "not_found",
            UpstreamOutcome::Timeout => "timeout",
            UpstreamOutcome::Unreachable => "unreachable",
            UpstreamOutcome::Failed => "failed",
            UpstreamOutcome::TokenRefused => "token_refused",
            UpstreamOutcome::InvalidBody => "invalid_body",
            UpstreamOutcome::TooLarge => "too_large",
            UpstreamOutcome::Reported => "reported_failure",
            UpstreamOutcome::Answer => "answer",
            UpstreamOutcome::CircuitOpen => "circuit_open",
            UpstreamOutcome::Overloaded => "overloaded",
            UpstreamOutcome::Dropped => "dropped",
            UpstreamOutcome::Throttled => "throttled",
            UpstreamOutcome::Paused => "paused",
            UpstreamOutcome::OverQuota => "over_quota",
            UpstreamOutcome::Truncated => "truncated",
        }
    }
}

/// Upper bounds of the latency histograms' buckets, in seconds (Prometheus `le`);
/// from a cache hit (tens of µs) to an upstream at its timeout (seconds; a K-line's
/// is 90).
pub const LATENCY_BUCKETS: [f64; 18] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 90.0,
];

/// Bucket bounds in microseconds, for [`Histogram::observe`].
const BUCKET_MICROS: [u64; 18] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 90_000_000,
];

/// Shards of the counters every request adds to.
const SHARDS: usize = 4;

/// The shard of the calling thread: threads take them in turn as they first count.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

/// One shard's value, alone on its cache lines (two, for the adjacent-line
/// prefetcher).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// A latency histogram of plain atomics (one add per observation for its bucket and
/// one for the sum, in the thread's shard; the count is the buckets' sum, added up
/// when read; no lock on the hit path). Buckets are kept per bucket, not
/// cumulative, as prometheus-client's encoder takes them.
#[derive(Debug, Default)]
pub struct Histogram {
    shards: [Padded<HistogramShard>; SHARDS],
}

#[derive(Debug, Default)]
struct HistogramShard {
    /// `buckets[i]`: observations in `(bound[i-1], bound[i]]`; the last one is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Counts one observation of `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKET_MICROS.partition_point(|&bound| bound < micros);
        let shard = &self.shards[shard()].0;
        shard.buckets[i].fetch_add(1, Ordering::Relaxed);
        shard.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.totals().iter().sum()
    }

    /// Sum of the observations, in seconds.
    pub fn sum_secs(&self) -> f64 {
        let micros: u64 = self
            .shards
            .iter()
            .map(|s| s.0.sum_micros.load(Ordering::Relaxed))
            .sum();
        micros as f64 / 1e6
    }

    /// `(upper bound, observations in this bucket)`, the last bound +Inf.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        LATENCY_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.totals())
            .collect()
    }

    /// Adds `other`'s observations to this snapshot (for totals over endpoints).
    pub fn merge_into(&self, totals: &mut [u64; LATENCY_BUCKETS.len() + 1]) {
        for (t, n) in totals.iter_mut().zip(self.totals()) {
            *t += n;
        }
    }

    /// Observations per bucket, over the shards.
    fn totals(&self) -> [u64; LATENCY_BUCKETS.len() + 1] {
        let mut totals = [0; LATENCY_BUCKETS.len() + 1];
        for shard in &self.shards {
            for (t, n) in totals.iter_mut().zip(&shard.0.buckets) {
                *t += n.load(Ordering::Relaxed);
            }
        }
        totals
    }
}

/// The `q` quantile (0..1) of per-bucket counts, in seconds: the upper bound of the
/// bucket it falls in, or `None` without observations (Prometheus's
/// `histogram_quantile` without the interpolation).
pub fn quantile(buckets: &[u64; LATENCY_BUCKETS.len() + 1], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
        }
    }
    None
}

/// How a request's answer came about, for the latency histograms: an `X-Cache`
/// value, or none (an error made by the proxy, the stream, a relayed upstream answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Cache(CacheStatus),
    None,
}

impl Outcome {
    /// Every outcome, in histogram order.
    pub const ALL: [Outcome; 4] = [
        Outcome::Cache(CacheStatus::Hit),
        Outcome::Cache(CacheStatus::Miss),
        Outcome::Cache(CacheStatus::Stale),
        Outcome::None,
    ];

    fn index(self) -> usize {
        match self {
            Outcome::Cache(status) => status as usize,
            Outcome::None => 3,
        }
    }

    /// The label: `HIT`, `MISS`, `STALE` or `NONE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Cache(status) => status.as_str(),
            Outcome::None => "NONE",
        }
    }
}

/// Labels of the `code` dimension of responses: no error, an upstream answer
/// relayed as it came, then every error code of the contract.
pub fn response_codes() -> impl Iterator<Item = &'static str> {
    ["none", "upstream"].into_iter().chain(Error::CODES)
}

/// Index of a response's code in [`response_codes`].
fn code_index(code: Option<&str>) -> usize {
    match code {
        None => 0,
        Some("upstream") => 1,
        Some(code) => Error::CODES
            .iter()
            .position(|c| *c == code)
            .map_or(1, |i| i + 2),
    }
}

const CODES: usize = Error::CODES.len() + 2;

/// What the proxy last heard from the upstream (any request: client fills,
/// refreshes, prewarm, the hub's polls, the start-up probe).
#[derive(Clone, Debug, Default)]
pub struct UpstreamHealth {
    /// When an upstream request last succeeded (the upstream answered and took our token).
    pub last_ok: Option<DateTime<Utc>>,
    /// The last failure: when, and what (an outcome label and a sentence).
    pub last_error: Option<(DateTime<Utc>, &'static str, String)>,
}

/// One configuration reload attempt, for `/status`.
#[derive(Clone, Debug)]
pub struct ReloadRecord {
    pub at: DateTime<Utc>,
    pub applied: bool,
    /// The generation applied, or why the file was refused.
    pub detail: String,
}

/// Reload attempts `/status` remembers.
const RELOADS_KEPT: usize = 10;

/// Request, upstream and hub counters.
#[derive(Debug)]
pub struct Stats {
    /// `latency[endpoint id][Outcome index]`: time from the request's head to its
    /// response's head.
    latency: Vec<[Histogram; 4]>,
    /// `upstream_latency[endpoint id]`: time of upstream requests that got an answer.
    upstream_latency: Vec<Histogram>,
    /// `responses[shard].0[status class 1..=5 - 1][code index]`.
    responses: [Padded<[[AtomicU64; CODES]; 5]>; SHARDS],
    /// `last_asked[endpoint id]`: when a client last asked, in seconds since `epoch`
    /// (0: never). Demand-driven prewarm jobs read it.
    last_asked: Vec<AtomicU64>,
    epoch: Instant,
    /// When the process started, for `/status`'s uptime.
    pub started: DateTime<Utc>,
    /// Upstream requests by outcome, indexed by `UpstreamOutcome as usize`.
    upstream: [AtomicU64; UpstreamOutcome::ALL.len()],
    health: Mutex<UpstreamHealth>,
    /// Whether an upstream request ever succeeded: `/readyz` waits for it (or for
    /// warm entries).
    upstream_seen: AtomicBool,
    reloads: Mutex<VecDeque<ReloadRecord>>,
    /// Responses with a 5xx status made by mdproxy.
    pub errors: AtomicU64,
    /// Stale-while-revalidate refreshes started.
    pub refreshes: AtomicU64,
    /// Background refreshes and prewarms dropped for want of upstream budget.
    pub budget_dropped: AtomicU64,
    /// Upstream quote poll requests made by the hub.
    pub hub_polls: AtomicU64,
    /// Stream subscribers disconnected for stalling.
    pub hub_stalled: AtomicU64,
    /// Configuration reloads applied.
    pub reloads_applied: AtomicU64,
    /// Configuration reloads refused (invalid file).
    pub reloads_refused: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        let endpoints = catalog().with_passthrough().count();
        Stats {
            latency: (0..endpoints).map(|_| Default::default()).collect(),
            upstream_latency: (0..endpoints).map(|_| Histogram::default()).collect(),
            responses: Default::default(),
            last_asked: (0..endpoints).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
            started: Utc::now(),
            upstream: Default::default(),
            health: Mutex::default(),
            upstream_seen: AtomicBool::new(false),
            reloads: Mutex::default(),
            errors: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            budget_dropped: AtomicU64::new(0),
            hub_polls: AtomicU64::new(0),
            hub_stalled: AtomicU64::new(0),
            reloads_applied: AtomicU64::new(0),
            reloads_refused: AtomicU64::new(0),
        }
    }
}

impl Stats {
    /// Whether a client asked for `endpoint_id` within `window`.
    pub fn asked_within(&self, endpoint_id: usize, window: Duration) -> bool {
        let last = self.last_asked[endpoint_id].load(Ordering::Relaxed);
        last > 0 && self.epoch.elapsed().as_secs() + 1 - last <= window.as_secs()
    }

    /// Answers of `endpoint_id` served as `status` so far.
    pub fn served_count(&self, endpoint_id: usize, status: CacheStatus) -> u64 {
        self.latency[endpoint_id][Outcome::Cache(status).index()].count()
    }

    /// Counts one response: its status, its error code (`None`: not an error;
    /// `"upstream"`: the upstream's answer relayed) and, for a request routed to an
    /// endpoint, its latency by outcome. An answer from the cache (`outcome`
    /// [`Outcome::Cache`]) also marks its endpoint as asked for at `started`, the
    /// request's arrival.
    pub fn responded(
        &self,
        status: u16,
        code: Option<&str>,
        endpoint_id: Option<usize>,
        outcome: Outcome,
        started: Instant,
        elapsed: Duration,
    ) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[shard()].0[class][code_index(code)].fetch_add(1, Ordering::Relaxed);
        let Some(id) = endpoint_id else { return };
        self.latency[id][outcome.index()].observe(elapsed);
        if let Outcome::Cache(_) = outcome {
            // +1 so that "asked in the first second" differs from "never asked".
            let now = started.saturating_duration_since(self.epoch).as_secs() + 1;
            if self.last_asked[id].load(Ordering::Relaxed) != now {
                self.last_asked[id].store(now, Ordering::Relaxed);
            }
        }
    }

    /// Responses of status class `class` (1..=5) with `code` (a [`response_codes`] label).
    pub fn responses_count(&self, class: u16, code: &str) -> u64 {
        let c = if code == "none" { None } else { Some(code) };
        let (class, code) = (usize::from(class.clamp(1, 5)) - 1, code_index(c));
        self.responses
            .iter()
            .map(|shard| shard.0[class][code].load(Ordering::Relaxed))
            .sum()
    }

    /// The latency histogram of `endpoint_id` for `outcome`.
    pub fn latency(&self, endpoint_id: usize, outcome: Outcome) -> &Histogram {
        &self.latency[endpoint_id][outcome.index()]
    }

    /// The upstream latency histogram of `endpoint_id`.
    pub fn upstream_latency(&self, endpoint_id: usize) -> &Histogram {
        &self.upstream_latency[endpoint_id]
    }

    /// Counts one upstream outcome.
    pub fn upstream(&self, outcome: UpstreamOutcome) {
        self.upstream[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records an upstream request that reached the upstream: its latency, and
    /// whether it succeeded (`error`: the outcome's label and what happened).
    pub fn upstream_answered(
        &self,
        endpoint_id: usize,
        elapsed: Duration,
        error: Option<(&'static str, String)>,
    ) {
        self.upstream_latency[endpoint_id].observe(elapsed);
        let mut health = self.health.lock().expect("health lock is never poisoned");
        match error {
            None => {
                health.last_ok = Some(Utc::now());
                self.upstream_seen.store(true, Ordering::Relaxed);
            }
            Some((label, detail)) => health.last_error = Some((Utc::now(), label, detail)),
        }
    }

    /// Records an upstream request that got no answer (timeout, unreachable).
    pub fn upstream_unanswered(&self, label: &'static str, detail: String) {
        let mut health = self.health.lock().expect("health lock is never poisoned");
        health.last_error = Some((Utc::now(), label, detail));
    }

    /// What the proxy last heard from the upstream.
    pub fn upstream_health(&self) -> UpstreamHealth {
        self.health
            .lock()
            .expect("health lock is never poisoned")
            .clone()
    }

    /// Whether an upstream request ever succeeded.
    pub fn upstream_seen(&self) -> bool {
        self.upstream_seen.load(Ordering::Relaxed)
    }

    /// Upstream requests with `outcome` so far.
    pub fn upstream_count(&self, outcome: UpstreamOutcome) -> u64 {
        self.upstream[outcome as usize].load(Ordering::Relaxed)
    }

    /// Records a reload attempt (counted, and remembered for `/status`).
    pub fn reloaded(&self, applied: bool, detail: String) {
        let counter = if applied {
            &self.reloads_applied
        } else {
            &self.reloads_refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut reloads = self.reloads.lock().expect("reloads lock is never poisoned");
        if reloads.len() == RELOADS_KEPT {
            reloads.pop_front();
        }
        reloads.push_back(ReloadRecord {
            at: Utc::now(),
            applied,
            detail,
        });
    }

    /// The last reload attempts, newest last.
    pub fn reloads(&self) -> Vec<ReloadRecord> {
        let reloads = self.reloads.lock().expect("reloads lock is never poisoned");
        reloads.iter().cloned().collect()
    }

    /// Reads one of the plain counters.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_is_remembered_per_endpoint() {
        let stats = Stats::default();
        let window = Duration::from_secs(300);
        assert!(!stats.asked_within(3, window));
        let hit = Outcome::Cache(CacheStatus::Hit);
        let (now, took) = (Instant::now(), Duration::from_micros(300));
        stats.responded(200, None, Some(3), hit, now, took);
        assert!(stats.asked_within(3, window));
        assert!(!stats.asked_within(4, window));
        assert_eq!(stats.served_count(3, CacheStatus::Hit), 1);
        assert_eq!(stats.served_count(3, CacheStatus::Miss), 0);
    }

    #[test]
    fn every_outcome_has_its_own_counter() {
        let stats = Stats::default();
        for (i, outcome) in UpstreamOutcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, i, "ALL is in discriminant order");
            stats.upstream(outcome);
        }
        for outcome in UpstreamOutcome::ALL {
            assert_eq!(stats.upstream_count(outcome), 1, "{}", outcome.as_str());
        }
    }

    #[test]
    fn counts_from_every_thread_add_up() {
        let stats = Stats::default();
        let h = Histogram::default();
        // More threads than shards, so some share one.
        std::thread::scope(|scope| {
            for _ in 0..SHARDS * 2 + 1 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        h.observe(Duration::from_micros(300));
                        stats.responded(
                            200,
                            None,
                            Some(0),
                            Outcome::None,
                            Instant::now(),
                            Duration::ZERO,
                        );
                    }
                });
            }
        });
        let n = (SHARDS as u64 * 2 + 1) * 100;
        assert_eq!(h.count(), n);
        assert!((h.sum_secs() - n as f64 * 0.000_3).abs() < 1e-9);
        assert_eq!(h.buckets()[2], (0.000_5, n));
        assert_eq!(stats.responses_count(2, "none"), n);
        assert_eq!(stats.latency(0, Outcome::None).count(), n);
    }

    #[test]
    fn histograms_bucket_and_estimate_quantiles() {
        let h = Histogram::default();
        for micros in [50, 100, 101, 3_000, 200_000_000] {
            h.observe(Duration::from_micros(micros));
        }
        assert_eq!(h.count(), 5);
        let buckets = h.buckets();
        assert_eq!(buckets[0], (0.000_1, 2), "100 µs is ≤ the first bound");
        assert_eq!(buckets[1], (0.000_25, 1));
        assert_eq!(*buckets.last().unwrap(), (f64::INFINITY, 1), "200 s");
        let mut totals = [0; LATENCY_BUCKETS.len() + 1];
        h.merge_into(&mut totals);
        assert_eq!(quantile(&totals, 0.5), Some(0.000_25));
        assert_eq!(quantile(&totals, 1.0), Some(f64::INFINITY));
        assert_eq!(quantile(&[0; LATENCY_BUCKETS.len() + 1], 0.5), None);
    }

    #[test]
    fn responses_count_by_class_and_code() {
        let stats = Stats::default();
        let (t, d) = (Instant::now(), Duration::from_millis(1));
        stats.responded(200, None, Some(0), Outcome::Cache(CacheStatus::Hit), t, d);
        stats.responded(401, Some("unauthorized"), None, Outcome::None, t, d);
        stats.responded(404, Some("upstream"), Some(0), Outcome::None, t, d);
        assert_eq!(stats.responses_count(2, "none"), 1);
        assert_eq!(stats.responses_count(4, "unauthorized"), 1);
        assert_eq!(stats.responses_count(4, "upstream"), 1);
        assert_eq!(
            stats.latency(0, Outcome::Cache(CacheStatus::Hit)).count(),
            1
        );
        assert_eq!(stats.latency(0, Outcome::None).count(), 1);
        assert!(response_codes().any(|c| c == "rate_limited"));
    }

    #[test]
    fn reloads_are_remembered_newest_last_and_bounded() {
        let stats = Stats::default();
        for i in 0..15 {
            stats.reloaded(i % 2 == 0, format!("attempt {i}"));
        }
        let kept = stats.reloads();
        assert_eq!(kept.len(), RELOADS_KEPT);
        assert_eq!(kept.last().unwrap().detail, "attempt 14");
        assert_eq!(Stats::get(&stats.reloads_applied), 8);
        assert_eq!(Stats::get(&stats.reloads_refused), 7);
    }
}
