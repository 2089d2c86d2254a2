//! The way to the upstream: one or more instances of it (the primary and its
//! `[[upstream.fallback]]`s), each with its own client, breakers, `Retry-After`
//! pause, adaptive pace, budget and quotas (`target`); a request goes to the first
//! that may take it. Everything outlives a configuration reload unless its own
//! settings changed, so pools, buckets, pauses and counts are kept.

pub mod breaker;
pub mod budget;
pub mod client;
pub mod counters;
pub mod envelope;
pub mod health;
pub mod metrics;
pub mod pace;
pub mod pause;
pub mod quota;
pub mod target;
pub mod transport;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use governor::clock::Clock as _;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::logging::Throttle;
use budget::{Denied, Priority, RateClock, UpstreamBudget};
use client::{ClientError, FetchError, Fetched};
use counters::Counters;
pub use counters::UpstreamOutcome;
use health::Health;
use mdproxy_config::Config;
use mdproxy_fleet::limits::Announcement;
use mdproxy_fleet::{Fleet, FleetLimits, Permits};
use mdproxy_market::Clock;
use target::{Target, TargetReport, TargetSettings};

/// One request to the upstream.
#[derive(Clone, Copy, Debug)]
pub struct UpstreamRequest<'a> {
    /// Path and canonical query relative to `/api/v1`.
    pub target: &'a str,
    pub priority: Priority,
    /// A pass-through request: its 3xx and 4xx are answers, never failures.
    pub passthrough: bool,
    /// The catalogue's endpoint of `target` (the pass-through pseudo-endpoint for a
    /// path it does not know): its timeout, and the label of its latency. The
    /// caller that validated the request knows it; [`Upstream::fetch`] routes.
    pub endpoint: &'static mdproxy_api::catalog::Endpoint,
}

/// The instances of the upstream, shared by the read-through cache, the hub and
/// the scheduler. Cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    /// The primary, then the fallbacks, in the order they are tried.
    targets: ArcSwap<Vec<Arc<Target>>>,
    /// The fleet's budget (`[cluster]`; a single node's has none).
    permits: Arc<dyn Permits>,
    /// The fleet's pauses, pace and quotas (`[cluster]`; a single node's are its own).
    limits: Arc<dyn FleetLimits>,
    /// The fleet could not count the last request's quotas: this node counts its
    /// share, and checks a request against it before the budget too.
    quota_alone: AtomicBool,
    clock: RateClock,
    /// The wall clock quotas count days on.
    wall: Arc<dyn Clock>,
    /// What was asked and how it went (outlives reloads).
    counters: Arc<Counters>,
    /// What was last heard from the upstream, and readiness.
    health: Health,
    /// Repeated warnings (the upstream refusing our token) at most once a minute.
    warnings: Throttle,
    /// Cancelled when shutdown's grace has run out: requests still waiting for
    /// budget or for the upstream give up, so no task outlives the process's exit.
    halt: CancellationToken,
}

impl Upstream {
    /// The upstream instances of `config`, sharing budget,
    /// pauses, pace and quotas with `fleet` (`None`: a single node).
    ///
    /// # Errors
    /// When a client cannot be built (TLS backend, token not a header value).
    pub fn new(
        config: &Config,
        clock: RateClock,
        wall: Arc<dyn Clock>,
        fleet: Option<&Fleet>,
    ) -> Result<Upstream, ClientError> {
        let fleet = fleet.cloned().unwrap_or_default();
        let counters = Arc::new(Counters::default());
        let targets = TargetSettings::all(config)
            .into_iter()
            .map(|s| Target::new(s, &clock, Arc::clone(&wall), Arc::clone(&counters)).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Upstream {
            inner: Arc::new(Inner {
                targets: ArcSwap::from_pointee(targets),
                permits: Arc::clone(fleet.permits()),
                limits: Arc::clone(fleet.limits()),
                quota_alone: AtomicBool::new(false),
                clock,
                wall,
                counters,
                health: Health::default(),
                warnings: Throttle::new(Duration::from_secs(60)),
                halt: CancellationToken::new(),
            }),
        })
    }

