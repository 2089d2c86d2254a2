//! The way to the upstream: the pooled client and the budget every request passes.
//! Both outlive a configuration reload (a reload rebuilds one only when its own
//! settings changed), so the connection pool and the rate buckets are kept.

pub mod breaker;
pub mod budget;
pub mod client;
pub mod envelope;
pub mod trace;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::logging::Throttle;
use crate::stats::{Stats, UpstreamOutcome};
use breaker::{Breaker, BreakerSettings, Verdict};
use budget::{BudgetSettings, Denied, Priority, RateClock, UpstreamBudget};
use client::{FetchError, Fetched, UpstreamClient};

/// The client and the budget, shared by the read-through cache, the hub and the
/// scheduler. Cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    client: ArcSwap<UpstreamClient>,
    budget: ArcSwap<UpstreamBudget>,
    breaker: ArcSwap<Breaker>,
    /// The cluster whose budget this node shares (`[cluster]`), if any.
    cluster: Option<Cluster>,
    /// This node's share of the cluster's budget while Redis is away.
    alone: ArcSwap<UpstreamBudget>,
    clock: RateClock,
    stats: Arc<Stats>,
    /// Repeated warnings (the upstream refusing our token) at most once a minute.
    warnings: Throttle,
    /// Cancelled when shutdown's grace has run out: requests still waiting for
    /// budget or for the upstream give up, so no task outlives the process's exit.
    halt: CancellationToken,
}

impl Upstream {
    /// The client and budget of `config`, counting into `stats`.
    ///
    /// # Errors
    /// When the client cannot be built (TLS backend, token not a header value).
    pub fn new(
        config: &Config,
        clock: RateClock,
        stats: Arc<Stats>,
        cluster: Option<Cluster>,
    ) -> Result<Upstream, String> {
        let client = UpstreamClient::new(&config.upstream)?;
        let budget = UpstreamBudget::new(
            BudgetSettings::from(&config.limits),
            clock.clone(),
            Arc::clone(&stats),
        );
        let breaker = Breaker::new(breaker_settings(config), clock.clone());
        let alone = UpstreamBudget::new(
            BudgetSettings::from(&config.limits),
            clock.clone(),
            Arc::clone(&stats),
        );
        Ok(Upstream {
            inner: Arc::new(Inner {
                client: ArcSwap::from_pointee(client),
                budget: ArcSwap::from_pointee(budget),
                breaker: ArcSwap::from_pointee(breaker),
                cluster,
                alone: ArcSwap::from_pointee(alone),
                clock,
                stats,
                warnings: Throttle::new(Duration::from_secs(60)),
                halt: CancellationToken::new(),
            }),
        })
    }

    /// Applies `config`: the client is rebuilt only when `[upstream]` changed, the
    /// budget only when its limits changed; otherwise both are kept as they are.
    ///
    /// # Errors
    /// When a new client cannot be built; nothing is changed then.
    pub fn reconfigure(&self, config: &Config) -> Result<(), String> {
        let client = if *self.inner.client.load().config() == config.upstream {
            None
        } else {
            Some(UpstreamClient::new(&config.upstream)?)
        };
        if let Some(client) = client {
            self.inner.client.store(Arc::new(client));
            tracing::info!("upstream settings changed: new connection pool");
        }
        let settings = BudgetSettings::from(&config.limits);
        if self.inner.budget.load().settings() != settings {
            self.inner.budget.store(Arc::new(UpstreamBudget::new(
                settings,
                self.inner.clock.clone(),
                Arc::clone(&self.inner.stats),
            )));
            tracing::info!("upstream budget changed: new rate buckets");
        }
        let settings = breaker_settings(config);
        if self.inner.breaker.load().settings() != settings {
            let breaker = Breaker::new(settings, self.inner.clock.clone());
            self.inner.breaker.store(Arc::new(breaker));
        }
        Ok(())
    }

    /// Ends every request still waiting for budget or for the upstream (shutdown,
    /// after the grace).
    pub fn halt(&self) {
        self.inner.halt.cancel();
    }

