//! The way to the upstream: the pooled client and the budget every request passes.
//! Both outlive a configuration reload (a reload rebuilds one only when its own
//! settings changed), so the connection pool and the rate buckets are kept.

pub mod budget;
pub mod client;

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::Config;
use crate::stats::{Stats, UpstreamOutcome};
use budget::{BudgetSettings, Priority, RateClock, UpstreamBudget};
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
    clock: RateClock,
    stats: Arc<Stats>,
}

impl Upstream {
    /// The client and budget of `config`, counting into `stats`.
    ///
    /// # Errors
    /// When the client cannot be built (TLS backend, token not a header value).
    pub fn new(config: &Config, clock: RateClock, stats: Arc<Stats>) -> Result<Upstream, String> {
        let client = UpstreamClient::new(&config.upstream)?;
        let budget = UpstreamBudget::new(
            BudgetSettings::from(&config.limits),
            clock.clone(),
            Arc::clone(&stats),
        );
        Ok(Upstream {
            inner: Arc::new(Inner {
                client: ArcSwap::from_pointee(client),
                budget: ArcSwap::from_pointee(budget),
                clock,
                stats,
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
        Ok(())
    }

    /// Takes budget at `priority`, then GETs `target`; every outcome, refusals
    /// included, is counted once.
    ///
    /// # Errors
    /// A budget refusal or the fetch's [`FetchError`].
    pub async fn fetch(&self, target: &str, priority: Priority) -> Result<Fetched, FetchError> {
        let budget = self.inner.budget.load_full();
        let result = match budget.acquire(priority).await {
            Ok(()) => self.inner.client.load_full().fetch(target).await,
            Err(denied) => Err(FetchError::from(denied)),
        };
        match &result {
            Ok(fetched) => {
                self.inner.stats.upstream(UpstreamOutcome::Ok);
                tracing::info!(
                    target = %target,
                    priority = priority.as_str(),
                    upstream_ms = fetched.elapsed.as_millis() as u64,
                    bytes = fetched.body.len(),
                    "upstream fetch"
                );
            }
            Err(e) => self.inner.stats.upstream(e.outcome()),
        }
        result
    }
}
