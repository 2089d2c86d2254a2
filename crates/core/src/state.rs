//! The state the edge, the hub and the operations share: the current configuration
//! snapshot (swapped whole on reload), and the parts that outlive every reload (the
//! read-through cache, the upstream client and budget, the fleet, the request
//! counters, the clock, the task tracker and the shutdown token). Built by `app`;
//! knows nothing of HTTP.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cache::disk::Disk;
use crate::cache::freshness::Policy;
use crate::cache::readthrough::{Filling, ReadThrough};
use crate::cache::store::Cache;
use crate::cache::tier::{DiskTier, SharedTier, Tier, Tiers};
use crate::stats::Requests;
use crate::upstream::Upstream;
use crate::upstream::budget::RateClock;
use crate::upstream::client::ClientError;
use mdproxy_config::Config;
use mdproxy_fleet::{Cluster, ClusterError, Fleet};
use mdproxy_market::Clock;

/// The file in the disk tier's directory that keeps where this node stands in the
/// fleet's purge log (docs/disk-tier.md, the directory's files).
const PURGE_MARK: &str = "purge-log-mark";

/// A configuration and the policy resolved from it; a request reads one snapshot.
#[derive(Debug)]
pub struct Snapshot {
    /// Increases with every applied reload.
    pub generation: u64,
    pub config: Arc<Config>,
    pub policy: Arc<Policy>,
}

impl Snapshot {
    fn new(config: Config, generation: u64) -> Snapshot {
        Snapshot {
            generation,
            policy: Arc::new(Policy::new(&config, generation)),
            config: Arc::new(config),
        }
    }
}

/// Why the shared state could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// `[cluster]` cannot be connected to.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// An upstream client could not be built.
    #[error(transparent)]
    Upstream(#[from] ClientError),
}

/// The shared state; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Shared>,
}

struct Shared {
    snapshot: ArcSwap<Snapshot>,
    cache: ReadThrough,
    upstream: Upstream,
    /// What this node shares with the others (`[cluster]`), or a single node's.
    fleet: Fleet,
    /// What the edge counts of every request.
    requests: Arc<Requests>,
    clock: Arc<dyn Clock>,
    /// Every background task (fills, refreshes, hub polls, jobs) runs on it; the
    /// application waits for it at shutdown.
    tracker: TaskTracker,
    /// Cancelled at shutdown: streams end, loops stop.
    stop: CancellationToken,
    /// The runtime the state was built on (the process's shared one), where the
    /// loops a request may start run, not on the serving thread it came on.
    shared: Option<Handle>,
}

impl AppState {
    /// The state for `config`: market time from `clock`, rate limits on
    /// `rate_clock`, tasks on `tracker`, stopped by `stop`, with `disk` (opened
    /// by the caller) under the memory cache.
    ///
    /// # Errors
    /// When `[cluster]` cannot be connected to or an upstream client cannot be built.
    pub fn new(
        config: Config,
        clock: Arc<dyn Clock>,
        rate_clock: RateClock,
        tracker: TaskTracker,
        stop: CancellationToken,
        disk: Option<Disk>,
    ) -> Result<AppState, StateError> {
        let cluster = if config.cluster.is_enabled() {
            // Kept beside the disk tier, which outlives the process: a restart
            // then reads the purges made while this node was down.
            let purge_mark = disk.as_ref().map(|d| d.path().join(PURGE_MARK));
            Some(Cluster::start(
                &config.cluster,
                &tracker,
                stop.clone(),
                purge_mark,
            )?)
        } else {
            None
        };
        let fleet = Fleet::of(cluster);
        let upstream = Upstream::new(&config, rate_clock, Arc::clone(&clock), Some(&fleet))?;
        // What a fill asks before the upstream: this node's disk, then the fleet.
        let mut tiers: Vec<Arc<dyn Tier>> = Vec::new();
        if let Some(disk) = &disk {
            tiers.push(Arc::new(DiskTier(disk.clone())));
        }
        let mut store = Cache::new(config.cache.max_bytes, tracker.clone());
        if let Some(disk) = disk {
            store = store.with_disk(disk);
        }
        if fleet.cluster().is_some() {
            tiers.push(Arc::new(SharedTier {
                store: Arc::clone(fleet.store()),
                lock: Arc::clone(fleet.lock()),
                purged: Arc::clone(store.purged()),
            }));
        }
        let filling = Filling {
            upstream: upstream.clone(),
            tiers: Tiers::new(tiers),
            shared: Arc::clone(fleet.store()),
            // Another node's fill outlives ours by at most the budget wait and the
            // upstream's timeout of its endpoint (added per fill).
            lease: Duration::from_millis(config.limits.client_wait_ms + 1_000),
            backoff: backoff(&config),
        };
        let cache = ReadThrough::new(store, filling, Arc::clone(&clock), tracker.clone());
        Ok(AppState {
            inner: Arc::new(Shared {
                snapshot: ArcSwap::from_pointee(Snapshot::new(config, 0)),
                cache,
                upstream,
                fleet,
                requests: Arc::default(),
                clock,
                tracker,
                stop,
                shared: Handle::try_current().ok(),
            }),
        })
    }

