//! What the rest of mdproxy holds of the other nodes: [`Fleet`], one of each narrow
//! face (the shared store, the fill lock, the upstream budget, the upstream's
//! pushback, job claims, the hub's leadership, agents' sessions), the cluster's parts when `[cluster]`
//! is on, and otherwise the single node's versions ([`Alone`]), the defaults.
//! Nothing here knows Redis.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::broadcast;

use super::agents::AgentSessions;
use super::jobs::JobClaims;
use super::leader::Leadership;
use super::limits::{Announcement, FleetLimits, QuotaAsk, QuotaCount};
use super::link::Unavailable;
use super::lock::{FillLock, Lease, Waiter};
use super::member::Cluster;
use super::permits::Permits;
use super::store::SharedStore;

/// A single node: nothing is shared. The store is never up, this node holds every
/// fill lease, runs every job, leads its own hub, and its budget and quotas are
/// its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct Alone;

#[async_trait]
impl SharedStore for Alone {
    fn is_up(&self) -> bool {
        false
    }
    fn max_body(&self) -> usize {
        0
    }
    async fn get(&self, _key: &str) -> Result<Option<Bytes>, Unavailable> {
        Err(Unavailable)
    }
    async fn put(&self, _key: &str, _value: Bytes, _ttl: Duration) {}
    async fn purge(&self, _key: &str, _message: &str) {}
    async fn purge_matching(
        &self,
        _prefixes: &[&str],
        _matches: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
        _message: &str,
    ) {
    }
    fn invalidations(&self) -> broadcast::Receiver<String> {
        broadcast::channel(1).1
    }
}

#[async_trait]
impl FillLock for Alone {
    fn waiter(&self, _key: &str) -> Waiter {
        Waiter::unregistered()
    }
    async fn try_lock(&self, _key: &str, _lease: Duration) -> Result<Option<Lease>, Unavailable> {
        Ok(Some(Lease::own()))
    }
    async fn release(&self, _lease: Lease) {}
    async fn announce(&self, _key: &str) {}
}

#[async_trait]
impl Permits for Alone {
    fn nodes(&self) -> u64 {
        1
    }
    fn is_shared(&self) -> bool {
        false
    }
    async fn take_permit(
        &self,
        _bucket: &str,
        _interval: Duration,
        _tolerance: Duration,
    ) -> Result<Duration, Unavailable> {
        Err(Unavailable)
    }
}

#[async_trait]
impl FleetLimits for Alone {
    async fn pause(&self, _target: &str, _wait: Duration) {}
    async fn slow_down(&self, _target: &str, _rate: f64, _reason: &str) {}
    async fn take_quota(&self, _target: &str, _ask: QuotaAsk) -> Result<QuotaCount, Unavailable> {
        Err(Unavailable)
    }
    fn announcements(&self) -> broadcast::Receiver<Announcement> {
        broadcast::channel(1).1
    }
}

#[async_trait]
impl JobClaims for Alone {
    async fn claim(&self, _job: &str, _slot: i64) -> Result<bool, Unavailable> {
        Ok(true)
    }
}

#[async_trait]
impl Leadership for Alone {
    fn is_up(&self) -> bool {
        false
    }
    async fn register_codes(&self, _codes: &[String], _ttl: Duration) {}
    async fn lead_hub(&self, _lease: Duration) -> Result<Option<u64>, Unavailable> {
        Ok(Some(1))
    }
    async fn step_down(&self) {}
    async fn all_codes(&self) -> Result<Vec<String>, Unavailable> {
        Err(Unavailable)
    }
    async fn publish_board(&self, _term: u64, _rows: &HashMap<String, Bytes>) {}
    fn latest_board(&self) -> Arc<HashMap<String, Bytes>> {
        Arc::default()
    }
    async fn board_arrived(&self) {
        std::future::pending().await
    }
}

