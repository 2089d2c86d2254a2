//! Freshness decisions: the TTL table per endpoint and class, the clock, and the pure
//! function that says whether a cached answer is fresh, stale or expired. The cache
//! stores `fetched_at`; this module decides; moka's expiry is only the memory bound.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::catalog::{FreshnessClass, catalog};
use crate::config::{Config, Ttl};

/// The state of a cached answer at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Serve it; it stays fresh for `remaining`.
    Fresh { remaining: Duration },
    /// Past its fresh TTL but inside its stale window: usable when the upstream fails.
    Stale,
    /// Past the stale window: never served.
    Expired,
}

impl Freshness {
    /// Stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Fresh { .. } => "fresh",
            Freshness::Stale => "stale",
            Freshness::Expired => "expired",
        }
    }
}

/// Decides the freshness of an answer of age `age` under `ttl`.
pub fn decide(ttl: Ttl, age: Duration) -> Freshness {
    let fresh = Duration::from_secs(ttl.fresh_secs);
    if age < fresh {
        Freshness::Fresh {
            remaining: fresh - age,
        }
    } else if age < fresh + Duration::from_secs(ttl.stale_secs) {
        Freshness::Stale
    } else {
        Freshness::Expired
    }
}

/// The TTL table resolved for every endpoint and class, so a request finds its TTL
/// by index instead of by string lookups.
#[derive(Clone, Debug)]
pub struct Policy {
    /// `table[endpoint.id][class index]`.
    table: Vec<[Ttl; FreshnessClass::ALL.len()]>,
}

impl Policy {
    /// Resolves `config`'s classes and per-endpoint overrides.
    pub fn new(config: &Config) -> Policy {
        let table = catalog()
            .endpoints()
            .iter()
            .map(|e| FreshnessClass::ALL.map(|class| config.ttl(&e.path, class)))
            .collect();
        Policy { table }
    }

    /// The TTL of a request for endpoint `endpoint_id` whose answer is of `class`.
    pub fn ttl(&self, endpoint_id: usize, class: FreshnessClass) -> Ttl {
        self.table[endpoint_id][class as usize]
    }
}

/// A source of "now". Tests use [`ManualClock`] so that no test sleeps real minutes.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: Mutex::new(start),
        })
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().expect("clock lock is never poisoned");
        *now += chrono::Duration::from_std(by).expect("test durations are small");
    }

    /// Sets the clock.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().expect("clock lock is never poisoned") = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().expect("clock lock is never poisoned")
    }
}

/// Age of an answer fetched at `fetched_at`, never negative.
pub fn age(now: DateTime<Utc>, fetched_at: DateTime<Utc>) -> Duration {
    (now - fetched_at).to_std().unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_then_stale_then_expired() {
        let ttl = Ttl {
            fresh_secs: 10,
            stale_secs: 20,
        };
        assert_eq!(
            decide(ttl, Duration::from_secs(3)),
            Freshness::Fresh {
                remaining: Duration::from_secs(7)
            }
        );
        assert_eq!(decide(ttl, Duration::from_secs(10)), Freshness::Stale);
        assert_eq!(decide(ttl, Duration::from_secs(29)), Freshness::Stale);
        assert_eq!(decide(ttl, Duration::from_secs(30)), Freshness::Expired);
    }

    #[test]
    fn policy_applies_endpoint_overrides() {
        let mut config = Config::default();
        config.freshness.endpoints.insert(
            "/market/indices".into(),
            Ttl {
                fresh_secs: 1,
                stale_secs: 1,
            },
        );
        let policy = Policy::new(&config);
        let indices = catalog().by_path("/market/indices").unwrap();
        let list = catalog().by_path("/stock/list").unwrap();
        assert_eq!(policy.ttl(indices.id, FreshnessClass::Live).fresh_secs, 1);
        assert_eq!(policy.ttl(list.id, FreshnessClass::Live).fresh_secs, 3);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = DateTime::parse_from_rfc3339("2026-03-02T01:30:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let clock = ManualClock::new(start);
        clock.advance(Duration::from_secs(90));
        assert_eq!(age(clock.now(), start), Duration::from_secs(90));
        assert_eq!(age(start, clock.now()), Duration::ZERO);
    }
}
