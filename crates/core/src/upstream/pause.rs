//! The upstream's own throttling, honoured: a `429` or `503` with `Retry-After` (in
//! seconds or as an HTTP date; a default when absent, a cap always) pauses every
//! request to that upstream until then. Nothing is asked meanwhile; the cache serves
//! what it has and the edge tells clients when to come back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use governor::clock::Clock;
use http::HeaderValue;

use crate::upstream::budget::RateClock;

/// How long a throttling answer pauses the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseSettings {
    /// When the answer names no time (`Retry-After` absent or unreadable).
    pub default: Duration,
    /// The longest pause any answer may ask for.
    pub max: Duration,
}

/// How long `value` (a `Retry-After` header: delay-seconds or an HTTP date, RFC 9110
/// §10.2.3) asks to wait from `now`, within `settings`.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use mdproxy_core::upstream::pause::{PauseSettings, retry_after};
/// let s = PauseSettings { default: Duration::from_secs(30), max: Duration::from_secs(600) };
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// assert_eq!(retry_after(Some(&HeaderValue::from_static("120")), now, s), Duration::from_secs(120));
/// assert_eq!(retry_after(Some(&HeaderValue::from_static("99999")), now, s), Duration::from_secs(600));
/// assert_eq!(retry_after(None, now, s), Duration::from_secs(30));
/// let date = HeaderValue::from_static("Tue, 14 Nov 2023 22:15:20 GMT"); // 1_700_000_120
/// assert_eq!(retry_after(Some(&date), now, s), Duration::from_secs(120));
/// ```
pub fn retry_after(
    value: Option<&HeaderValue>,
    now: SystemTime,
    settings: PauseSettings,
) -> Duration {
    value
        .and_then(|v| asked_wait(v, now))
        .unwrap_or(settings.default)
        .min(settings.max)
}

/// The wait a `Retry-After` value names (seconds, or an HTTP date, from `now`: the
/// answer's `Date` when it has one, the upstream's clock); `None` when it cannot be
/// read.
pub fn asked_wait(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    match text.parse::<u64>() {
        Ok(secs) => Some(Duration::from_secs(secs)),
        Err(_) => httpdate::parse_http_date(text)
            .ok()
            .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO)),
    }
}

/// The pause of one upstream, on the rate clock (a test's fake clock moves it).
#[derive(Debug)]
pub struct Pause {
    clock: RateClock,
    /// Nanoseconds on the rate clock until which nothing is asked; 0: none.
    until: AtomicU64,
    /// How many pauses began.
    count: AtomicU64,
    /// Wakes the requests waiting for budget when a pause begins: they give up at
    /// once rather than go out during it.
    begun: tokio::sync::Notify,
}

impl Pause {
    /// No pause.
    pub fn new(clock: RateClock) -> Pause {
        Pause {
            clock,
            until: AtomicU64::new(0),
            count: AtomicU64::new(0),
            begun: tokio::sync::Notify::new(),
        }
    }

    /// Resolves when a pause begins or is extended after this call (a waiter
    /// creates it before it starts waiting, so no pause slips in between).
    pub fn begun(&self) -> tokio::sync::futures::Notified<'_> {
        // `notify_waiters` reaches it from now on, even before its first poll (it
        // compares the count of calls it was made at), so it is not enabled: a
        // waiter that never polls it (a permit at hand) takes no lock.
        self.begun.notified()
    }

    fn now(&self) -> u64 {
        self.clock.now().as_u64()
    }

    /// Pauses for `wait` from now, unless a pause already runs longer. Returns
    /// whether this began (or extended) a pause. A wait of zero (`Retry-After: 0`,
    /// or a date already past) is none: it wakes no one waiting for budget.
    pub fn pause(&self, wait: Duration) -> bool {
        if wait.is_zero() {
            return false;
        }
        let until = self.now().saturating_add(wait.as_nanos() as u64);
        let before = self.until.fetch_max(until, Ordering::AcqRel);
        if before < until {
            if before <= self.now() {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
            self.begun.notify_waiters();
            true
        } else {
            false
        }
    }

    /// How long the pause still runs, if one does.
    pub fn remaining(&self) -> Option<Duration> {
        let until = self.until.load(Ordering::Acquire);
        let now = self.now();
        (until > now).then(|| Duration::from_nanos(until - now))
    }

    /// How many pauses began since start.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    #[test]
    fn a_pause_runs_until_its_time_and_only_extends() {
        let fake = FakeRelativeClock::default();
        let pause = Pause::new(RateClock::Fake(fake.clone()));
        assert_eq!(pause.remaining(), None);
        assert!(pause.pause(Duration::from_secs(10)));
        assert!(
            !pause.pause(Duration::from_secs(5)),
            "a shorter one changes nothing"
        );
        fake.advance(Duration::from_secs(4));
        assert_eq!(pause.remaining(), Some(Duration::from_secs(6)));
        assert!(pause.pause(Duration::from_secs(20)));
        assert_eq!(pause.count(), 1, "extended, not a new pause");
        fake.advance(Duration::from_secs(20));
        assert_eq!(pause.remaining(), None);
        assert!(pause.pause(Duration::from_secs(1)));
        assert_eq!(pause.count(), 2);
        fake.advance(Duration::from_secs(1));
        assert!(!pause.pause(Duration::ZERO), "no pause, no wake-up");
        assert_eq!((pause.remaining(), pause.count()), (None, 2));
    }

    /// A wait made before a pause begins is woken by it even if it was never
    /// polled before (a request made its wait, then found its permit pending), and
    /// one made after is not.
    #[test]
    fn a_wait_made_before_a_pause_is_woken_by_it_unpolled() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let pause = Pause::new(RateClock::Fake(FakeRelativeClock::default()));
        let mut before = std::pin::pin!(pause.begun());
        assert!(pause.pause(Duration::from_secs(10)));
        let mut after = std::pin::pin!(pause.begun());
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(before.as_mut().poll(&mut cx), Poll::Ready(()));
        assert_eq!(after.as_mut().poll(&mut cx), Poll::Pending);
        assert!(pause.pause(Duration::from_secs(20)), "extended");
        assert_eq!(after.as_mut().poll(&mut cx), Poll::Ready(()));
    }

    #[test]
    fn unreadable_or_past_retry_after() {
        let s = PauseSettings {
            default: Duration::from_secs(30),
            max: Duration::from_secs(600),
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert_eq!(
            retry_after(Some(&v("soon")), now, s),
            Duration::from_secs(30)
        );
        assert_eq!(
            retry_after(Some(&v("Tue, 14 Nov 2023 22:00:00 GMT")), now, s),
            Duration::ZERO,
            "a date in the past"
        );
        assert_eq!(retry_after(Some(&v(" 7 ")), now, s), Duration::from_secs(7));
    }
}