#[async_trait]
impl AgentSessions for Alone {
    fn is_shared(&self) -> bool {
        false
    }
    async fn load(&self, _id: &str) -> Result<Option<Bytes>, Unavailable> {
        Ok(None)
    }
    async fn keep(&self, _id: &str, _state: Bytes) -> Result<(), Unavailable> {
        Ok(())
    }
    async fn forget(&self, _id: &str) -> Result<(), Unavailable> {
        Ok(())
    }
    async fn owner(&self, _id: &str) -> Result<Option<Bytes>, Unavailable> {
        Ok(None)
    }
    async fn keep_owner(&self, _id: &str, _digest: Bytes) -> Result<(), Unavailable> {
        Ok(())
    }
}

/// One of each face: the cluster's when `[cluster]` is on, [`Alone`]'s otherwise.
/// Cheap to clone.
#[derive(Clone)]
pub struct Fleet {
    cluster: Option<Cluster>,
    store: Arc<dyn SharedStore>,
    lock: Arc<dyn FillLock>,
    permits: Arc<dyn Permits>,
    limits: Arc<dyn FleetLimits>,
    jobs: Arc<dyn JobClaims>,
    leadership: Arc<dyn Leadership>,
    agents: Arc<dyn AgentSessions>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::alone()
    }
}

impl Fleet {
    /// A single node's.
    pub fn alone() -> Fleet {
        Fleet {
            cluster: None,
            store: Arc::new(Alone),
            lock: Arc::new(Alone),
            permits: Arc::new(Alone),
            limits: Arc::new(Alone),
            jobs: Arc::new(Alone),
            leadership: Arc::new(Alone),
            agents: Arc::new(Alone),
        }
    }

    /// `cluster`'s (or a single node's, without one).
    pub fn of(cluster: Option<Cluster>) -> Fleet {
        let Some(cluster) = cluster else {
            return Fleet::alone();
        };
        Fleet {
            store: cluster.store.clone(),
            lock: cluster.lock.clone(),
            permits: cluster.permits.clone(),
            limits: cluster.limits.clone(),
            jobs: cluster.jobs.clone(),
            leadership: cluster.leadership.clone(),
            agents: cluster.agents.clone(),
            cluster: Some(cluster),
        }
    }

    /// The Redis link, for the status page, metrics and tests (`None` alone).
    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_ref()
    }

    /// The shared store of answers.
    pub fn store(&self) -> &Arc<dyn SharedStore> {
        &self.store
    }

    /// The fill lock.
    pub fn lock(&self) -> &Arc<dyn FillLock> {
        &self.lock
    }

    /// The upstream budget.
    pub fn permits(&self) -> &Arc<dyn Permits> {
        &self.permits
    }

    /// The upstream's pushback.
    pub fn limits(&self) -> &Arc<dyn FleetLimits> {
        &self.limits
    }

    /// Job claims.
    pub fn jobs(&self) -> &Arc<dyn JobClaims> {
        &self.jobs
    }

    /// The hub's leadership.
    pub fn leadership(&self) -> &Arc<dyn Leadership> {
        &self.leadership
    }

    /// AI agents' sessions.
    pub fn agents(&self) -> &Arc<dyn AgentSessions> {
        &self.agents
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A single node holds every lease, runs every job and leads its hub; it shares
    /// nothing and stays out of the fleet's budget.
    #[tokio::test]
    async fn a_single_node_owns_everything_and_shares_nothing() {
        let fleet = Fleet::alone();
        assert!(fleet.cluster().is_none());
        assert!(!fleet.store().is_up());
        assert_eq!(fleet.store().get("/k").await, Err(Unavailable));
        assert!(
            fleet
                .lock()
                .try_lock("/k", Duration::ZERO)
                .await
                .unwrap()
                .is_some()
        );
        assert!(!fleet.lock().waiter("/k").wait(Duration::ZERO).await);
        assert_eq!(fleet.jobs().claim("j", 1).await, Ok(true));
        assert_eq!(
            fleet.leadership().lead_hub(Duration::ZERO).await,
            Ok(Some(1))
        );
        assert_eq!(fleet.permits().nodes(), 1);
        assert_eq!(
            fleet
                .permits()
                .take_permit("primary", Duration::ZERO, Duration::ZERO)
                .await,
            Err(Unavailable)
        );
    }
}