    /// Applies `config`: a target is rebuilt only when its own settings changed (a
    /// new pool, new buckets, its pause and pace forgotten); the others are kept as
    /// they are.
    ///
    /// # Errors
    /// When a new client cannot be built; nothing is changed then.
    pub fn reconfigure(&self, config: &Config) -> Result<(), ClientError> {
        let current = self.inner.targets.load_full();
        let mut next = Vec::new();
        for settings in TargetSettings::all(config) {
            match current.iter().find(|t| t.settings == settings) {
                Some(kept) => next.push(Arc::clone(kept)),
                None => {
                    tracing::info!(upstream = %settings.label, "upstream settings changed: new pool, budget and breakers");
                    next.push(Arc::new(Target::new(
                        settings,
                        &self.inner.clock,
                        Arc::clone(&self.inner.wall),
                        Arc::clone(&self.inner.counters),
                    )?));
                }
            }
        }
        self.inner.targets.store(Arc::new(next));
        Ok(())
    }

    /// Ends every request still waiting for budget or for the upstream (shutdown,
    /// after the grace).
    pub fn halt(&self) {
        self.inner.halt.cancel();
    }

    /// Resolves once [`halt`](Self::halt) was called (background waits end with it).
    pub async fn halted(&self) {
        self.inner.halt.cancelled().await;
    }

