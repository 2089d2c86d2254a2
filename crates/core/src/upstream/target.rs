//! One instance of the upstream (the primary, or a `[[upstream.fallback]]`) with every
//! protection of its own: its pooled client, its circuit breakers (one for the whole
//! upstream, one per route), its `Retry-After` pause, its adaptive pace, its budget
//! at that pace, its vendor quotas, and its counters. Which instance answers a
//! request is [`Upstream`](super::Upstream)'s choice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use chrono::NaiveTime;

use crate::upstream::breaker::{Admitted, Breaker, BreakerSettings, Open, Verdict};
use crate::upstream::budget::{BudgetSettings, Priority, RateClock, UpstreamBudget};
use crate::upstream::client::{ClientError, FetchError, UpstreamClient};
use crate::upstream::counters::{Counters, UpstreamOutcome};
use crate::upstream::pace::{Pace, PaceReport, PaceSettings, Signal};
use crate::upstream::pause::{Pause, PauseSettings};
use crate::upstream::quota::{Exhausted, Quota, QuotaReport, QuotaSettings};
use mdproxy_api::catalog::catalog;
use mdproxy_config::{Config, FallbackConfig, UpstreamConfig, redacted_url};
use mdproxy_fleet::limits::{Announcement, QuotaAsk, QuotaCount};
use mdproxy_market::Clock;

/// Everything a target is built from: a change of any of it rebuilds the target on
/// reload (and only then: its pool, buckets, pause and counts are kept otherwise).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetSettings {
    pub label: String,
    pub upstream: UpstreamConfig,
    pub budget: BudgetSettings,
    pub breaker: BreakerSettings,
    pub pause: PauseSettings,
    pub pace: PaceSettings,
    pub quota: QuotaSettings,
}

impl TargetSettings {
    /// The primary's settings and each fallback's (unset limits are the primary's),
    /// in the order they are tried.
    pub fn all(config: &Config) -> Vec<TargetSettings> {
        let primary = TargetSettings::of(config, "primary".into(), None);
        let fallbacks = config
            .upstream
            .fallback
            .iter()
            .enumerate()
            .map(|(i, f)| TargetSettings::of(config, format!("fallback-{}", i + 1), Some(f)));
        std::iter::once(primary).chain(fallbacks).collect()
    }

    fn of(config: &Config, label: String, fallback: Option<&FallbackConfig>) -> TargetSettings {
        let mut upstream = config.upstream.clone();
        upstream.fallback = Vec::new();
        let mut limits = config.limits.clone();
        if let Some(f) = fallback {
            upstream.base_url.clone_from(&f.base_url);
            upstream.token = f.token.clone();
            limits.upstream_rps = f.upstream_rps.unwrap_or(limits.upstream_rps);
            limits.upstream_burst = f.upstream_burst.unwrap_or(limits.upstream_burst);
            limits.upstream_per_minute =
                f.upstream_per_minute.unwrap_or(limits.upstream_per_minute);
            limits.upstream_per_day = f.upstream_per_day.unwrap_or(limits.upstream_per_day);
        }
        let day_start =
            NaiveTime::parse_from_str(&limits.quota_day_start, "%H:%M").unwrap_or(NaiveTime::MIN);
        TargetSettings {
            label,
            budget: BudgetSettings::from(&limits),
            breaker: BreakerSettings {
                failures: upstream.breaker_failures,
                open: Duration::from_millis(upstream.breaker_open_ms),
                max_open: Duration::from_millis(upstream.breaker_max_open_ms),
            },
            pause: PauseSettings {
                default: Duration::from_secs(limits.retry_after_default_secs),
                max: Duration::from_secs(limits.retry_after_max_secs),
            },
            pace: PaceSettings {
                enabled: limits.adaptive,
                ceiling: f64::from(limits.upstream_rps),
                floor: f64::from(limits.adaptive_floor_rps.min(limits.upstream_rps.max(1))),
                recovery: Duration::from_secs(limits.adaptive_recovery_secs),
            },
            quota: QuotaSettings {
                per_minute: limits.upstream_per_minute,
                per_day: limits.upstream_per_day,
                reserve_percent: limits.quota_reserve_percent,
                day_start,
                zone: limits
                    .quota_time_zone
                    .parse()
                    .unwrap_or(chrono_tz::Asia::Shanghai),
            },
            upstream,
        }
    }
}

/// The upstream-wide breaker and one per route: a route that fails (a 500 on one
/// path) opens its own; only failures that say the upstream itself is away
/// (timeouts, refused connections) count toward the upstream-wide one.
#[derive(Debug)]
pub struct Breakers {
    all: Breaker,
    routes: Vec<Breaker>,
}

/// What the breakers admitted a request as.
#[derive(Clone, Copy, Debug)]
pub struct Passed {
    all: Admitted,
    route: Admitted,
}