    /// Applies a new, already validated configuration: a new snapshot, and the
    /// upstream client or budget rebuilt only where their own settings changed.
    /// Connections, the cache, the counters and every rate bucket are kept. Returns
    /// the keys that only a restart can change.
    ///
    /// # Errors
    /// When a new upstream client cannot be built; the old config stays.
    pub fn reload(&self, config: Config) -> Result<Vec<&'static str>, ClientError> {
        let old = self.inner.snapshot.load_full();
        let needs_restart = old.config.restart_only_changes(&config);
        self.inner.upstream.reconfigure(&config)?;
        self.inner.cache.failures().set_backoff(backoff(&config));
        self.inner
            .snapshot
            .store(Arc::new(Snapshot::new(config, old.generation + 1)));
        Ok(needs_restart)
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.snapshot.load_full()
    }

    /// The current snapshot, borrowed: no reference count bounced between cores
    /// (the hit path uses it).
    pub fn load(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.inner.snapshot.load()
    }

    /// The read-through cache.
    pub fn cache(&self) -> &ReadThrough {
        &self.inner.cache
    }

    /// The upstream client and budget.
    pub fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }

    /// What this node shares with the others (a single node's faces without
    /// `[cluster]`).
    pub fn fleet(&self) -> &Fleet {
        &self.inner.fleet
    }

    /// The Redis link (`[cluster]`), for status pages and tests.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.inner.fleet.cluster()
    }

    /// What the edge counts of every request.
    pub fn requests(&self) -> &Arc<Requests> {
        &self.inner.requests
    }

    /// The market clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The tracker every background task is spawned on.
    pub fn tracker(&self) -> &TaskTracker {
        &self.inner.tracker
    }

    /// Runs `task` on the tracker and on the shared runtime, wherever it is called
    /// from: for a loop that serves every client (the hub's poll and fan-out), which
    /// a request on a serving thread may start, and which would otherwise hold
    /// that one thread ([`workers`](crate::workers)).
    pub fn spawn_shared<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let task = self.inner.tracker.track_future(task);
        match &self.inner.shared {
            Some(runtime) => runtime.spawn(task),
            None => tokio::spawn(task),
        }
    }

    /// The shutdown token.
    pub fn stop(&self) -> &CancellationToken {
        &self.inner.stop
    }
}

/// The backoff of a failing key (`limits.failure_backoff_*`).
fn backoff(config: &Config) -> crate::cache::failures::Backoff {
    crate::cache::failures::Backoff {
        base: Duration::from_millis(config.limits.failure_backoff_ms),
        max: Duration::from_millis(config.limits.failure_backoff_max_ms),
    }
}