    /// [`request`](Self::request) of a catalogue target.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn fetch(&self, target: &str, priority: Priority) -> Result<Fetched, FetchError> {
        self.request(UpstreamRequest {
            target,
            priority,
            passthrough: false,
            endpoint: endpoint_of(target),
        })
        .await
    }

    /// Sends `request` to the first instance that may take it: one that is not
    /// paused, whose breakers let it through and whose quota has room (then its
    /// budget, at its pace). A throttling answer pauses that instance, and a
    /// refusal, a throttling answer or an outage (unreachable, a 5xx) sends the
    /// request on to the next one; a client waits for budget at most
    /// `limits.client_wait_ms` over all of them. An instance's breaker probe goes out
    /// on its own when a later instance can answer, so no client waits on an
    /// instance that is likely still down. Every outcome, refusals included, is
    /// counted once, and every answer's latency is observed under the endpoint the
    /// target routes to.
    ///
    /// # Errors
    /// The answer's [`FetchError`], or the first instance's refusal when none took it.
    pub async fn request(&self, request: UpstreamRequest<'_>) -> Result<Fetched, FetchError> {
        let endpoint = request.endpoint;
        let targets = self.inner.targets.load_full();
        let wait = Duration::from_millis(targets[0].settings.budget.client_wait_ms);
        let deadline = tokio::time::Instant::now() + wait;
        // The first refusal (the primary's, when it refused) is what the client is
        // told if no instance takes the request.
        let mut outcome = None;
        for (i, target) in targets.iter().enumerate() {
            let passed = match target.admit(endpoint.id) {
                Ok(passed) => passed,
                Err(e) => {
                    target.count(e.outcome());
                    outcome.get_or_insert((Err(e), None));
                    continue;
                }
            };
            if passed.is_probe() && targets[i + 1..].iter().any(|t| t.is_available()) {
                self.probe(Arc::clone(target), passed, request);
                continue;
            }
            let tried = self.attempt(target, request, endpoint, deadline).await;
            let pushback = target.record(
                endpoint.id,
                passed,
                tried.result.as_ref().map(|f| f.elapsed),
                tried.sent,
            );
            let mut result = tried.result;
            if let (Err(FetchError::Throttled { retry_after, .. }), Some(paused)) =
                (&mut result, pushback.retry_in)
            {
                // The client is told when this instance may be asked again.
                *retry_after = Some(paused);
            }
            self.tell_fleet(target, pushback).await;
            target.count(match &result {
                Ok(_) => UpstreamOutcome::Ok,
                Err(e) => e.outcome(),
            });
            if result.as_ref().is_err_and(FetchError::is_for_the_next) {
                outcome.get_or_insert((result, tried.asked));
            } else {
                outcome = Some((result, tried.asked));
                break;
            }
        }
        let (result, asked) = outcome.unwrap_or((Err(FetchError::Unreachable), None));
        self.observe(request, endpoint.id, &result, asked);
        result
    }

    /// Sends the breaker probe of `target` on its own ([`Priority::Probe`]: budget
    /// at once or never), while the request it came with goes on to the next
    /// instance; its outcome closes or reopens the breaker.
    fn probe(&self, target: Arc<Target>, passed: target::Passed, request: UpstreamRequest<'_>) {
        let (this, path, passthrough, endpoint) = (
            self.clone(),
            request.target.to_owned(),
            request.passthrough,
            request.endpoint,
        );
        tokio::spawn(async move {
            let request = UpstreamRequest {
                target: &path,
                priority: Priority::Probe,
                passthrough,
                endpoint,
            };
            let tried = this
                .attempt(&target, request, endpoint, tokio::time::Instant::now())
                .await;
            let pushback = target.record(
                endpoint.id,
                passed,
                tried.result.as_ref().map(|f| f.elapsed),
                tried.sent,
            );
            this.tell_fleet(&target, pushback).await;
            target.count(match &tried.result {
                Ok(_) => UpstreamOutcome::Ok,
                Err(e) => e.outcome(),
            });
            tracing::info!(
                upstream = %target.settings.label,
                outcome = tried.result.as_ref().map_or_else(FetchError::as_str, |_| "ok"),
                "probe of an upstream instance whose breaker was open"
            );
            this.observe(request, endpoint.id, &tried.result, tried.asked);
        });
    }

    /// Counts and logs the outcome of a request.
    fn observe(
        &self,
        request: UpstreamRequest<'_>,
        endpoint: usize,
        result: &Result<Fetched, FetchError>,
        asked: Option<Duration>,
    ) {
        let (counters, health) = (&self.inner.counters, &self.inner.health);
        match result {
            Ok(fetched) => {
                counters.count(UpstreamOutcome::Ok);
                counters.answered(endpoint, fetched.elapsed);
                health.answered(None);
                tracing::info!(
                    key = %request.target,
                    priority = request.priority.as_str(),
                    upstream_ms = fetched.elapsed.as_millis() as u64,
                    bytes = fetched.body.len(),
                    "upstream fetch"
                );
            }
            Err(e) => {
                let outcome = e.outcome();
                counters.count(outcome);
                match (asked, e) {
                    // Not asked: the budget, the breaker, the pause or a quota said no.
                    (None, _) => {}
                    // An answer: the upstream is there (a 404 or a 4xx is its
                    // business, not a failure of the upstream).
                    (Some(elapsed), FetchError::Answer { .. }) => {
                        counters.answered(endpoint, elapsed);
                        health.answered(None);
                    }
                    (Some(_), FetchError::Timeout | FetchError::Unreachable) => {
                        health.unanswered(outcome.as_str(), e.to_string());
                    }
                    (Some(elapsed), e) => {
                        counters.answered(endpoint, elapsed);
                        health.answered(Some((outcome.as_str(), e.to_string())));
                    }
                }
                if let FetchError::TokenRefused(status) = e
                    && let Some(held) = self.inner.warnings.admit(("upstream", "token"))
                {
                    tracing::error!(
                        status,
                        held_back = held,
                        "the upstream refused our token: check upstream.token (MDPROXY_UPSTREAM_TOKEN)"
                    );
                }
            }
        }
    }

    /// The quota, the budget at `target`'s pace (a client waits until `deadline`
    /// at most, and no longer once a pause begins), then the request; ended early by
    /// [`halt`](Self::halt).
    async fn attempt(
        &self,
        target: &Target,
        request: UpstreamRequest<'_>,
        endpoint: &mdproxy_api::catalog::Endpoint,
        deadline: tokio::time::Instant,
    ) -> Attempt {
        let timeout = target.client.config().timeout_for(endpoint);
        let (mut asked, mut sent) = (None, None);
        let result = {
            // Pinned where it is made: the select below moves a reference, not the
            // future (a move is a copy of its whole state).
            let attempt = std::pin::pin!(async {
                target.check_quota(request.priority, self.quota_share())?;
                match self.permit_now(target, request.priority) {
                    Some(granted) => granted?,
                    // Boxed: a wait's state would otherwise weigh on every request's
                    // future, and be copied with it.
                    None => {
                        Box::pin(self.wait_for_permit(target, request.priority, deadline)).await?
                    }
                }
                // A pause that began as the permit was granted.
                if let Some(remaining) = target.paused() {
                    return Err(FetchError::Paused { remaining });
                }
                self.take_quota(target, request.priority).await?;
                sent = Some(self.inner.clock.now().as_u64());
                let started = Instant::now();
                // Its context goes upstream as `traceparent` (see `client.rs`).
                let span = crate::telemetry::upstream_span(
                    &target.client.config().base_url,
                    request.target,
                );
                let result = target
                    .client
                    .fetch(request.target, timeout, request.passthrough)
                    .instrument(span.clone())
                    .await;
                crate::telemetry::record_error(
                    &span,
                    result.as_ref().err().map(FetchError::as_str),
                );
                asked = Some(started.elapsed());
                result
            });
            tokio::select! {
                biased;
                result = attempt => result,
                () = self.inner.halt.cancelled() => Err(FetchError::Unreachable),
            }
        };
        Attempt {
            result,
            asked,
            sent,
        }
    }

    /// A permit decided at once: a single node's budget has one at hand, or says
    /// no at once (a probe, a background refresh). `None`: the request waits for one
    /// ([`wait_for_permit`](Self::wait_for_permit)), as it always does in a fleet.
    fn permit_now(&self, target: &Target, priority: Priority) -> Option<Result<(), Denied>> {
        if self.inner.permits.is_shared() {
            return None;
        }
        let decided = target.budget().try_acquire(priority)?;
        // The budget wait's span, of no length: a trace shows every request's.
        drop(crate::telemetry::budget_span(priority.as_str()));
        Some(decided)
    }

    /// Waits for a permit (a client until `deadline` at most), and no longer once a
    /// pause begins: the pause's error then.
    async fn wait_for_permit(
        &self,
        target: &Target,
        priority: Priority,
        deadline: tokio::time::Instant,
    ) -> Result<(), FetchError> {
        let permit = async {
            match priority {
                Priority::Client => {
                    tokio::time::timeout_at(deadline, self.permit(target, priority))
                        .await
                        .unwrap_or(Err(Denied::Overloaded))
                }
                Priority::Background | Priority::Prewarm | Priority::Probe => {
                    self.permit(target, priority).await
                }
            }
        }
        .instrument(crate::telemetry::budget_span(priority.as_str()));
        let mut permit = std::pin::pin!(permit);
        // Made before the wait, so that no pause slips in between.
        let mut begun = std::pin::pin!(target.pause_begun());
        loop {
            // Biased: the permit is looked at first, so that a permit at hand
            // never registers for the pause's wake (the caller's look after the
            // wait catches a pause that began as it was granted), and no branch
            // order is drawn at random.
            tokio::select! {
                biased;
                granted = &mut permit => return Ok(granted?),
                () = &mut begun => {}
            }
            // The next one before the look below: a pause that begins after the
            // look wakes the next round.
            begun.set(target.pause_begun());
            // A pause that began while this request waited for budget (here, or
            // announced by another node): it does not go out now. One already
            // over by the time this request looks still leaves it without a
            // permit: it waits on for one.
            if let Some(remaining) = target.paused() {
                return Err(FetchError::Paused { remaining });
            }
        }
    }

    /// One permit: from the fleet's budget when this node is in a cluster whose
    /// Redis answers, else from the target's own budget (at its pace) divided by
    /// the nodes last seen.
    async fn permit(&self, target: &Target, priority: Priority) -> Result<(), Denied> {
        // Waiting on the budget of the pace at the time; when the pace replaces it,
        // on the new one.
        loop {
            let rebuilt = target.budget_rebuilt();
            let budget = target.budget();
            // Biased, as in `attempt`: a permit at hand never registers for the
            // pace's change.
            tokio::select! {
                biased;
                granted = self.permit_from(&budget, target, priority) => return granted,
                () = rebuilt => {}
            }
        }
    }

    /// One permit from `budget` (`target`'s at its pace now), as
    /// [`permit`](Self::permit) says.
    async fn permit_from(
        &self,
        budget: &UpstreamBudget,
        target: &Target,
        priority: Priority,
    ) -> Result<(), Denied> {
        let permits = &*self.inner.permits;
        let bucket = &target.settings.label;
        if let Ok(granted) = budget.acquire_shared(permits, bucket, priority).await {
            return granted;
        }
        let nodes = permits.nodes();
        if nodes <= 1 {
            return budget.acquire(priority).await;
        }
        target.alone_budget(nodes).acquire(priority).await
    }

    /// One request from `target`'s quotas: counted for the fleet when it can be
    /// asked, else by this node, from the fleet's last count, within its share of
    /// what was left then (the nodes last seen; 1 for a node without a fleet).
    async fn take_quota(&self, target: &Target, priority: Priority) -> Result<(), FetchError> {
        if let Some(ask) = target.quota_ask(priority) {
            let label = &target.settings.label;
            if let Ok(count) = self.inner.limits.take_quota(label, ask.clone()).await {
                self.inner.quota_alone.store(false, Ordering::Relaxed);
                return target.settle_quota(&ask, count);
            }
            self.inner.quota_alone.store(true, Ordering::Relaxed);
        }
        target.take_quota(priority, self.inner.permits.nodes())
    }

    /// The share of the quotas this node checks a request against before the
    /// budget: all of them while the fleet counts (its answer decides), its
    /// `nodes`th while it counts alone, as [`take_quota`](Self::take_quota) will.
    fn quota_share(&self) -> u64 {
        if self.inner.quota_alone.load(Ordering::Relaxed) {
            self.inner.permits.nodes()
        } else {
            1
        }
    }

    /// Tells the fleet what `target` just learnt: a pause it was asked for, a
    /// lower rate it chose (a single node's fleet hears nothing).
    async fn tell_fleet(&self, target: &Target, pushback: target::Pushback) {
        let label = &target.settings.label;
        if let Some(wait) = pushback.paused {
            self.inner.limits.pause(label, wait).await;
        }
        if let Some((rate, reason)) = pushback.slowed {
            self.inner.limits.slow_down(label, rate, &reason).await;
        }
    }

    /// Takes in what another node announced: its pause, its lower rate.
    pub fn hear(&self, announcement: &Announcement) {
        let targets = self.inner.targets.load();
        let label = match announcement {
            Announcement::Pause { target, .. } | Announcement::SlowDown { target, .. } => target,
        };
        if let Some(target) = targets.iter().find(|t| t.settings.label == *label) {
            target.follow(announcement);
        }
    }

    /// Whether the primary's upstream-wide breaker is open now.
    pub fn breaker_open(&self) -> bool {
        self.inner.targets.load()[0].report().breaker_open
    }

    /// How long the upstream may take to answer `endpoint` (`[upstream]`'s
    /// timeouts as they stand now).
    pub fn timeout_for(&self, endpoint: &mdproxy_api::catalog::Endpoint) -> Duration {
        self.inner.targets.load()[0]
            .client
            .config()
            .timeout_for(endpoint)
    }

    /// Whether every instance is paused by a `Retry-After` now (a refresh would
    /// not go out).
    pub fn is_paused(&self) -> bool {
        self.inner
            .targets
            .load()
            .iter()
            .all(|t| t.paused().is_some())
    }

    /// Whether every instance's day quota is so low that a stale answer is better
    /// than a refresh.
    pub fn is_thrifty(&self) -> bool {
        let nodes = self.quota_share();
        self.inner
            .targets
            .load()
            .iter()
            .all(|t| t.is_thrifty(nodes))
    }

    /// How long until some instance may be asked again, when none may now (all
    /// paused): what a poll loop waits before its next try.
    pub fn paused_for(&self) -> Option<Duration> {
        self.report()
            .iter()
            .map(|r| r.paused_for)
            .collect::<Option<Vec<_>>>()
            .and_then(|waits| waits.into_iter().min())
    }

    /// What was asked of the upstream and how it went.
    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// What was last heard from the upstream, and the readiness it decides.
    pub fn health(&self) -> &Health {
        &self.inner.health
    }

    /// Requests per second allowed to this node (`limits.upstream_rps` of the
    /// primary; 0: no budget).
    pub fn budget_rps(&self) -> u32 {
        self.inner.targets.load()[0].settings.budget.upstream_rps
    }

    /// Where every instance stands.
    pub fn report(&self) -> Vec<TargetReport> {
        self.inner
            .targets
            .load()
            .iter()
            .map(|t| t.report())
            .collect()
    }
}

