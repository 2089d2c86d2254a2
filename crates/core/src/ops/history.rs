//! The last minutes of traffic, for the status page: a background task reads the
//! request counters every few seconds into a ring buffer (request rate and hit ratio
//! over time, and each endpoint's rate over the last minute). Nothing here runs on
//! the request path; the counters are the plain atomics the request counters keep anyway.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::state::AppState;
use crate::stats::{CacheStatus, Outcome, Requests};
use mdproxy_api::catalog::catalog;

/// How often the counters are read: fine enough for a chart of minutes, coarse
/// enough that the sampler costs nothing (a few hundred atomic loads).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// How much history the charts show.
pub const KEPT: Duration = Duration::from_secs(15 * 60);

/// The window of each endpoint's request rate: long enough to smooth a burst,
/// short enough to show what happens now.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Traffic over one sampling interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// When the interval ended (wall clock).
    pub at: DateTime<Utc>,
    /// The interval's length, in seconds.
    pub secs: f64,
    /// Responses to requests routed to an endpoint (errors included).
    pub requests: u64,
    /// Answers served from the cache, fresh.
    pub hits: u64,
    /// Answers served from the cache, stale.
    pub stale: u64,
    /// Answers fetched from the upstream.
    pub misses: u64,
}

impl Sample {
    /// Requests per second over the interval.
    pub fn rps(&self) -> f64 {
        if self.secs > 0.0 {
            self.requests as f64 / self.secs
        } else {
            0.0
        }
    }

    /// Answers from the cache (fresh or stale) per answer served, `None` without
    /// answers (the same ratio as each endpoint's `hit_ratio`).
    pub fn hit_ratio(&self) -> Option<f64> {
        let served = self.hits + self.stale + self.misses;
        (served > 0).then(|| (self.hits + self.stale) as f64 / served as f64)
    }
}

/// The counters at one instant.
#[derive(Clone, Debug)]
struct Counts {
    at: Instant,
    /// Responses per endpoint id.
    requests: Vec<u64>,
    hits: u64,
    stale: u64,
    misses: u64,
}

impl Counts {
    fn read(stats: &Requests) -> Counts {
        let mut counts = Counts {
            at: Instant::now(),
            requests: vec![0; catalog().with_passthrough().count()],
            hits: 0,
            stale: 0,
            misses: 0,
        };
        for e in catalog().with_passthrough() {
            counts.hits += stats.served_count(e.id, CacheStatus::Hit);
            counts.stale += stats.served_count(e.id, CacheStatus::Stale);
            counts.misses += stats.served_count(e.id, CacheStatus::Miss);
            counts.requests[e.id] = Outcome::ALL
                .iter()
                .map(|o| stats.latency(e.id, *o).count())
                .sum();
        }
        counts
    }
}

#[derive(Debug)]
struct Ring {
    /// The charts' samples, oldest first.
    samples: VecDeque<Sample>,
    /// The counters at the last readings, oldest first, covering [`RATE_WINDOW`].
    recent: VecDeque<Counts>,
    samples_kept: usize,
    recent_kept: usize,
}

impl Ring {
    fn new(every: Duration) -> Ring {
        let per = |span: Duration| (span.as_secs_f64() / every.as_secs_f64()).ceil() as usize;
        Ring {
            samples: VecDeque::new(),
            recent: VecDeque::new(),
            samples_kept: per(KEPT).max(1),
            recent_kept: per(RATE_WINDOW).max(1) + 1,
        }
    }

    /// Adds a reading taken at `at`: a sample of the interval since the last one.
    fn push(&mut self, counts: Counts, at: DateTime<Utc>) {
        if let Some(last) = self.recent.back() {
            let total = |c: &Counts| c.requests.iter().sum::<u64>();
            if self.samples.len() == self.samples_kept {
                self.samples.pop_front();
            }
            self.samples.push_back(Sample {
                at,
                secs: counts.at.duration_since(last.at).as_secs_f64(),
                requests: total(&counts).saturating_sub(total(last)),
                hits: counts.hits.saturating_sub(last.hits),
                stale: counts.stale.saturating_sub(last.stale),
                misses: counts.misses.saturating_sub(last.misses),
            });
        }
        if self.recent.len() == self.recent_kept {
            self.recent.pop_front();
        }
        self.recent.push_back(counts);
    }

