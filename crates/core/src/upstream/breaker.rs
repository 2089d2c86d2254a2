//! The circuit breaker in front of the upstream: after consecutive failures it opens
//! for a short interval that doubles with each reopening (up to a ceiling); while it
//! is open requests fail at once, so stale answers are served in microseconds instead
//! of after a full upstream timeout. When the interval is over exactly one probe
//! request goes through; its success closes the breaker, its failure reopens it.

use std::sync::Mutex;
use std::time::Duration;

use governor::clock::Clock;

use crate::upstream::budget::RateClock;

/// The breaker's settings (`[upstream] breaker_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failures that open it (0: never opens).
    pub failures: u32,
    /// First open interval.
    pub open: Duration,
    /// Longest open interval.
    pub max_open: Duration,
}

/// Why a request may not go upstream now: the breaker is open for `remaining`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open {
    pub remaining: Duration,
}

/// What an admitted request's outcome says about the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It answered (success, an answer such as 404, or its own reported failure).
    Up,
    /// It failed itself: timeout, unreachable, 5xx, a body that is not the envelope.
    Down,
    /// Nothing learnt (the budget refused before the upstream was asked).
    Unknown,
}

/// What a request admitted through the breaker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// The breaker is closed.
    Normal,
    /// The one request that tests a breaker whose interval is over.
    Probe,
}

#[derive(Debug, Default)]
struct State {
    consecutive: u32,
    /// Nanoseconds on the rate clock until which it is open; 0 when closed.
    open_until: u64,
    /// How many times it opened in a row without a success (the interval doubles).
    reopened: u32,
    probing: bool,
}

/// One breaker for the upstream. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    clock: RateClock,
    state: Mutex<State>,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(settings: BreakerSettings, clock: RateClock) -> Breaker {
        Breaker {
            settings,
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> BreakerSettings {
        self.settings
    }

    fn now(&self) -> u64 {
        self.clock.now().as_u64()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("breaker lock is never poisoned")
    }

    /// Whether a request may go upstream now.
    ///
    /// # Errors
    /// [`Open`] while the interval runs, and after it while the probe is out.
    pub fn admit(&self) -> Result<Admitted, Open> {
        let mut state = self.lock();
        if state.open_until == 0 {
            return Ok(Admitted::Normal);
        }
        let now = self.now();
        if now < state.open_until {
            return Err(Open {
                remaining: Duration::from_nanos(state.open_until - now),
            });
        }
        if state.probing {
            return Err(Open {
                remaining: Duration::ZERO,
            });
        }
        state.probing = true;
        Ok(Admitted::Probe)
    }

    /// Records the outcome of an admitted request. Returns `Some(interval)` when
    /// this outcome opened the breaker.
    pub fn record(&self, admitted: Admitted, verdict: Verdict) -> Option<Duration> {
        let mut state = self.lock();
        if admitted == Admitted::Probe {
            state.probing = false;
        }
        match verdict {
            Verdict::Up => {
                *state = State::default();
                return None;
            }
            Verdict::Unknown => return None,
            Verdict::Down => {}
        }
        state.consecutive = state.consecutive.saturating_add(1);
        let threshold = self.settings.failures;
        let reopen = admitted == Admitted::Probe;
        if threshold == 0 || (!reopen && state.consecutive < threshold) {
            return None;
        }
        if !reopen && state.open_until != 0 {
            // Already open (a request admitted before it opened came back late).
            return None;
        }
        let doubling = 2u32.saturating_pow(state.reopened.min(16));
        let interval = self
            .settings
            .open
            .saturating_mul(doubling)
            .min(self.settings.max_open);
        state.reopened = state.reopened.saturating_add(1);
        state.open_until = self.now() + interval.as_nanos() as u64;
        Some(interval)
    }

    /// Whether it is open (or half-open) now.
    pub fn is_open(&self) -> bool {
        self.lock().open_until != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn breaker() -> (Breaker, FakeRelativeClock) {
        let fake = FakeRelativeClock::default();
        let settings = BreakerSettings {
            failures: 3,
            open: Duration::from_millis(100),
            max_open: Duration::from_millis(250),
        };
        (Breaker::new(settings, RateClock::Fake(fake.clone())), fake)
    }

    #[test]
    fn opens_after_consecutive_failures_and_one_probe_closes_it() {
        let (b, clock) = breaker();
        for _ in 0..2 {
            assert_eq!(b.record(b.admit().unwrap(), Verdict::Down), None);
        }
        // A success in between resets the count.
        b.record(b.admit().unwrap(), Verdict::Up);
        for _ in 0..2 {
            assert_eq!(b.record(b.admit().unwrap(), Verdict::Down), None);
        }
        assert_eq!(
            b.record(Admitted::Normal, Verdict::Down),
            Some(Duration::from_millis(100))
        );
        assert_eq!(b.admit().unwrap_err().remaining, Duration::from_millis(100));
        clock.advance(Duration::from_millis(100));
        let probe = b.admit().unwrap();
        assert_eq!(probe, Admitted::Probe);
        assert!(b.admit().is_err(), "one probe at a time");
        // A probe the budget refused tells nothing and frees the slot.
        assert_eq!(b.record(probe, Verdict::Unknown), None);
        let probe = b.admit().unwrap();
        // The probe fails: open again, for twice as long, then capped.
        assert_eq!(
            b.record(probe, Verdict::Down),
            Some(Duration::from_millis(200))
        );
        clock.advance(Duration::from_millis(200));
        assert_eq!(
            b.record(b.admit().unwrap(), Verdict::Down),
            Some(Duration::from_millis(250))
        );
        clock.advance(Duration::from_millis(250));
        let probe = b.admit().unwrap();
        assert_eq!(b.record(probe, Verdict::Up), None);
        assert!(!b.is_open());
        assert_eq!(b.admit(), Ok(Admitted::Normal));
    }

    #[test]
    fn zero_failures_never_opens() {
        let (mut b, _) = breaker();
        b.settings.failures = 0;
        for _ in 0..100 {
            assert_eq!(b.record(b.admit().unwrap(), Verdict::Down), None);
        }
        assert!(!b.is_open());
    }
}