impl Passed {
    /// Whether it is the one request that tests an open breaker.
    pub fn is_probe(self) -> bool {
        self.all == Admitted::Probe || self.route == Admitted::Probe
    }
}

impl Breakers {
    fn new(settings: BreakerSettings, clock: &RateClock) -> Breakers {
        Breakers {
            all: Breaker::new(settings, clock.clone()),
            routes: catalog()
                .with_passthrough()
                .map(|_| Breaker::new(settings, clock.clone()))
                .collect(),
        }
    }

    fn admit(&self, endpoint: usize) -> Result<Passed, Open> {
        let all = self.all.admit()?;
        match self.routes[endpoint].admit() {
            Ok(route) => Ok(Passed { all, route }),
            Err(open) => {
                self.all.record(all, Verdict::Unknown);
                Err(open)
            }
        }
    }

    /// Records an outcome; `Some((scope, interval))` when it opened a breaker.
    fn record(
        &self,
        endpoint: usize,
        passed: Passed,
        verdict: Verdict,
        transport: bool,
    ) -> Option<(&'static str, Duration)> {
        let for_all = match verdict {
            Verdict::Down if !transport => Verdict::Unknown,
            other => other,
        };
        let opened_all = self.all.record(passed.all, for_all);
        let opened_route = self.routes[endpoint].record(passed.route, verdict);
        opened_all
            .map(|d| ("upstream", d))
            .or(opened_route.map(|d| ("route", d)))
    }

    /// Whether the upstream-wide breaker is open.
    pub fn is_open(&self) -> bool {
        self.all.is_open()
    }

    /// The routes whose breaker is open now.
    pub fn open_routes(&self) -> Vec<&'static str> {
        catalog()
            .with_passthrough()
            .zip(&self.routes)
            .filter(|(_, b)| b.is_open())
            .map(|(e, _)| e.path.as_str())
            .collect()
    }
}

/// Where one target stands, for `/status` and metrics.
#[derive(Clone, Debug)]
pub struct TargetReport {
    pub label: String,
    /// Its base URL without credentials.
    pub base_url: String,
    pub paused_for: Option<Duration>,
    pub pauses: u64,
    pub breaker_open: bool,
    pub open_routes: Vec<&'static str>,
    pub pace: PaceReport,
    pub quota: QuotaReport,
    /// Requests by outcome, in [`UpstreamOutcome::ALL`]'s order.
    pub outcomes: Vec<(UpstreamOutcome, u64)>,
}

/// What an outcome taught a target that the client and the rest of the fleet
/// should know.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pushback {
    /// A pause began (or grew): its length.
    pub paused: Option<Duration>,
    /// The rate went down: to what, and why.
    pub slowed: Option<(f64, String)>,
    /// A throttling answer: how long until this target may be asked again (what
    /// the client is told), whether or not it began the pause.
    pub retry_in: Option<Duration>,
}

/// One upstream instance.
pub struct Target {
    pub settings: TargetSettings,
    pub client: UpstreamClient,
    /// Its budget, at the pace's rate.
    budget: ArcSwap<UpstreamBudget>,
    /// Wakes the requests waiting on a budget the pace replaced: they wait on the
    /// new one, so none goes out at the old rate.
    rebuilt: tokio::sync::Notify,
    /// This node's share of the budget while the fleet cannot be asked
    /// ([`alone_budget`](Self::alone_budget)).
    alone: ArcSwapOption<UpstreamBudget>,
    breakers: Breakers,
    pause: Pause,
    pace: Pace,
    quota: Quota,
    clock: RateClock,
    counters: Arc<Counters>,
    outcomes: Vec<AtomicU64>,
}

