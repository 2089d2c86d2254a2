//! Rate limits with governor: the upstream budget shared by every source of upstream
//! requests, and a limit per client token. Who may call at all is `auth`'s business.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::config::{ClientConfig, LimitsConfig};

/// Who wants an upstream request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// A client is waiting for this answer.
    Client,
    /// A stale-while-revalidate refresh: nobody waits for it; dropped when the
    /// budget is short.
    Background,
    /// A scheduled prewarm: waits for the background share (up to
    /// [`PREWARM_MAX_WAIT`]), then for a moment when clients leave room.
    Prewarm,
}

/// Longest a prewarm request waits for budget before it is dropped (and counted).
pub const PREWARM_MAX_WAIT: Duration = Duration::from_secs(60);

impl Priority {
    /// Stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Client => "client",
            Priority::Background => "background",
            Priority::Prewarm => "prewarm",
        }
    }
}

/// Why no upstream request may be made now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// A client waited `client_wait_ms` and the budget stayed short.
    Overloaded,
    /// Background work found no room and was dropped.
    Dropped,
}

fn limiter(rps: u32, burst: u32) -> Option<DefaultDirectRateLimiter> {
    let rps = NonZeroU32::new(rps)?;
    let burst = NonZeroU32::new(burst).unwrap_or(rps);
    Some(RateLimiter::direct(
        Quota::per_second(rps).allow_burst(burst),
    ))
}

/// The global cap on upstream requests.
///
/// Clients queue for the whole budget (up to `client_wait_ms`). Background work takes
/// a permit only when one is free at once *and* its own share (`background_percent`
/// of the rate) allows it, so it never delays a waiting client by more than its share
/// and never queues.
pub struct UpstreamBudget {
    all: Option<DefaultDirectRateLimiter>,
    background: Option<DefaultDirectRateLimiter>,
    client_wait: Duration,
    /// Background requests dropped for want of budget.
    dropped: AtomicU64,
}

impl UpstreamBudget {
    /// The budget of `[limits]`.
    pub fn new(limits: &LimitsConfig) -> UpstreamBudget {
        let share = |n: u32| (u64::from(n) * u64::from(limits.background_percent) / 100) as u32;
        let all = limiter(limits.upstream_rps, limits.upstream_burst);
        // With a cap, a share of zero leaves `background` empty: no background work.
        let background = match (&all, limits.background_percent) {
            (Some(_), percent) if percent > 0 => limiter(
                share(limits.upstream_rps).max(1),
                share(limits.upstream_burst).max(1),
            ),
            _ => None,
        };
        UpstreamBudget {
            all,
            background,
            client_wait: Duration::from_millis(limits.client_wait_ms),
            dropped: AtomicU64::new(0),
        }
    }

    /// Waits for (clients) or checks (background) room for one upstream request.
    ///
    /// # Errors
    /// `Overloaded` when a client waited too long; `Dropped` for background work.
    pub async fn acquire(&self, priority: Priority) -> Result<(), Denied> {
        let Some(all) = &self.all else {
            return Ok(());
        };
        match priority {
            Priority::Client => tokio::time::timeout(self.client_wait, all.until_ready())
                .await
                .map_err(|_| Denied::Overloaded),
            Priority::Background => {
                let share_ok = self.background.as_ref().is_some_and(|b| b.check().is_ok());
                if share_ok && all.check().is_ok() {
                    Ok(())
                } else {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    Err(Denied::Dropped)
                }
            }
            Priority::Prewarm => {
                let deadline = tokio::time::Instant::now() + PREWARM_MAX_WAIT;
                let share = match &self.background {
                    Some(share) => tokio::time::timeout_at(deadline, share.until_ready())
                        .await
                        .is_ok(),
                    None => false,
                };
                // Clients queue in `until_ready`; prewarm only takes a permit that is
                // free at the moment it looks, and otherwise steps back.
                loop {
                    if !share {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                        return Err(Denied::Dropped);
                    }
                    let Err(not_until) = all.check() else {
                        return Ok(());
                    };
                    let wait = not_until.wait_time_from(DefaultClock::default().now());
                    let retry = tokio::time::Instant::now()
                        + wait
                        + Duration::from_millis(fastrand::u64(5..50));
                    if retry > deadline {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                        return Err(Denied::Dropped);
                    }
                    tokio::time::sleep_until(retry).await;
                }
            }
        }
    }

    /// Background requests dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Per-token client rate limits, indexed by `TokenId`.
pub struct ClientLimits {
    limiters: Vec<Option<DefaultDirectRateLimiter>>,
}

impl ClientLimits {
    /// One limiter per client (`None` where unlimited).
    pub fn new(clients: &[ClientConfig], limits: &LimitsConfig) -> ClientLimits {
        ClientLimits {
            limiters: clients
                .iter()
                .map(|c| {
                    limiter(
                        c.rps.unwrap_or(limits.client_rps),
                        c.burst.unwrap_or(limits.client_burst),
                    )
                })
                .collect(),
        }
    }

    /// Takes one request from client `index`'s allowance.
    ///
    /// # Errors
    /// The whole seconds to wait before the next request is allowed (at least 1).
    pub fn check(&self, index: usize) -> Result<(), u64> {
        match self.limiters.get(index).and_then(Option::as_ref) {
            None => Ok(()),
            Some(l) => l.check().map_err(|not_until| {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rps: u32, burst: u32) -> LimitsConfig {
        LimitsConfig {
            upstream_rps: rps,
            upstream_burst: burst,
            client_rps: rps,
            client_burst: burst,
            client_wait_ms: 50,
            ..LimitsConfig::default()
        }
    }

    #[tokio::test]
    async fn background_never_waits_and_is_counted() {
        let b = UpstreamBudget::new(&limits(1, 2));
        assert_eq!(b.acquire(Priority::Background).await, Ok(()));
        // The background share (50 % of burst 2 = 1) is spent.
        assert_eq!(b.acquire(Priority::Background).await, Err(Denied::Dropped));
        assert_eq!(b.dropped(), 1);
        // A client still gets the remaining permit.
        assert_eq!(b.acquire(Priority::Client).await, Ok(()));
        // Then waits, and gives up after client_wait_ms.
        assert_eq!(b.acquire(Priority::Client).await, Err(Denied::Overloaded));
    }

    #[tokio::test]
    async fn zero_rate_means_no_cap() {
        let b = UpstreamBudget::new(&limits(0, 0));
        for _ in 0..100 {
            assert_eq!(b.acquire(Priority::Background).await, Ok(()));
        }
    }

    #[test]
    fn client_limits_give_retry_after() {
        let clients = vec![ClientConfig {
            name: "a".into(),
            token: crate::config::Secret::new("t"),
            rps: Some(1),
            burst: Some(2),
        }];
        let l = ClientLimits::new(&clients, &LimitsConfig::default());
        assert!(l.check(0).is_ok());
        assert!(l.check(0).is_ok());
        assert_eq!(l.check(0), Err(1));
        assert!(l.check(7).is_ok(), "unknown index: unlimited");
    }
}
