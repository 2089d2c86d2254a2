//! What the rest of mdproxy sees of the other nodes: one narrow trait per use (the
//! shared store, the fill lock, the upstream budget, the upstream's pushback, job
//! claims, the hub's leadership), each with a single node's version ([`Alone`]),
//! the default; [`Fleet`] holds one of each. Nothing here knows Redis.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::broadcast;

use super::limits::{Heard, QuotaAsk, QuotaCount};
use super::lock::{Lease, Waiter};
use super::{Cluster, Unavailable};

/// The shared second-level store of answers (bytes by key) and cluster-wide purges.
#[async_trait]
pub trait SharedStore: Send + Sync {
    /// Whether the other nodes can be reached now (false: every call is skipped
    /// or fails at once).
    fn is_up(&self) -> bool;

    /// Largest body shared; larger ones stay in the node's cache.
    fn max_body(&self) -> usize;

    /// The answer stored under `key`, if any.
    ///
    /// # Errors
    /// [`Unavailable`] when the store is away or slow.
    async fn get(&self, key: &str) -> Result<Option<Bytes>, Unavailable>;

    /// Stores `value` under `key` for `ttl` (unless larger than [`max_body`](Self::max_body)).
    async fn put(&self, key: &str, value: Bytes, ttl: Duration);

    /// Drops `key` from the store and tells every node (`message` is what their
    /// [`invalidations`](Self::invalidations) receive).
    async fn purge(&self, key: &str, message: &str);

    /// Drops every stored key that starts with `prefix` and that `matches` accepts,
    /// and tells every node (`message`, as [`purge`](Self::purge)).
    async fn purge_matching(
        &self,
        prefix: &str,
        matches: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
        message: &str,
    );

    /// Purges made anywhere (this node's too), as their messages.
    fn invalidations(&self) -> broadcast::Receiver<String>;
}

/// The right to fill a key for the whole fleet (one node per key asks the
/// upstream), and the word that a fill is over.
#[async_trait]
pub trait FillLock: Send + Sync {
    /// Registers interest in another node's fill of `key` (before asking for the
    /// lock, so an announcement in between is not missed).
    fn waiter(&self, key: &str) -> Waiter;

    /// Takes the right to fill `key` for `lease`: `Some` when this node is to ask
    /// the upstream, `None` when another node is asking.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn try_lock(&self, key: &str, lease: Duration) -> Result<Option<Lease>, Unavailable>;

    /// Gives a lease back (a lease that expired and went to another node is not
    /// touched).
    async fn release(&self, lease: Lease);

    /// Tells the nodes waiting for `key` that this node's fill is over.
    async fn announce(&self, key: &str);
}

/// One run of each scheduled job for the fleet.
#[async_trait]
pub trait JobClaims: Send + Sync {
    /// Claims the run of `job` that fired in `slot` (its second): `true` for the
    /// first node that asks, `false` for the others.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked (the node then runs it).
    async fn claim(&self, job: &str, slot: i64) -> Result<bool, Unavailable>;
}

/// The fleet's upstream budget.
#[async_trait]
pub trait Permits: Send + Sync {
    /// Nodes alive (this one included); a node alone takes this share of a budget.
    fn nodes(&self) -> u64;

    /// One permit from the fleet's bucket `bucket`: `interval` between permits,
    /// `tolerance` how far ahead of that schedule one may be taken (the burst).
    /// Zero when granted, else how long until one may be.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked (the node uses its own).
    async fn take_permit(
        &self,
        bucket: &str,
        interval: Duration,
        tolerance: Duration,
    ) -> Result<Duration, Unavailable>;
}

/// The upstream's pushback, shared by the fleet: a pause one node was asked for
/// (`Retry-After`), a lower rate one node chose, and the vendor quotas' counts.
#[async_trait]
pub trait FleetLimits: Send + Sync {
    /// Tells every node that `target` asked for a pause of `wait`.
    async fn pause(&self, target: &str, wait: Duration);

    /// Tells every node that `target`'s rate went down to `rate` (why: `reason`).
    async fn slow_down(&self, target: &str, rate: f64, reason: &str);

    /// Counts one request against `target`'s quotas for the fleet.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked (the node counts alone).
    async fn take_quota(&self, target: &str, ask: QuotaAsk) -> Result<QuotaCount, Unavailable>;

    /// What other nodes announced (pauses, slow-downs), as it arrives.
    fn announcements(&self) -> broadcast::Receiver<super::limits::Announcement>;
}

/// The hub's share of the fleet: every node registers the codes its subscribers
/// want; one node (the leader, by a renewed lease with a term) polls the union and
/// publishes each board; the others take the leader's boards.
#[async_trait]
pub trait Leadership: Send + Sync {
    /// Whether the other nodes can be reached now (false: the node polls alone).
    fn is_up(&self) -> bool;

    /// Registers this node's codes for `ttl` (a dead node's codes drop out).
    async fn register_codes(&self, codes: &[String], ttl: Duration);

    /// Takes or renews the leader lease for `lease`: `Some(term)` while this node
    /// leads, `None` while another does.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn lead_hub(&self, lease: Duration) -> Result<Option<u64>, Unavailable>;

    /// The union of the codes every live node registered.
    ///
    /// # Errors
    /// [`Unavailable`] when the fleet cannot be asked.
    async fn all_codes(&self) -> Result<Vec<String>, Unavailable>;

    /// Publishes the leader's board of `term` (rows by code).
    async fn publish_board(&self, term: u64, rows: &HashMap<String, Bytes>);

    /// The latest board a leader published (rows by code).
    fn latest_board(&self) -> Arc<HashMap<String, Bytes>>;

    /// Resolves when the next board arrives.
    async fn board_arrived(&self);
}

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
        _prefix: &str,
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
    fn announcements(&self) -> broadcast::Receiver<super::limits::Announcement> {
        Heard::default().announcements()
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
        }
    }

    /// `cluster`'s (or a single node's, without one).
    pub fn of(cluster: Option<Cluster>) -> Fleet {
        let Some(cluster) = cluster else {
            return Fleet::alone();
        };
        let shared = Arc::new(cluster.clone());
        Fleet {
            cluster: Some(cluster),
            store: shared.clone(),
            lock: shared.clone(),
            permits: shared.clone(),
            limits: shared.clone(),
            jobs: shared.clone(),
            leadership: shared,
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
