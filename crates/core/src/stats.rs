//! What the edge counts of every request, in one structure that lives as long as
//! the process (a reload never touches it, so no Prometheus counter goes
//! backwards): latency by endpoint and cache outcome, responses by status class and
//! error code, the 5xx answers mdproxy made. Plain atomics indexed by endpoint and
//! by enum (no labels to hash, no lock on a hit), sharded by thread. Also the
//! primitives every subsystem counts with ([`histogram`]) and writes its metrics
//! with ([`expose`]).

pub mod expose;
pub mod histogram;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::{Registry, Unit};

use histogram::{Histogram, Padded, SHARDS, shard};
use mdproxy_api::catalog::catalog;
use mdproxy_api::error::Error;

/// The `X-Cache` values belong to the contract (`mdproxy-api`); counted here.
pub use mdproxy_api::CacheStatus;

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

/// The counters of every request the edge answered.
#[derive(Debug)]
pub struct Requests {
    /// `latency[endpoint id][Outcome index]`: time from the request's head to its
    /// response's head.
    latency: Vec<[Histogram; 4]>,
    /// `responses[shard].0[status class 1..=5 - 1][code index]`.
    responses: [Padded<[[AtomicU64; CODES]; 5]>; SHARDS],
    /// Responses with a 5xx status made by mdproxy.
    errors: AtomicU64,
}

impl Default for Requests {
    fn default() -> Self {
        let endpoints = catalog().with_passthrough().count();
        Requests {
            latency: (0..endpoints).map(|_| Default::default()).collect(),
            responses: Default::default(),
            errors: AtomicU64::new(0),
        }
    }
}

impl Requests {
    /// Counts one response: its status, its error code (`None`: not an error;
    /// `"upstream"`: the upstream's answer relayed) and, for a request routed to an
    /// endpoint, its latency by outcome.
    pub fn responded(
        &self,
        status: u16,
        code: Option<&str>,
        endpoint_id: Option<usize>,
        outcome: Outcome,
        elapsed: Duration,
    ) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[shard()].0[class][code_index(code)].fetch_add(1, Ordering::Relaxed);
        if let Some(id) = endpoint_id {
            self.latency[id][outcome.index()].observe(elapsed);
        }
    }

    /// Counts a 5xx answer mdproxy made itself.
    pub fn errored(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// 5xx answers mdproxy made itself so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Answers of `endpoint_id` served as `status` so far.
    pub fn served_count(&self, endpoint_id: usize, status: CacheStatus) -> u64 {
        self.latency[endpoint_id][Outcome::Cache(status).index()].count()
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

    /// Registers the request metrics (`request_duration`, `http_responses`,
    /// `responses`, `errors`) in `registry`, read from `requests` at scrape time.
    pub fn register_metrics(requests: &std::sync::Arc<Requests>, registry: &mut Registry) {
        registry.register_collector(Box::new(RequestMetrics(std::sync::Arc::clone(requests))));
    }
}

#[derive(Debug)]
struct RequestMetrics(std::sync::Arc<Requests>);

impl Collector for RequestMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let requests = &self.0;
        let endpoints: Vec<_> = catalog().with_passthrough().collect();
        let mut family = encoder.encode_descriptor(
            "request_duration",
            "Time from a request's head to its response's head, by endpoint and cache outcome (NONE: an error, the stream or a relayed upstream answer)",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for e in &endpoints {
            for outcome in Outcome::ALL {
                let h = requests.latency(e.id, outcome);
                if h.count() > 0 {
                    let labels = [("endpoint", e.path.as_str()), ("cache", outcome.as_str())];
                    expose::histogram(&mut family, &labels, h)?;
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "http_responses",
            "Responses by status class and error code (none: not an error; upstream: the upstream's own answer relayed)",
            None,
            MetricType::Counter,
        )?;
        for class in 1..=5u16 {
            for code in response_codes() {
                let n = requests.responses_count(class, code);
                if n > 0 || (class == 2 && code == "none") {
                    let class = format!("{class}xx");
                    let labels = [("status_class", class.as_str()), ("code", code)];
                    ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "responses",
            "Answers served from the cache path, by endpoint and X-Cache",
            None,
            MetricType::Counter,
        )?;
        for e in &endpoints {
            for status in CacheStatus::ALL {
                let n = requests.served_count(e.id, status);
                if n > 0 {
                    let labels = [
                        ("endpoint", e.path.as_str()),
                        ("cache_status", status.as_str()),
                    ];
                    ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        let help = "Responses with a 5xx status made by mdproxy";
        expose::counter(&mut encoder, "errors", help, requests.errors())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_every_thread_add_up() {
        let requests = Requests::default();
        std::thread::scope(|scope| {
            for _ in 0..SHARDS * 2 + 1 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        requests.responded(200, None, Some(0), Outcome::None, Duration::ZERO);
                    }
                });
            }
        });
        let n = (SHARDS as u64 * 2 + 1) * 100;
        assert_eq!(requests.responses_count(2, "none"), n);
        assert_eq!(requests.latency(0, Outcome::None).count(), n);
    }

    #[test]
    fn responses_count_by_class_and_code() {
        let requests = Requests::default();
        let d = Duration::from_millis(1);
        requests.responded(200, None, Some(0), Outcome::Cache(CacheStatus::Hit), d);
        requests.responded(401, Some("unauthorized"), None, Outcome::None, d);
        requests.responded(404, Some("upstream"), Some(0), Outcome::None, d);
        assert_eq!(requests.responses_count(2, "none"), 1);
        assert_eq!(requests.responses_count(4, "unauthorized"), 1);
        assert_eq!(requests.responses_count(4, "upstream"), 1);
        assert_eq!(requests.served_count(0, CacheStatus::Hit), 1);
        assert_eq!(requests.served_count(0, CacheStatus::Miss), 0);
        assert_eq!(requests.latency(0, Outcome::None).count(), 1);
        assert!(response_codes().any(|c| c == "rate_limited"));
    }
}
