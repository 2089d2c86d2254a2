//! The state the edge, the hub and the operations share: the current configuration
//! snapshot (swapped whole on reload), and the parts that outlive every reload (the
//! read-through cache, the upstream client and budget, the counters, the clock, the
//! task tracker and the shutdown token). Built by `app`; knows nothing of HTTP.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cache::disk::Disk;
use crate::cache::freshness::Policy;
use crate::cache::purge::Purge;
use crate::cache::readthrough::ReadThrough;
use crate::cache::store::Cache;
use crate::stats::Stats;
use crate::upstream::Upstream;
use crate::upstream::budget::RateClock;
use mdproxy_config::Config;
use mdproxy_fleet::{Cluster, Fleet};
use mdproxy_market::Clock;

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
    stats: Arc<Stats>,
    clock: Arc<dyn Clock>,
    /// Every background task (fills, refreshes, hub polls, jobs) runs on it; the
    /// application waits for it at shutdown.
    tracker: TaskTracker,
    /// Cancelled at shutdown: streams end, loops stop.
    stop: CancellationToken,
}

impl AppState {
    /// The state for `config`: market time from `clock`, rate limits on
    /// `rate_clock`, tasks on `tracker`, stopped by `stop`, with `disk` (opened
    /// by the caller) under the memory cache.
    ///
    /// # Errors
    /// When the upstream client cannot be built.
    pub fn new(
        config: Config,
        clock: Arc<dyn Clock>,
        rate_clock: RateClock,
        tracker: TaskTracker,
        stop: CancellationToken,
        disk: Option<Disk>,
    ) -> Result<AppState, String> {
        let stats = Arc::new(Stats::default());
        let cluster = if !config.cluster.is_enabled() {
            None
        } else {
            Some(Cluster::start(&config.cluster, &tracker, stop.clone())?)
        };
        let fleet = Fleet::of(cluster);
        let upstream = Upstream::new(
            &config,
            rate_clock,
            Arc::clone(&clock),
            Arc::clone(&stats),
            Some(&fleet),
        )?;
        // Another node's fill outlives ours by at most the budget wait and the
        // upstream's timeout of its endpoint (added per fill).
        let lease = Duration::from_millis(config.limits.client_wait_ms + 1_000);
        let mut store = Cache::new(config.cache.max_bytes, tracker.clone());
        if let Some(disk) = disk {
            store = store.with_disk(disk);
        }
        let cache = ReadThrough::new(
            store,
            upstream.clone(),
            Arc::clone(&stats),
            Arc::clone(&clock),
            tracker.clone(),
            (&fleet, lease),
            backoff(&config),
        );
        if fleet.cluster().is_some() {
            // Purges made on any node drop the same keys here too.
            let (mut purged, cache, halt) =
                (fleet.store().invalidations(), cache.clone(), stop.clone());
            tracker.spawn(async move {
                loop {
                    tokio::select! {
                        message = purged.recv() => match message {
                            Ok(message) => {
                                if let Some(purge) = Purge::from_message(&message) {
                                    cache.forget(&purge).await;
                                }
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(_) => return,
                        },
                        () = halt.cancelled() => return,
                    }
                }
            });
            // Pauses and slow-downs of the upstream other nodes were told of.
            let (mut heard, upstream, stop) = (
                fleet.limits().announcements(),
                upstream.clone(),
                stop.clone(),
            );
            tracker.spawn(async move {
                loop {
                    tokio::select! {
                        announcement = heard.recv() => match announcement {
                            Ok(announcement) => upstream.hear(&announcement),
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                            Err(_) => return,
                        },
                        () = stop.cancelled() => return,
                    }
                }
            });
        }
        Ok(AppState {
            inner: Arc::new(Shared {
                snapshot: ArcSwap::from_pointee(Snapshot::new(config, 0)),
                cache,
                upstream,
                fleet,
                stats,
                clock,
                tracker,
                stop,
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
    pub fn reload(&self, config: Config) -> Result<Vec<&'static str>, String> {
        let old = self.inner.snapshot.load_full();
        let mut needs_restart = Vec::new();
        if config.server.listen != old.config.server.listen {
            needs_restart.push("server.listen");
        }
        let (new_server, old_server) = (&config.server, &old.config.server);
        let connections = |s: &mdproxy_config::ServerConfig| {
            (
                s.max_connections,
                s.max_connections_per_client_percent,
                s.header_read_timeout_ms,
                s.keep_alive,
                s.max_headers,
                s.max_header_bytes,
                s.h2_max_streams,
            )
        };
        if connections(new_server) != connections(old_server) {
            needs_restart.push("server connection limits");
        }
        if config.server.tls_cert.is_empty() != old.config.server.tls_cert.is_empty() {
            needs_restart.push("server.tls_cert (TLS on or off)");
        }
        if config.admin.listen != old.config.admin.listen {
            needs_restart.push("admin.listen");
        }
        if config.cache.max_bytes != old.config.cache.max_bytes {
            needs_restart.push("cache.max_bytes");
        }
        if (&config.cache.disk_path, config.cache.disk_bytes)
            != (&old.config.cache.disk_path, old.config.cache.disk_bytes)
        {
            needs_restart.push("cache.disk_path, cache.disk_bytes");
        }
        if config.cluster != old.config.cluster {
            needs_restart.push("cluster");
        }
        if config.scheduler != old.config.scheduler {
            needs_restart.push("scheduler");
        }
        if config.telemetry != old.config.telemetry {
            needs_restart.push("telemetry");
        }
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

    /// Every counter.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.inner.stats
    }

    /// The market clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The tracker every background task is spawned on.
    pub fn tracker(&self) -> &TaskTracker {
        &self.inner.tracker
    }

    /// The shutdown token.
    pub fn stop(&self) -> &CancellationToken {
        &self.inner.stop
    }

    /// Whether the proxy is ready for traffic, and why: once an upstream request has
    /// succeeded (the upstream is there and takes our token) or the cache holds
    /// entries (it can answer from them whatever the upstream does). Until then
    /// `/readyz` answers 503 with the reason, so a rollout does not send traffic to a
    /// node that can only answer errors.
    ///
    /// # Errors
    /// Why it is not ready, with the upstream's last failure when there is one.
    pub fn readiness(&self) -> Result<String, String> {
        let stats = self.stats();
        if stats.upstream_seen() {
            return Ok("the upstream answered".into());
        }
        let entries = self.cache().store().entry_count();
        if entries > 0 {
            return Ok(format!(
                "the cache holds {entries} entries (the upstream has not answered yet)"
            ));
        }
        Err(match stats.upstream_health().last_error {
            Some((_, label, detail)) => {
                format!(
                    "no upstream request has succeeded yet; the last one failed ({label}): {detail}"
                )
            }
            None => "no upstream request has succeeded yet and the cache is empty".into(),
        })
    }
}

/// The backoff of a failing key (`limits.failure_backoff_*`).
fn backoff(config: &Config) -> crate::cache::failures::Backoff {
    crate::cache::failures::Backoff {
        base: Duration::from_millis(config.limits.failure_backoff_ms),
        max: Duration::from_millis(config.limits.failure_backoff_max_ms),
    }
}