impl Target {
    /// A target of `settings`, its counts at zero.
    ///
    /// # Errors
    /// When its client cannot be built.
    pub fn new(
        settings: TargetSettings,
        clock: &RateClock,
        wall: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> Result<Target, ClientError> {
        let client = UpstreamClient::new(&settings.upstream)?;
        let budget = UpstreamBudget::new(settings.budget, clock.clone(), Arc::clone(&counters));
        Ok(Target {
            client,
            budget: ArcSwap::from_pointee(budget),
            rebuilt: tokio::sync::Notify::new(),
            alone: ArcSwapOption::empty(),
            breakers: Breakers::new(settings.breaker, clock),
            pause: Pause::new(clock.clone()),
            pace: Pace::new(settings.pace, clock.clone()),
            quota: Quota::new(settings.quota, wall),
            clock: clock.clone(),
            counters,
            outcomes: UpstreamOutcome::ALL
                .iter()
                .map(|_| AtomicU64::new(0))
                .collect(),
            settings,
        })
    }

    /// Counts an outcome of this target.
    pub fn count(&self, outcome: UpstreamOutcome) {
        if let Some(i) = UpstreamOutcome::ALL.iter().position(|o| *o == outcome) {
            self.outcomes[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether a request of `endpoint` may be sent here now: not while paused, nor
    /// through an open breaker. The quota and the budget come after.
    ///
    /// # Errors
    /// The refusal, as the request's error.
    pub fn admit(&self, endpoint: usize) -> Result<Passed, FetchError> {
        if let Some(remaining) = self.pause.remaining() {
            return Err(FetchError::Paused { remaining });
        }
        self.breakers
            .admit(endpoint)
            .map_err(|open| FetchError::CircuitOpen {
                remaining_ms: open.remaining.as_millis() as u64,
            })
    }

    /// How long the `Retry-After` pause still runs, if one does.
    pub fn paused(&self) -> Option<Duration> {
        self.pause.remaining()
    }

    /// Resolves when a pause begins after this call (see [`Pause::begun`]).
    pub fn pause_begun(&self) -> tokio::sync::futures::Notified<'_> {
        self.pause.begun()
    }

    /// Whether the quotas have room for a request at `priority`, without taking
    /// it (asked before the budget).
    ///
    /// # Errors
    /// As [`take_quota`](Self::take_quota).
    pub fn check_quota(&self, priority: Priority, nodes: u64) -> Result<(), FetchError> {
        self.quota_verdict(self.quota.check_alone(priority, nodes))
    }

    /// Takes one request at `priority` from this node's count of the quotas: all
    /// of them for a node alone (`nodes` 1), else its share for a fleet of
    /// `nodes` that cannot be asked ([`Quota::take_alone`]).
    ///
    /// # Errors
    /// `OverQuota` when a quota is spent; `Dropped` when background work keeps the
    /// day's reserve.
    pub fn take_quota(&self, priority: Priority, nodes: u64) -> Result<(), FetchError> {
        self.quota_verdict(self.quota.take_alone(priority, nodes))
    }

    /// The fleet's ask for one request at `priority` (`None`: no quota).
    pub fn quota_ask(&self, priority: Priority) -> Option<QuotaAsk> {
        self.quota.ask(priority)
    }

    /// Takes in the fleet's count of the request asked as `ask`.
    ///
    /// # Errors
    /// As [`take_quota`](Self::take_quota).
    pub fn settle_quota(&self, ask: &QuotaAsk, count: QuotaCount) -> Result<(), FetchError> {
        self.quota_verdict(self.quota.settle(ask, count))
    }

    fn quota_verdict(&self, verdict: Result<(), Exhausted>) -> Result<(), FetchError> {
        match verdict {
            Ok(()) => Ok(()),
            Err(Exhausted::Reserve) => {
                self.counters.drop_background();
                Err(FetchError::Dropped)
            }
            Err(spent) => Err(FetchError::OverQuota {
                resets_in: spent.resets_in(),
            }),
        }
    }

    /// The budget at the pace's rate now (rebuilt, empty, when the pace moved).
    pub fn budget(&self) -> Arc<UpstreamBudget> {
        let budget = self.budget.load_full();
        let rate = self.pace.rate();
        let ceiling = self.settings.pace.ceiling;
        if ceiling > 0.0 && (budget.rate() - rate).abs() > ceiling / 100.0 {
            let paced = Arc::new(UpstreamBudget::paced(
                self.settings.budget,
                rate,
                self.clock.clone(),
                Arc::clone(&self.counters),
            ));
            self.budget.store(Arc::clone(&paced));
            self.rebuilt.notify_waiters();
            return paced;
        }
        budget
    }

    /// This node's share of the budget while the fleet that counts it cannot be
    /// asked: a `nodes`th of the settings, at a `nodes`th of the pace's rate now
    /// (not rounded up to a request a second: a fleet of four sharing one request
    /// a second sends one, not four), its buckets empty when rebuilt for a new
    /// pace or a new count of nodes. Kept for this target alone: one budget shared
    /// by the instances was rebuilt, full, at each switch between two whose
    /// settings differ.
    pub fn alone_budget(&self, nodes: u64) -> Arc<UpstreamBudget> {
        let share = self.settings.budget.divided(nodes);
        let rate = self.pace.rate() / nodes.max(1) as f64;
        let held = self.alone.load_full();
        if let Some(budget) = held
            && budget.settings() == share
            && (budget.rate() - rate).abs() <= rate / 100.0
        {
            return budget;
        }
        let built = Arc::new(UpstreamBudget::paced(
            share,
            rate,
            self.clock.clone(),
            Arc::clone(&self.counters),
        ));
        self.alone.store(Some(Arc::clone(&built)));
        built
    }

    /// Resolves when the budget is replaced after this call (the pace moved).
    pub fn budget_rebuilt(&self) -> tokio::sync::futures::Notified<'_> {
        // Not enabled, as `Pause::begun`: `notify_waiters` reaches it from now on.
        self.rebuilt.notified()
    }

    /// Takes in the outcome of a request admitted as `passed` for `endpoint`: the
    /// breakers, the pace, the pause. `sent`: when the request left (rate-clock
    /// nanoseconds), if it was sent. Returns what the client and the fleet should
    /// hear of it.
    pub fn record(
        &self,
        endpoint: usize,
        passed: Passed,
        result: Result<Duration, &FetchError>,
        sent: Option<u64>,
    ) -> Pushback {
        let mut pushback = Pushback::default();
        let (verdict, transport) = match (result, sent) {
            (Ok(_), _) => (Verdict::Up, false),
            (Err(e), Some(_)) => (e.verdict(), e.is_transport()),
            (Err(_), None) => (Verdict::Unknown, false),
        };
        if let Some((scope, interval)) = self.breakers.record(endpoint, passed, verdict, transport)
        {
            let route = catalog()
                .with_passthrough()
                .nth(endpoint)
                .map_or("-", |e| e.path.as_str());
            tracing::warn!(
                upstream = %self.settings.label,
                scope,
                route,
                open_ms = interval.as_millis() as u64,
                "upstream failing: circuit breaker opened"
            );
        }
        let signal = match result {
            Ok(took) => Some(Signal::Answered(took)),
            Err(FetchError::Reported { .. }) => Some(Signal::Reported),
            Err(FetchError::Timeout) => Some(Signal::Timeout),
            Err(FetchError::Throttled { .. }) => Some(Signal::Throttled),
            Err(_) => None,
        };
        if let (Some(signal), Some(sent)) = (signal, sent)
            && let Some(rate) = self.pace.observe(endpoint, sent, signal)
        {
            let reason = self.pace.report().reason.unwrap_or_default();
            tracing::warn!(
                upstream = %self.settings.label,
                rate = format!("{rate:.2}"),
                reason,
                "upstream pushes back: slowing down"
            );
            // At the new rate now, also for the requests already waiting.
            self.budget();
            pushback.slowed = Some((rate, reason));
        }
        let Err(FetchError::Throttled {
            status,
            retry_after,
        }) = result
        else {
            return pushback;
        };
        let pause = self.settings.pause;
        let wait = retry_after.unwrap_or(pause.default).min(pause.max);
        if self.pause.pause(wait) {
            tracing::warn!(
                upstream = %self.settings.label,
                status,
                pause_secs = wait.as_secs(),
                "the upstream throttles us: nothing is sent to it until its Retry-After"
            );
            pushback.paused = Some(wait);
        }
        pushback.retry_in = Some(self.pause.remaining().unwrap_or(wait));
        pushback
    }

    /// Takes in what another node of the fleet announced for this target.
    pub fn follow(&self, announcement: &Announcement) {
        match announcement {
            Announcement::Pause { wait, .. } => {
                let wait = (*wait).min(self.settings.pause.max);
                if self.pause.pause(wait) {
                    tracing::info!(
                        upstream = %self.settings.label,
                        pause_secs = wait.as_secs(),
                        "another node was asked to wait (Retry-After): this one waits too"
                    );
                }
            }
            Announcement::SlowDown { rate, reason, .. } => {
                if self.pace.follow(*rate, reason) {
                    tracing::info!(
                        upstream = %self.settings.label,
                        rate = format!("{rate:.2}"),
                        "another node slowed down: this one follows"
                    );
                    // At the new rate now, also for the requests already waiting.
                    self.budget();
                }
            }
        }
    }

    /// Whether the day's quota (this node's share of it for a fleet of `nodes`
    /// that counts alone) is so low that stale answers are preferred.
    pub fn is_thrifty(&self, nodes: u64) -> bool {
        self.quota.is_thrifty_alone(nodes)
    }

    /// Whether it can take a request now (not paused, its upstream-wide breaker
    /// closed): the order of preference among targets.
    pub fn is_available(&self) -> bool {
        self.pause.remaining().is_none() && !self.breakers.is_open()
    }

    /// Where it stands.
    pub fn report(&self) -> TargetReport {
        TargetReport {
            label: self.settings.label.clone(),
            base_url: redacted_url(&self.settings.upstream.base_url),
            paused_for: self.pause.remaining(),
            pauses: self.pause.count(),
            breaker_open: self.breakers.is_open(),
            open_routes: self.breakers.open_routes(),
            pace: self.pace.report(),
            quota: self.quota.report(),
            outcomes: UpstreamOutcome::ALL
                .iter()
                .zip(&self.outcomes)
                .map(|(o, n)| (*o, n.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}