    /// Requests per second of each endpoint between the oldest and the newest
    /// reading (up to [`RATE_WINDOW`]); `None` before the second reading.
    fn rates(&self) -> Option<Vec<f64>> {
        let (first, last) = (self.recent.front()?, self.recent.back()?);
        let secs = last.at.duration_since(first.at).as_secs_f64();
        (secs > 0.0).then(|| {
            last.requests
                .iter()
                .zip(&first.requests)
                .map(|(l, f)| l.saturating_sub(*f) as f64 / secs)
                .collect()
        })
    }
}

/// The sampled history; cheap to clone.
#[derive(Clone, Debug)]
pub struct History {
    ring: Arc<Mutex<Ring>>,
    every: Duration,
}

impl History {
    /// Starts sampling `state`'s counters every [`SAMPLE_EVERY`], on the state's task
    /// tracker, until its shutdown token is cancelled.
    pub fn start(state: &AppState) -> History {
        History::start_every(state, SAMPLE_EVERY)
    }

    /// [`History::start`] with another period.
    pub fn start_every(state: &AppState, every: Duration) -> History {
        // The baseline now, so that the first sample counts every request since the
        // start, however late the task first runs.
        let mut ring = Ring::new(every);
        ring.push(Counts::read(state.requests()), Utc::now());
        let history = History {
            ring: Arc::new(Mutex::new(ring)),
            every,
        };
        let (ring, stats, stop) = (
            Arc::clone(&history.ring),
            Arc::clone(state.requests()),
            state.stop().clone(),
        );
        state.tracker().spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let counts = Counts::read(&stats);
                        ring.lock().expect("history lock is never poisoned").push(counts, Utc::now());
                    }
                    () = stop.cancelled() => return,
                }
            }
        });
        history
    }

    /// The sampling period.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        let ring = self.ring.lock().expect("history lock is never poisoned");
        ring.samples.iter().copied().collect()
    }

    /// Requests per second of each endpoint (indexed by endpoint id) over the last
    /// minute, or since sampling started when that is shorter; `None` until two
    /// readings were taken.
    pub fn rates(&self) -> Option<Vec<f64>> {
        self.ring
            .lock()
            .expect("history lock is never poisoned")
            .rates()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(at: Instant, requests: Vec<u64>, hits: u64, stale: u64, misses: u64) -> Counts {
        Counts {
            at,
            requests,
            hits,
            stale,
            misses,
        }
    }

    #[test]
    fn samples_are_differences_between_readings() {
        let mut ring = Ring::new(Duration::from_secs(5));
        let t0 = Instant::now();
        let now = Utc::now();
        ring.push(counts(t0, vec![0, 0], 0, 0, 0), now);
        assert!(ring.samples.is_empty(), "the first reading is the baseline");
        assert_eq!(ring.rates(), None);
        ring.push(
            counts(t0 + Duration::from_secs(5), vec![10, 5], 9, 1, 5),
            now,
        );
        let s = ring.samples[0];
        assert_eq!((s.requests, s.hits, s.stale, s.misses), (15, 9, 1, 5));
        assert!((s.rps() - 3.0).abs() < 1e-9);
        assert_eq!(s.hit_ratio(), Some(10.0 / 15.0));
        assert_eq!(ring.rates(), Some(vec![2.0, 1.0]));
        ring.push(
            counts(t0 + Duration::from_secs(10), vec![10, 5], 9, 1, 5),
            now,
        );
        assert_eq!(ring.samples[1].hit_ratio(), None, "no answers, no ratio");
        assert_eq!(ring.samples[1].rps(), 0.0);
        assert_eq!(ring.rates(), Some(vec![1.0, 0.5]));
    }

    #[test]
    fn the_ring_keeps_fifteen_minutes_and_rates_one() {
        let mut ring = Ring::new(Duration::from_secs(5));
        let t0 = Instant::now();
        for i in 0..1_000u64 {
            ring.push(
                counts(t0 + Duration::from_secs(5 * i), vec![i * i], 0, 0, 0),
                Utc::now(),
            );
        }
        assert_eq!(ring.samples.len(), 180, "15 min of 5 s");
        assert_eq!(
            ring.recent.len(),
            13,
            "one minute of readings and its start"
        );
        // Over the last minute: (999² - 987²) / 60.
        let expected = (999.0f64 * 999.0 - 987.0 * 987.0) / 60.0;
        assert!((ring.rates().unwrap()[0] - expected).abs() < 1e-6);
    }
}