/// One instance's try at a request.
struct Attempt {
    result: Result<Fetched, FetchError>,
    /// How long the upstream itself took, when it was asked.
    asked: Option<Duration>,
    /// When the request left (rate-clock nanoseconds), when it did.
    sent: Option<u64>,
}

/// The catalogue's endpoint for an upstream target (the pass-through pseudo-endpoint
/// for a path it does not know), for its timeout and to label upstream latency.
fn endpoint_of(target: &str) -> &'static mdproxy_api::catalog::Endpoint {
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    mdproxy_api::router()
        .route(path)
        .map_or(mdproxy_api::catalog::catalog().passthrough(), |r| {
            r.endpoint
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdproxy_market::SystemClock;

    fn upstream(config: &Config) -> Upstream {
        Upstream::new(config, RateClock::tokio(), Arc::new(SystemClock), None).unwrap()
    }

    /// A fallback on loopback with its own rate (and burst).
    fn fallback(rps: u32, burst: Option<u32>) -> mdproxy_config::FallbackConfig {
        mdproxy_config::FallbackConfig {
            base_url: "http://127.0.0.1:2/api/v1".into(),
            token: mdproxy_config::Secret::new("f"),
            upstream_rps: Some(rps),
            upstream_burst: burst,
            upstream_per_minute: None,
            upstream_per_day: None,
        }
    }

    /// While the fleet cannot be asked, each instance has its own share: a
    /// `nodes`th of its pace (a quarter of one request a second on four nodes, not
    /// one each), empty when built, and not rebuilt (full) when requests switch
    /// between instances whose settings differ.
    #[tokio::test(start_paused = true)]
    async fn alone_each_instance_keeps_its_own_share_of_its_pace() {
        let mut config = Config::default();
        config.upstream.base_url = "http://127.0.0.1:1/api/v1".into();
        config.limits.upstream_rps = 1;
        config.limits.upstream_burst = 1;
        config.upstream.fallback.push(fallback(8, Some(8)));
        let up = upstream(&config);
        let targets = up.inner.targets.load();
        let (primary, fallback) = (&targets[0], &targets[1]);
        let share = primary.alone_budget(4);
        assert!((share.rate() - 0.25).abs() < 1e-9, "{}", share.rate());
        assert_eq!(
            share.acquire(Priority::Probe).await,
            Err(Denied::Overloaded),
            "empty when built"
        );
        assert_eq!(fallback.alone_budget(4).settings().upstream_rps, 2);
        assert!(
            Arc::ptr_eq(&share, &primary.alone_budget(4)),
            "not rebuilt after the fallback's"
        );
    }

    /// Defect: a reload dropped the connection pool and refilled the budget. Only a
    /// change of a target's own settings rebuilds it.
    #[test]
    fn reconfigure_rebuilds_only_what_changed() {
        let mut config = Config::default();
        config.upstream.base_url = "http://127.0.0.1:1/api/v1".into();
        let up = upstream(&config);
        let before = Arc::clone(&up.inner.targets.load()[0]);
        config.freshness.negative_secs += 1;
        config.limits.client_rps += 1;
        up.reconfigure(&config).unwrap();
        assert!(Arc::ptr_eq(&before, &up.inner.targets.load()[0]), "kept");
        config.upstream.timeout_ms += 1;
        up.reconfigure(&config).unwrap();
        assert!(!Arc::ptr_eq(&before, &up.inner.targets.load()[0]));
        config.upstream.fallback.push(fallback(1, None));
        let primary = Arc::clone(&up.inner.targets.load()[0]);
        up.reconfigure(&config).unwrap();
        let targets = up.inner.targets.load();
        assert_eq!(targets.len(), 2);
        assert!(
            Arc::ptr_eq(&primary, &targets[0]),
            "a new fallback keeps the primary"
        );
        assert_eq!(targets[1].settings.label, "fallback-1");
        assert_eq!(targets[1].settings.budget.upstream_rps, 1);
    }
}
