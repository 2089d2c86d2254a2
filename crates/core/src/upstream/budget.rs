//! Rate limits with governor: the upstream budget shared by every source of upstream
//! requests (with priorities), the limiter a client token gets, and the clock both
//! read. The clock is injectable: tokio's (pausable in tests) or governor's
//! `FakeRelativeClock`, so rate-limit tests never sleep in real time.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::upstream::counters::Counters;
use mdproxy_fleet::{Permits, Unavailable};

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
    /// An instance's breaker probe sent on its own while its client goes on to the
    /// next instance: a client's permit at once or not at all, never the
    /// background share (with `background_percent = 0` there is none, and the
    /// primary would never be asked again) nor the quota's reserve.
    Probe,
}

/// Longest a prewarm request waits for budget before it is dropped (and counted).
pub const PREWARM_MAX_WAIT: Duration = Duration::from_secs(60);

impl Priority {
    /// Whether it may spend the quota's reserve (kept for clients): a client's
    /// request, or a probe that brings an instance back for them.
    pub fn is_clients(self) -> bool {
        matches!(self, Priority::Client | Priority::Probe)
    }

    /// Stable label.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Client => "client",
            Priority::Background => "background",
            Priority::Prewarm => "prewarm",
            Priority::Probe => "probe",
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

/// The time source of every limiter.
#[derive(Clone, Debug)]
pub enum RateClock {
    /// tokio's clock, measured from `origin` (paused and advanced by
    /// `#[tokio::test(start_paused = true)]`).
    Tokio { origin: tokio::time::Instant },
    /// A clock that moves only when a test advances it.
    Fake(FakeRelativeClock),
    /// tokio's clock running `factor` times faster from `origin`: an accelerated
    /// day (a replay, a test of minutes run in seconds), read alike by the market
    /// clock ([`ScaledClock`](mdproxy_market::ScaledClock)).
    Scaled {
        origin: tokio::time::Instant,
        factor: f64,
    },
}

impl RateClock {
    /// The rate clock running alike `clock` (same origin and factor).
    pub fn following(clock: &mdproxy_market::ScaledClock) -> RateClock {
        let (origin, factor) = clock.origin_and_factor();
        RateClock::Scaled { origin, factor }
    }

    /// tokio's clock, starting now.
    pub fn tokio() -> RateClock {
        RateClock::Tokio {
            origin: tokio::time::Instant::now(),
        }
    }

    /// How long a wait of `d` on this clock lasts on tokio's (a sleep's length).
    pub fn to_real(&self, d: Duration) -> Duration {
        match self {
            RateClock::Scaled { factor, .. } if *factor > 0.0 => d.div_f64(*factor),
            _ => d,
        }
    }
}

impl Clock for RateClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        match self {
            RateClock::Tokio { origin } => Nanos::from(origin.elapsed()),
            RateClock::Fake(fake) => fake.now(),
            RateClock::Scaled { origin, factor } => Nanos::from(origin.elapsed().mul_f64(*factor)),
        }
    }
}

/// One GCRA limiter on the injectable clock.
pub type Limiter = RateLimiter<NotKeyed, InMemoryState, RateClock, NoOpMiddleware<Nanos>>;

/// `rps` per second with bursts of `burst` (`None`: unlimited, rate 0).
pub fn limiter(rps: u32, burst: u32, clock: &RateClock) -> Option<Limiter> {
    let rps = NonZeroU32::new(rps)?;
    let burst = NonZeroU32::new(burst).unwrap_or(rps);
    Some(RateLimiter::direct_with_clock(
        Quota::per_second(rps).allow_burst(burst),
        clock.clone(),
    ))
}

/// `rate` per second (fractional rates too: one permit per `1 / rate` s) with bursts
/// of `burst`; `None` for a rate of zero (no cap).
pub fn limiter_at(rate: f64, burst: u32, clock: &RateClock) -> Option<Limiter> {
    if rate <= 0.0 {
        return None;
    }
    let period = Duration::from_secs_f64(1.0 / rate).max(Duration::from_nanos(1));
    let quota = Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst.max(1))?);
    Some(RateLimiter::direct_with_clock(quota, clock.clone()))
}

