//! Keys whose fill just failed, remembered: until a backoff (doubling with every
//! failure, with jitter, up to a ceiling) has passed, requests for such a key are
//! answered at once (its stale entry, or the failure) instead of waiting on the
//! upstream again, and one background retry per key tries again when it ends.
//! The upstream-wide breaker stays for outages; this is for one key that fails.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::upstream::client::FetchError;

/// Keys remembered at most; past it expired ones are forgotten, and while it stays
/// full new failures are not remembered (they wait on the upstream as before).
const CAPACITY: usize = 10_000;

/// The backoff after a key's failures (`limits.failure_backoff_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait after the `attempts`-th failure in a row: doubled each time, capped,
    /// with up to a quarter of jitter either way so retries of many keys spread out.
    fn after(self, attempts: u32) -> Duration {
        let doubled = self
            .base
            .saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1).min(20)))
            .min(self.max);
        let jitter = 0.75 + fastrand::f64() * 0.5;
        doubled.mul_f64(jitter).min(self.max)
    }
}

#[derive(Debug)]
struct Failure {
    error: FetchError,
    attempts: u32,
    retry_at: Instant,
    /// A background retry is scheduled.
    retrying: bool,
}

/// The failing keys.
#[derive(Debug)]
pub struct Failures {
    backoff: Mutex<Backoff>,
    keys: Mutex<HashMap<String, Failure>>,
}

impl Failures {
    /// No key remembered.
    pub fn new(backoff: Backoff) -> Failures {
        Failures {
            backoff: Mutex::new(backoff),
            keys: Mutex::default(),
        }
    }

    /// Applies new backoff settings (a reload).
    pub fn set_backoff(&self, backoff: Backoff) {
        *self.backoff.lock().unwrap_or_else(|p| p.into_inner()) = backoff;
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failure>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers that `key`'s fill failed with `error`; returns how long it is held
    /// (`None`: not remembered, the backoff is off or the table full).
    pub fn record(&self, key: &str, error: &FetchError) -> Option<Duration> {
        let backoff = *self.backoff.lock().unwrap_or_else(|p| p.into_inner());
        if backoff.base.is_zero() {
            return None;
        }
        let now = Instant::now();
        let mut keys = self.keys();
        if keys.len() >= CAPACITY && !keys.contains_key(key) {
            keys.retain(|_, f| f.retry_at > now || f.retrying);
            if keys.len() >= CAPACITY {
                return None;
            }
        }
        let failure = keys.entry(key.to_owned()).or_insert(Failure {
            error: error.clone(),
            attempts: 0,
            retry_at: now,
            retrying: false,
        });
        failure.attempts = failure.attempts.saturating_add(1);
        failure.error = error.clone();
        failure.retrying = false;
        let wait = backoff.after(failure.attempts);
        failure.retry_at = now + wait;
        Some(wait)
    }

    /// The background retry of `key` ended: unless its failure was recorded again
    /// (a new backoff, a new retry to schedule), the next request tries itself.
    pub fn retry_ended(&self, key: &str) {
        if let Some(failure) = self.keys().get_mut(key)
            && failure.retrying
        {
            failure.retrying = false;
            failure.retry_at = failure.retry_at.min(Instant::now());
        }
    }

    /// What a fill of `key` learnt: held back after a failure of the upstream (not
    /// after a refusal of ours), let go after a success.
    pub fn learn<T>(&self, key: &str, fetched: &Result<T, FetchError>) {
        match fetched {
            Ok(_) => self.clear(key),
            // Throttling is the instance's pause, not this key's failure.
            Err(e)
                if e.is_failure()
                    && e.was_asked()
                    && !matches!(e, FetchError::Throttled { .. }) =>
            {
                self.record(key, e);
            }
            Err(_) => {}
        }
    }

    /// Forgets `key` (its fill succeeded).
    pub fn clear(&self, key: &str) {
        let mut keys = self.keys();
        // Most fills find no failure kept: no hashing of the key then.
        if keys.is_empty() {
            return;
        }
        if keys.remove(key).is_some() && keys.capacity() > 64 && keys.len() * 4 < keys.capacity() {
            let keep = keys.len() * 2;
            keys.shrink_to(keep);
        }
    }

    /// The failure `key` is held back for, while its backoff runs, and whether this
    /// caller should schedule the retry for when it ends (`Some(at)`, once per
    /// failure).
    pub fn held(&self, key: &str) -> Option<(FetchError, Option<Instant>)> {
        let mut keys = self.keys();
        let failure = keys.get_mut(key)?;
        if Instant::now() >= failure.retry_at && !failure.retrying {
            // The backoff is over and no retry runs: this request tries itself.
            return None;
        }
        let schedule = (!failure.retrying).then(|| {
            failure.retrying = true;
            failure.retry_at
        });
        Some((failure.error.clone(), schedule))
    }

    /// How many keys are held back now.
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.keys()
            .values()
            .filter(|f| f.retry_at > now || f.retrying)
            .count()
    }

    /// Whether no key is held back.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failures() -> Failures {
        Failures::new(Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(8),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_key_is_held_and_retried_once_per_backoff() {
        let f = failures();
        assert!(f.held("k").is_none());
        let wait = f.record("k", &FetchError::Timeout).unwrap();
        assert!((Duration::from_millis(750)..=Duration::from_millis(1250)).contains(&wait));
        let (error, schedule) = f.held("k").unwrap();
        assert!(matches!(error, FetchError::Timeout));
        assert!(
            schedule.is_some(),
            "the first to find it schedules the retry"
        );
        let (_, again) = f.held("k").unwrap();
        assert!(again.is_none(), "one retry per key");
        // The retry fails too: held again, for about twice as long.
        let wait = f.record("k", &FetchError::Timeout).unwrap();
        assert!(wait >= Duration::from_millis(1500), "{wait:?}");
        tokio::time::advance(wait).await;
        assert!(f.held("k").is_none(), "over: a request tries itself");
        f.clear("k");
        assert!(f.is_empty());
    }

    #[test]
    fn the_backoff_doubles_up_to_its_ceiling() {
        let b = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(8),
        };
        for attempts in 1..30 {
            assert!(b.after(attempts) <= Duration::from_secs(8));
        }
        assert!(b.after(3) >= Duration::from_secs(3));
    }
}