    /// Passes the circuit breaker, takes budget at `priority`, then GETs `target`;
    /// every outcome, refusals included, is counted once, and every answer's latency
    /// is observed under the endpoint `target` routes to.
    ///
    /// # Errors
    /// A budget refusal or the fetch's [`FetchError`].
    pub async fn fetch(&self, target: &str, priority: Priority) -> Result<Fetched, FetchError> {
        let breaker = self.inner.breaker.load_full();
        let (result, asked) = match breaker.admit() {
            Ok(admitted) => {
                let (result, asked) = self.attempt(target, priority).await;
                let verdict = match &result {
                    Ok(_) => Verdict::Up,
                    Err(e) => e.verdict(),
                };
                if let Some(interval) = breaker.record(admitted, verdict) {
                    tracing::warn!(
                        open_ms = interval.as_millis() as u64,
                        "upstream failing: circuit breaker opened"
                    );
                }
                (result, asked)
            }
            Err(open) => (
                Err(FetchError::CircuitOpen {
                    remaining_ms: open.remaining.as_millis() as u64,
                }),
                None,
            ),
        };
        let stats = &self.inner.stats;
        match &result {
            Ok(fetched) => {
                stats.upstream(UpstreamOutcome::Ok);
                stats.upstream_answered(endpoint_of(target).id, fetched.elapsed, None);
                tracing::info!(
                    key = %target,
                    priority = priority.as_str(),
                    upstream_ms = fetched.elapsed.as_millis() as u64,
                    bytes = fetched.body.len(),
                    "upstream fetch"
                );
            }
            Err(e) => {
                let outcome = e.outcome();
                stats.upstream(outcome);
                match (asked, e) {
                    // Not asked: the budget or the breaker said no.
                    (None, _) => {}
                    // An answer: the upstream is there (a 404 or a 4xx is its
                    // business, not a failure of the upstream).
                    (Some(elapsed), FetchError::Answer { .. }) => {
                        stats.upstream_answered(endpoint_of(target).id, elapsed, None);
                    }
                    (Some(_), FetchError::Timeout | FetchError::Unreachable) => {
                        stats.upstream_unanswered(outcome.as_str(), e.to_string());
                    }
                    (Some(elapsed), e) => stats.upstream_answered(
                        endpoint_of(target).id,
                        elapsed,
                        Some((outcome.as_str(), e.to_string())),
                    ),
                }
                if let FetchError::TokenRefused(status) = e {
                    if let Some(held) = self.inner.warnings.admit(("upstream", "token")) {
                        tracing::error!(
                            status,
                            held_back = held,
                            "the upstream refused our token: check upstream.token (MDPROXY_UPSTREAM_TOKEN)"
                        );
                    }
                }
            }
        }
        result
    }

    /// Budget, then the request; ended early by [`halt`](Self::halt). Also returns
    /// how long the upstream itself took, when it was asked.
    async fn attempt(
        &self,
        target: &str,
        priority: Priority,
    ) -> (Result<Fetched, FetchError>, Option<Duration>) {
        let client = self.inner.client.load_full();
        let timeout = client.config().timeout_for(endpoint_of(target));
        let mut asked = None;
        let attempt = async {
            self.permit(priority).await?;
            let started = Instant::now();
            let result = client.fetch(target, timeout).await;
            asked = Some(started.elapsed());
            result
        };
        let result = tokio::select! {
            result = attempt => result,
            () = self.inner.halt.cancelled() => Err(FetchError::Unreachable),
        };
        (result, asked)
    }

    /// One permit: from the cluster's budget when this node is in a cluster whose
    /// Redis answers, else from this node's share of it, else from its own budget.
    async fn permit(&self, priority: Priority) -> Result<(), Denied> {
        let budget = self.inner.budget.load_full();
        let Some(cluster) = &self.inner.cluster else {
            return budget.acquire(priority).await;
        };
        if let Ok(granted) = budget.acquire_shared(cluster, priority).await {
            return granted;
        }
        let share = budget.settings().divided(cluster.nodes());
        let mut alone = self.inner.alone.load_full();
        if alone.settings() != share {
            let rebuilt = UpstreamBudget::new(
                share,
                self.inner.clock.clone(),
                Arc::clone(&self.inner.stats),
            );
            self.inner.alone.store(Arc::new(rebuilt));
            alone = self.inner.alone.load_full();
        }
        alone.acquire(priority).await
    }

    /// How long the upstream may take to answer `endpoint` (`[upstream]`'s
    /// timeouts as they stand now).
    pub fn timeout_for(&self, endpoint: &crate::api::catalog::Endpoint) -> Duration {
        self.inner.client.load().config().timeout_for(endpoint)
    }

    /// Whether the circuit breaker is open now.
    pub fn breaker_open(&self) -> bool {
        self.inner.breaker.load().is_open()
    }
}

/// The catalogue's endpoint for an upstream target (the pass-through pseudo-endpoint
/// for a path it does not know), for its timeout and to label upstream latency.
fn endpoint_of(target: &str) -> &'static crate::api::catalog::Endpoint {
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    crate::api::router()
        .route(path)
        .map_or(crate::api::catalog::catalog().passthrough(), |r| r.endpoint)
}

/// The breaker settings of `[upstream]`.
fn breaker_settings(config: &Config) -> BreakerSettings {
    BreakerSettings {
        failures: config.upstream.breaker_failures,
        open: std::time::Duration::from_millis(config.upstream.breaker_open_ms),
        max_open: std::time::Duration::from_millis(config.upstream.breaker_max_open_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defect: a reload dropped the connection pool and refilled the budget. Only a
    /// change of their own settings rebuilds the client or the budget.
    #[test]
    fn reconfigure_rebuilds_only_what_changed() {
        let mut config = Config::default();
        let up = Upstream::new(
            &config,
            RateClock::tokio(),
            Arc::new(Stats::default()),
            None,
        )
        .unwrap();
        let (client, budget) = (up.inner.client.load_full(), up.inner.budget.load_full());
        config.freshness.negative_secs += 1;
        config.limits.client_rps += 1;
        up.reconfigure(&config).unwrap();
        assert!(
            Arc::ptr_eq(&client, &up.inner.client.load_full()),
            "pool kept"
        );
        assert!(
            Arc::ptr_eq(&budget, &up.inner.budget.load_full()),
            "buckets kept"
        );
        config.upstream.timeout_ms += 1;
        config.limits.upstream_rps += 1;
        up.reconfigure(&config).unwrap();
        assert!(!Arc::ptr_eq(&client, &up.inner.client.load_full()));
        assert!(!Arc::ptr_eq(&budget, &up.inner.budget.load_full()));
    }
}