/// Takes one permit from `limiter`, or the time to wait for the next one.
pub fn check(limiter: &Limiter, clock: &RateClock) -> Result<(), Duration> {
    limiter
        .check()
        .map_err(|not_until| not_until.wait_time_from(clock.now()))
}

/// Waits (on tokio's clock) until `limiter` has a permit and takes it.
async fn until_ready(limiter: &Limiter, clock: &RateClock) {
    while let Err(wait) = check(limiter, clock) {
        tokio::time::sleep(clock.to_real(wait)).await;
    }
}

/// The settings a budget is built from; a reload rebuilds the budget only when
/// these change, so its buckets (and the upstream's protection) survive reloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetSettings {
    pub upstream_rps: u32,
    pub upstream_burst: u32,
    pub background_percent: u32,
    pub client_wait_ms: u64,
}

impl BudgetSettings {
    /// One node's share of a cluster's budget while Redis is away: the rate and
    /// burst divided by the nodes last seen (each at least 1).
    pub fn divided(self, nodes: u64) -> BudgetSettings {
        let n = u32::try_from(nodes.max(1)).unwrap_or(u32::MAX);
        BudgetSettings {
            upstream_rps: if self.upstream_rps == 0 {
                0
            } else {
                (self.upstream_rps / n).max(1)
            },
            upstream_burst: (self.upstream_burst / n).max(1),
            ..self
        }
    }
}

impl From<&mdproxy_config::LimitsConfig> for BudgetSettings {
    fn from(l: &mdproxy_config::LimitsConfig) -> Self {
        BudgetSettings {
            upstream_rps: l.upstream_rps,
            upstream_burst: l.upstream_burst,
            background_percent: l.background_percent,
            client_wait_ms: l.client_wait_ms,
        }
    }
}

/// The global cap on upstream requests.
///
/// Clients queue for the whole budget (up to `client_wait_ms`). Background work takes
/// a permit only when one is free at once *and* its own share (`background_percent`
/// of the rate) allows it, so it never delays a waiting client by more than its share
/// and never queues.
pub struct UpstreamBudget {
    settings: BudgetSettings,
    /// The rate it grants, requests per second: `settings.upstream_rps`, or the
    /// adaptive pace below it.
    rate: f64,
    all: Option<Limiter>,
    background: Option<Limiter>,
    clock: RateClock,
    /// Where drops are counted (the upstream's counters, not this budget's).
    counters: Arc<Counters>,
}

impl UpstreamBudget {
    /// The budget of `settings`, counting drops in `counters`.
    pub fn new(
        settings: BudgetSettings,
        clock: RateClock,
        counters: Arc<Counters>,
    ) -> UpstreamBudget {
        let share = |n: u32| (u64::from(n) * u64::from(settings.background_percent) / 100) as u32;
        let all = limiter(settings.upstream_rps, settings.upstream_burst, &clock);
        // With a cap, a share of zero leaves `background` empty: no background work.
        let background = match (&all, settings.background_percent) {
            (Some(_), percent) if percent > 0 => limiter(
                share(settings.upstream_rps).max(1),
                share(settings.upstream_burst).max(1),
                &clock,
            ),
            _ => None,
        };
        UpstreamBudget {
            settings,
            rate: f64::from(settings.upstream_rps),
            all,
            background,
            clock,
            counters,
        }
    }

    /// The budget of `settings` at `rate` requests per second (the adaptive pace,
    /// at most `settings.upstream_rps`), bursts scaled alike, its buckets empty: a
    /// change of pace never hands out a fresh burst.
    pub fn paced(
        settings: BudgetSettings,
        rate: f64,
        clock: RateClock,
        counters: Arc<Counters>,
    ) -> UpstreamBudget {
        let ceiling = f64::from(settings.upstream_rps);
        if settings.upstream_rps == 0 || rate >= ceiling {
            // Back at the ceiling (a pace recovered from throttling): the
            // configured buckets, empty as well.
            let budget = UpstreamBudget::new(settings, clock, counters);
            for limiter in budget.all.iter().chain(budget.background.iter()) {
                while limiter.check().is_ok() {}
            }
            return budget;
        }
        let scale = |n: u32| ((f64::from(n) * rate / ceiling).floor() as u32).max(1);
        let burst = scale(settings.upstream_burst);
        let all = limiter_at(rate, burst, &clock);
        let share = f64::from(settings.background_percent) / 100.0;
        let background = (settings.background_percent > 0)
            .then(|| {
                limiter_at(
                    rate * share,
                    scale(settings.upstream_burst).min(burst),
                    &clock,
                )
            })
            .flatten();
        for limiter in all.iter().chain(background.iter()) {
            // Empty from the start: what the old buckets held was already spent.
            while limiter.check().is_ok() {}
        }
        UpstreamBudget {
            settings,
            rate,
            all,
            background,
            clock,
            counters,
        }
    }

    /// The rate it grants, requests per second (0: no cap).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The settings this budget was built from.
    pub fn settings(&self) -> BudgetSettings {
        self.settings
    }

    fn drop_one(&self) -> Denied {
        self.counters.drop_background();
        Denied::Dropped
    }

    /// One permit from the fleet's bucket `bucket` (`[cluster]`), with this node's
    /// priorities: clients wait up to `client_wait_ms`; background refreshes take
    /// only from the `background_percent` share of the burst, at once or never;
    /// prewarm waits for that share. `Err(Unavailable)`: the fleet cannot be asked
    /// (Redis is away, or a single node), so the caller uses a local budget.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    pub async fn acquire_shared(
        &self,
        permits: &dyn Permits,
        bucket: &str,
        priority: Priority,
    ) -> Result<Result<(), Denied>, Unavailable> {
        let s = self.settings;
        if s.upstream_rps == 0 {
            return Ok(Ok(()));
        }
        // The nodes on Redis leave their share to those expected but missing.
        let rate = self.rate * permits.fleet_share();
        let interval = Duration::from_secs_f64(1.0 / rate.max(f64::MIN_POSITIVE));
        let full = interval * s.upstream_burst.saturating_sub(1);
        let share = full * s.background_percent / 100;
        let (tolerance, limit) = match priority {
            Priority::Client => (full, Duration::from_millis(s.client_wait_ms)),
            Priority::Probe => (full, Duration::ZERO),
            Priority::Background => (share, Duration::ZERO),
            Priority::Prewarm => (share, PREWARM_MAX_WAIT),
        };
        let started = tokio::time::Instant::now();
        loop {
            let wait = permits.take_permit(bucket, interval, tolerance).await?;
            if wait.is_zero() {
                return Ok(Ok(()));
            }
            if started.elapsed() + wait > limit {
                return Ok(Err(match priority {
                    Priority::Client | Priority::Probe => Denied::Overloaded,
                    Priority::Background | Priority::Prewarm => self.drop_one(),
                }));
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// [`acquire`](Self::acquire) when it is decided without a wait: no budget, a
    /// client's permit at hand, a probe's or a background refresh's verdict (those
    /// take a permit at once or never). `None`: the request must wait for one.
    pub fn try_acquire(&self, priority: Priority) -> Option<Result<(), Denied>> {
        match &self.all {
            None => Some(Ok(())),
            Some(all) => self.at_once(all, priority),
        }
    }

    /// What `all` (and the background share) decide at once for `priority`, if
    /// they do.
    fn at_once(&self, all: &Limiter, priority: Priority) -> Option<Result<(), Denied>> {
        let clock = &self.clock;
        match priority {
            Priority::Client => check(all, clock).is_ok().then_some(Ok(())),
            Priority::Probe => Some(check(all, clock).map_err(|_| Denied::Overloaded)),
            Priority::Background => {
                let share_ok = self
                    .background
                    .as_ref()
                    .is_some_and(|b| check(b, clock).is_ok());
                Some(if share_ok && check(all, clock).is_ok() {
                    Ok(())
                } else {
                    Err(self.drop_one())
                })
            }
            Priority::Prewarm => None,
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
        if let Some(decided) = self.at_once(all, priority) {
            return decided;
        }
        let clock = &self.clock;
        if priority != Priority::Prewarm {
            // A client waits (a probe and a background refresh were decided above).
            return tokio::time::timeout(
                Duration::from_millis(self.settings.client_wait_ms),
                until_ready(all, clock),
            )
            .await
            .map_err(|_| Denied::Overloaded);
        }
        let deadline = tokio::time::Instant::now() + PREWARM_MAX_WAIT;
        let share = match &self.background {
            Some(share) => tokio::time::timeout_at(deadline, until_ready(share, clock))
                .await
                .is_ok(),
            None => false,
        };
        if !share {
            return Err(self.drop_one());
        }
        // Clients queue in `until_ready`; prewarm only takes a permit that is
        // free at the moment it looks, and otherwise steps back.
        loop {
            let Err(wait) = check(all, clock) else {
                return Ok(());
            };
            let retry = tokio::time::Instant::now()
                + clock.to_real(wait)
                + Duration::from_millis(fastrand::u64(5..50));
            if retry > deadline {
                return Err(self.drop_one());
            }
            tokio::time::sleep_until(retry).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(rps: u32, burst: u32) -> BudgetSettings {
        BudgetSettings {
            upstream_rps: rps,
            upstream_burst: burst,
            background_percent: 50,
            client_wait_ms: 50,
        }
    }

    /// A breaker's probe takes a client's permit at once or not at all, and not
    /// from the background share: with `background_percent = 0` (no share at all)
    /// background work is dropped, and a probe still goes, so an instance whose
    /// breaker opened is asked again. Refused, it waits for nothing and is not
    /// counted as dropped background work.
    #[tokio::test(start_paused = true)]
    async fn a_probe_is_not_background_work() {
        let counters = Arc::new(Counters::default());
        let none_in_background = BudgetSettings {
            background_percent: 0,
            ..settings(1, 1)
        };
        let b = UpstreamBudget::new(
            none_in_background,
            RateClock::tokio(),
            Arc::clone(&counters),
        );
        assert_eq!(b.acquire(Priority::Background).await, Err(Denied::Dropped));
        assert_eq!(b.acquire(Priority::Probe).await, Ok(()));
        let started = tokio::time::Instant::now();
        assert_eq!(b.acquire(Priority::Probe).await, Err(Denied::Overloaded));
        assert_eq!(started.elapsed(), Duration::ZERO, "it did not wait");
        assert_eq!(counters.dropped(), 1, "only the background request");
        assert!(Priority::Probe.is_clients() && !Priority::Background.is_clients());
    }

    /// What needs no wait is decided at once, as `acquire` would decide it: no
    /// budget, a client's permit at hand, a probe's and a background refresh's
    /// verdicts. A client with none at hand, and prewarm, are left to `acquire`.
    #[tokio::test(start_paused = true)]
    async fn what_needs_no_wait_is_decided_at_once() {
        let counters = Arc::new(Counters::default());
        let none = UpstreamBudget::new(settings(0, 1), RateClock::tokio(), Arc::clone(&counters));
        for priority in [
            Priority::Client,
            Priority::Background,
            Priority::Prewarm,
            Priority::Probe,
        ] {
            assert_eq!(none.try_acquire(priority), Some(Ok(())), "{priority:?}");
        }
        let b = UpstreamBudget::new(settings(1, 2), RateClock::tokio(), Arc::clone(&counters));
        assert_eq!(b.try_acquire(Priority::Prewarm), None);
        assert_eq!(b.try_acquire(Priority::Background), Some(Ok(())));
        assert_eq!(
            b.try_acquire(Priority::Background),
            Some(Err(Denied::Dropped))
        );
        assert_eq!(counters.dropped(), 1);
        assert_eq!(b.try_acquire(Priority::Client), Some(Ok(())));
        assert_eq!(b.try_acquire(Priority::Client), None, "it would wait");
        assert_eq!(
            b.try_acquire(Priority::Probe),
            Some(Err(Denied::Overloaded))
        );
        let started = tokio::time::Instant::now();
        assert_eq!(b.acquire(Priority::Client).await, Err(Denied::Overloaded));
        assert_eq!(started.elapsed(), Duration::from_millis(50), "it waited");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.try_acquire(Priority::Client), Some(Ok(())), "refilled");
    }

    /// A pace back at the ceiling gets the configured buckets, empty: recovering
    /// from throttling hands out no burst at once.
    #[tokio::test(start_paused = true)]
    async fn a_pace_back_at_the_ceiling_starts_empty() {
        let counters = Arc::new(Counters::default());
        let b = UpstreamBudget::paced(settings(10, 5), 10.0, RateClock::tokio(), counters);
        assert_eq!(b.rate(), 10.0);
        assert_eq!(b.acquire(Priority::Probe).await, Err(Denied::Overloaded));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(
            b.acquire(Priority::Probe).await,
            Ok(()),
            "one interval later"
        );
    }

    /// Background work never waits and is counted; a client then queues and gives
    /// up after `client_wait_ms` (tokio's paused clock: no real sleep).
    #[tokio::test(start_paused = true)]
    async fn background_never_waits_and_is_counted() {
        let counters = Arc::new(Counters::default());
        let b = UpstreamBudget::new(settings(1, 2), RateClock::tokio(), Arc::clone(&counters));
        assert_eq!(b.acquire(Priority::Background).await, Ok(()));
        // The background share (50 % of burst 2 = 1) is spent.
        assert_eq!(b.acquire(Priority::Background).await, Err(Denied::Dropped));
        assert_eq!(counters.dropped(), 1);
        // A client still gets the remaining permit.
        assert_eq!(b.acquire(Priority::Client).await, Ok(()));
        // Then waits, and gives up after client_wait_ms.
        assert_eq!(b.acquire(Priority::Client).await, Err(Denied::Overloaded));
        // A second later the bucket has room again.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.acquire(Priority::Client).await, Ok(()));
    }

    /// A waiting client is served as soon as the bucket refills, on the injected clock.
    #[tokio::test(start_paused = true)]
    async fn a_client_waits_for_the_next_permit() {
        let counters = Arc::new(Counters::default());
        let mut s = settings(2, 1);
        s.client_wait_ms = 2_000;
        let b = UpstreamBudget::new(s, RateClock::tokio(), counters);
        assert_eq!(b.acquire(Priority::Client).await, Ok(()));
        let started = tokio::time::Instant::now();
        assert_eq!(b.acquire(Priority::Client).await, Ok(()));
        // Virtual time: exactly one refill period, give or take the timer's tick.
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(500) && waited < Duration::from_millis(510),
            "{waited:?}"
        );
    }

    /// A burst of twenty-five clients on an empty bucket: the burst at once, then one
    /// permit per interval and never two, each interval passing on tokio's paused
    /// clock with every waiter having looked at the bucket again before the next
    /// (what tests/it/cache.rs shows end to end).
    #[tokio::test(start_paused = true)]
    async fn waiting_clients_get_one_permit_per_interval() {
        let mut s = settings(5, 5);
        s.client_wait_ms = 60_000;
        let b = Arc::new(UpstreamBudget::new(
            s,
            RateClock::tokio(),
            Arc::new(Counters::default()),
        ));
        let granted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        for _ in 0..25 {
            let (b, granted) = (Arc::clone(&b), Arc::clone(&granted));
            tokio::spawn(async move {
                assert_eq!(b.acquire(Priority::Client).await, Ok(()));
                granted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        // Each sleep ends only once every other task waits on a later timer.
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(
            granted.load(std::sync::atomic::Ordering::SeqCst),
            5,
            "the burst"
        );
        for step in 1..=20 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(
                granted.load(std::sync::atomic::Ordering::SeqCst),
                5 + step,
                "interval {step}"
            );
        }
    }

    #[tokio::test]
    async fn zero_rate_means_no_cap() {
        let b = UpstreamBudget::new(
            settings(0, 0),
            RateClock::tokio(),
            Arc::new(Counters::default()),
        );
        for _ in 0..100 {
            assert_eq!(b.acquire(Priority::Background).await, Ok(()));
        }
    }

    #[test]
    fn a_fake_clock_drives_the_limiter() {
        let fake = FakeRelativeClock::default();
        let clock = RateClock::Fake(fake.clone());
        let l = limiter(1, 2, &clock).unwrap();
        assert!(check(&l, &clock).is_ok());
        assert!(check(&l, &clock).is_ok());
        assert_eq!(check(&l, &clock), Err(Duration::from_secs(1)));
        fake.advance(Duration::from_secs(1));
        assert!(check(&l, &clock).is_ok());
    }
}
