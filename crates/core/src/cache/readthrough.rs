//! The read-through decision, whole and in one place: a fresh entry is a hit; a stale
//! one is served while one background refresh runs (stale-while-revalidate); anything
//! else is filled through the single flight and the upstream budget, caching a
//! success (and a "not found" briefly); a failing upstream is answered with a usable
//! stale entry (stale-if-error). It knows nothing of HTTP: the edge turns its
//! [`Answer`] into a response.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::task::TaskTracker;

use crate::cache::compress::Want;
use crate::cache::demand::Demand;
use crate::cache::disk::Pattern;
use crate::cache::encoding::Coding;
use crate::cache::entry::CachedBody;
use crate::cache::failures::{Backoff, Failures};
use crate::cache::flight::Mark;
pub use crate::cache::flight::{ClientFill, FillTask};
use crate::cache::freshness::{Freshness, Lifetimes, Policy};
use crate::cache::origin::{self, Origin};
use crate::cache::purge::Purge;
use crate::cache::purged::Stamp;
use crate::cache::shared;
use crate::cache::store::{Cache, FillRole, Seen, Unheld};
use crate::cache::tier::{Fill, Tiers};
use crate::logging::Throttle;
use crate::stats::CacheStatus;
use crate::upstream::Upstream;
use crate::upstream::budget::Priority;
use crate::upstream::client::FetchError;
use mdproxy_api::params::Valid;
use mdproxy_fleet::SharedStore;
use mdproxy_market::Clock;

/// At most one warning line per kind in this interval.
const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// How an answer was served: decides `X-Cache` and `Cache-Status` (RFC 9211)
/// together, so the two never disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// Fresh from the cache.
    Hit,
    /// A cached upstream "not found".
    Negative,
    /// Stale, served while one background request refreshes it.
    Revalidating,
    /// Stale, served because the upstream failed.
    StaleIfError,
    /// Stale, served without asking the upstream, which holds us back (why).
    StaleHeldBack(HeldBack),
    /// Fetched for this request and stored.
    Stored,
    /// Fetched for this request and not stored: a "not found" asked once, under
    /// `freshness.negative_keep = "second_ask"`.
    Relayed,
    /// An expired entry was refetched for this request.
    RefetchedStale,
    /// Waited on another request's fetch of the same key.
    Collapsed,
    /// From the cluster's shared store: another node's fill (or this node's
    /// before a restart), no upstream request.
    Shared,
    /// Fresh from this node's disk tier (and now in memory), no upstream request.
    Disk,
}

impl Served {
    /// Whether the answer was just filled for this request (fetched, read from the
    /// shared store or the disk, or waited on): its fill made the copies it has.
    pub fn filled(self) -> bool {
        matches!(
            self,
            Served::Stored
                | Served::Relayed
                | Served::RefetchedStale
                | Served::Collapsed
                | Served::Shared
                | Served::Disk
        )
    }

    /// Whether a fill of the key is under way (a background refresh, or another
    /// request's): the entry served is about to be replaced, unless it fails.
    pub fn refreshing(self) -> bool {
        matches!(self, Served::Revalidating)
    }

    /// The `X-Cache` status.
    pub fn x_cache(self) -> CacheStatus {
        match self {
            Served::Hit | Served::Negative | Served::Shared | Served::Disk => CacheStatus::Hit,
            Served::Revalidating | Served::StaleIfError | Served::StaleHeldBack(_) => {
                CacheStatus::Stale
            }
            Served::Stored | Served::Relayed | Served::RefetchedStale | Served::Collapsed => {
                CacheStatus::Miss
            }
        }
    }
}

/// Where a prewarmed answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prewarmed {
    /// Memory held it fresh already: nothing was asked.
    Fresh,
    /// This node's disk tier held it fresh (after a restart): no upstream request.
    Disk,
    /// The fleet's shared store held it: no upstream request.
    Shared,
    /// Fetched from the upstream.
    Filled,
}

/// Why a stale answer was served without asking the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldBack {
    /// The upstream asked us to wait (`Retry-After`).
    Paused,
    /// A vendor quota is spent.
    OverQuota,
    /// This key's last fill failed and its backoff runs; one retry will try again.
    FailingKey,
    /// The day's quota is nearly spent: a stale answer is preferred to a refresh.
    Thrifty,
}

impl HeldBack {
    /// The `Cache-Status` detail that says it.
    pub fn detail(self) -> &'static str {
        match self {
            HeldBack::Paused => "stale-upstream-paused",
            HeldBack::OverQuota => "stale-over-quota",
            HeldBack::FailingKey => "stale-key-backing-off",
            HeldBack::Thrifty => "stale-saving-quota",
        }
    }
}

/// A cached answer for one request, with how it was served and its lifetimes under
/// the policy that served it.
#[derive(Debug)]
pub struct Answer {
    pub entry: Arc<CachedBody>,
    pub served: Served,
    pub lifetimes: Lifetimes,
    /// The instant the decision was made at (for `Age` and `max-age`).
    pub now: DateTime<Utc>,
}

/// A lookup that must wait (see [`ReadThrough::lookup_now`]), and for what.
pub struct Waiting {
    /// The instant the lookup began at: the decision is made for it.
    now: DateTime<Utc>,
    on: Wait,
}

enum Wait {
    /// moka's read (the hot set does not hold the key, or this is the hot key's
    /// read of this second that moka sees).
    Read(Unheld),
    /// A fill, replacing what the store holds, if anything.
    Fill(Option<Arc<CachedBody>>),
}

/// The read-through cache. Cheap to clone.
#[derive(Clone)]
pub struct ReadThrough {
    inner: Arc<Inner>,
}

struct Inner {
    store: Cache,
    upstream: Upstream,
    clock: Arc<dyn Clock>,
    /// Background refreshes run on the application's tracker.
    tracker: TaskTracker,
    /// While the upstream is down every request for a stale key would warn.
    warnings: Throttle,
    /// What a fill consults before the upstream, in order (the disk tier, the
    /// fleet's shared store).
    tiers: Tiers,
    /// The fleet's shared store, for purges (a single node's shares nothing).
    shared: Arc<dyn SharedStore>,
    /// How long a node holds the cluster's right to fill a key beyond the upstream
    /// timeout of its endpoint (the budget wait): past both another node takes over.
    lease: Duration,
    /// Keys whose fill just failed, held back while their backoff runs.
    failures: Failures,
    /// Which endpoints clients ask for (demand-driven prewarm reads it).
    demand: Demand,
    /// Stale-while-revalidate refreshes started.
    refreshes: AtomicU64,
}

/// How a read-through cache fills: from what, through which tiers, holding the
/// fleet's lease how long, and how long a failing key is held back.
pub struct Filling {
    pub upstream: Upstream,
    /// The tiers a fill consults before the upstream, in order.
    pub tiers: Tiers,
    /// The fleet's shared store, which purges reach too.
    pub shared: Arc<dyn SharedStore>,
    /// How long a node holds a key's fill lease beyond the upstream's timeout.
    pub lease: Duration,
    pub backoff: Backoff,
}

impl ReadThrough {
    /// A read-through cache over `store` that fills as `filling` says, deciding on
    /// `clock`'s time and running background work on `tracker`.
    pub fn new(
        store: Cache,
        filling: Filling,
        clock: Arc<dyn Clock>,
        tracker: TaskTracker,
    ) -> ReadThrough {
        let Filling {
            upstream,
            tiers,
            shared,
            lease,
            backoff,
        } = filling;
        ReadThrough {
            inner: Arc::new(Inner {
                store,
                upstream,
                clock,
                tracker,
                warnings: Throttle::new(WARN_EVERY),
                tiers,
                shared,
                lease,
                failures: Failures::new(backoff),
                demand: Demand::default(),
                refreshes: AtomicU64::new(0),
            }),
        }
    }

    /// Which endpoints clients ask for.
    pub fn demand(&self) -> &Demand {
        &self.inner.demand
    }

    /// Stale-while-revalidate refreshes started so far.
    pub fn refreshes(&self) -> u64 {
        self.inner.refreshes.load(Ordering::Relaxed)
    }

    /// The keys held back after a failure (their count, for the status page).
    pub fn failures(&self) -> &Failures {
        &self.inner.failures
    }

    /// The store (inspection, purge).
    pub fn store(&self) -> &Cache {
        &self.inner.store
    }

    /// Drops what `purge` names here and, in a cluster, from the shared store and
    /// every node's cache (whichever holds them, this one or not); returns how many
    /// entries this node held.
    pub async fn purge(&self, purge: &Purge) -> usize {
        let held = self.forget(purge).await;
        let shared = &self.inner.shared;
        match purge {
            Purge::Key(key) => shared.purge(key, &purge.message()).await,
            _ => {
                let matches = |key: &str| purge.matches(key);
                let prefixes = purge.scan_prefixes();
                let prefixes: Vec<&str> = prefixes.iter().map(String::as_str).collect();
                shared
                    .purge_matching(&prefixes, &matches, &purge.message())
                    .await;
            }
        }
        held
    }

    /// Drops what `purge` names from this node's cache only (another node's purge,
    /// heard); returns how many entries it held in memory. The disk tier drops a
    /// key at once and keeps a rule for an endpoint or a prefix (its reads apply it).
    pub async fn forget(&self, purge: &Purge) -> usize {
        match purge {
            Purge::Key(key) => usize::from(self.inner.store.invalidate(key).await),
            _ => {
                if let Some(disk) = self.inner.store.disk() {
                    let pattern = match purge {
                        Purge::Endpoint(e) => Pattern::Endpoint(e.path.clone()),
                        _ => Pattern::Prefix(purge.prefix().to_owned()),
                    };
                    if let Err(e) = disk.purge(pattern).await {
                        tracing::warn!(error = %e, "disk tier: purge rule not saved (it holds until a restart)");
                    }
                }
                let dropped = self.inner.store.invalidate_matching(purge).await;
                dropped.len()
            }
        }
    }

    /// The answer for a valid request under `policy` when the cache has it at hand
    /// (a fresh entry, a cached "not found", a stale one served while it refreshes in
    /// the background), decided at once; else what the lookup must wait for, to be
    /// finished by [`ReadThrough::lookup_later`]. The edge answers a hit without a
    /// future this way.
    pub fn lookup_now(&self, policy: &Arc<Policy>, valid: &Valid) -> Result<Answer, Waiting> {
        let now = self.inner.clock.now();
        match self.inner.store.held(&valid.target, now.timestamp()) {
            Ok(entry) => self
                .decide(policy, valid, Some(entry), now)
                .map_err(|cached| Waiting {
                    now,
                    on: Wait::Fill(cached),
                }),
            Err(unheld) => Err(Waiting {
                now,
                on: Wait::Read(unheld),
            }),
        }
    }

    /// The rest of a lookup that [`ReadThrough::lookup_now`] could not decide: moka's
    /// read, then the same decision, else one fill (for `client`: its request ID
    /// and trace go to the upstream, and it says which task drives the fill; its
    /// answer stored with the coding the client takes, `asked`, made).
    ///
    /// # Errors
    /// The upstream's failure when no usable stale entry is at hand; an
    /// [`FetchError::Answer`] or [`FetchError::Reported`] carries the upstream's own
    /// answer, to relay as it is.
    pub async fn lookup_later(
        &self,
        policy: &Arc<Policy>,
        valid: &Valid,
        waiting: Waiting,
        asked: Option<Coding>,
        client: impl FnOnce() -> ClientFill,
    ) -> Result<Answer, FetchError> {
        let Waiting { now, on } = waiting;
        let (cached, mark) = match on {
            Wait::Fill(cached) => (cached, None),
            Wait::Read(unheld) => {
                let store = &self.inner.store;
                // Before the read: a fill that starts with no flight of the key
                // ended since takes what this read found rather than read again.
                let mut mark = Some(store.mark(&valid.target));
                let mut cached = store
                    .finish_read(&valid.target, unheld, now.timestamp())
                    .await;
                // Memory, then the disk tier; the cluster and the upstream are the
                // fill's.
                let mut from_disk = false;
                if cached.is_none() && store.disk().is_some() {
                    // What the disk gave may not be in memory: the fill reads again.
                    mark = None;
                    // Boxed: the disk read's state would otherwise weigh on every
                    // lookup's future, moved whole into its box by the edge.
                    cached = Box::pin(store.promote(&valid.target, policy, now)).await;
                    from_disk = cached.is_some();
                }
                match self.decide(policy, valid, cached, now) {
                    Ok(mut answer) => {
                        if from_disk && answer.served == Served::Hit {
                            answer.served = Served::Disk;
                        }
                        return Ok(answer);
                    }
                    Err(cached) => (cached, mark),
                }
            }
        };
        let want = Want::Asked(asked);
        self.miss(policy, valid, (cached, mark), now, want, client())
            .await
    }

    /// The decision on what the store holds for `valid` (`cached`) at `now`: the
    /// answer, or the entry, if any, that a fill must replace (and may stand in when
    /// the upstream fails).
    fn decide(
        &self,
        policy: &Arc<Policy>,
        valid: &Valid,
        cached: Option<Arc<CachedBody>>,
        now: DateTime<Utc>,
    ) -> Result<Answer, Option<Arc<CachedBody>>> {
        let Some(entry) = cached else {
            return Err(None);
        };
        let lifetimes = entry.lifetimes_under(policy);
        let served = match lifetimes.decide(now) {
            Freshness::Fresh if entry.status == 200 => Served::Hit,
            Freshness::Fresh => Served::Negative,
            Freshness::Stale => match self.refresh_in_background(policy, valid) {
                None => Served::Revalidating,
                Some(why) => Served::StaleHeldBack(why),
            },
            Freshness::StaleIfError | Freshness::Expired => return Err(Some(entry)),
        };
        // The entry moves into the answer (no second refcount on a hot key's shared
        // counter).
        Ok(Answer {
            entry,
            served,
            lifetimes,
            now,
        })
    }

    /// The rest of [`ReadThrough::lookup_later`] when the cache cannot answer by itself
    /// at `now` (when the lookup found so): one fill, or the `cached` entry when the
    /// upstream fails and it may stand in. `cached` is what moka held when the
    /// flights stood at the mark, if the lookup took one.
    async fn miss(
        &self,
        policy: &Arc<Policy>,
        valid: &Valid,
        (cached, mark): (Option<Arc<CachedBody>>, Option<Mark>),
        now: DateTime<Utc>,
        want: Want,
        client: ClientFill,
    ) -> Result<Answer, FetchError> {
        let s = &*self.inner;
        // A stale entry that may stand in for a failure.
        let standing = cached
            .as_ref()
            .filter(|e| e.may_stand_in(policy, now))
            .map(|e| (Arc::clone(e), e.lifetimes_under(policy)));
        // A key whose last fill failed is not asked again until its backoff ends:
        // the stale entry, or the failure, at once (and one retry, scheduled).
        if let Some((error, schedule)) = s.failures.held(&valid.target) {
            if let Some(at) = schedule {
                self.retry_at(policy, valid, at);
            }
            let standing = shared::stand_in(standing, &*s.shared, &valid.target, policy, now);
            return match standing.await {
                Some((entry, lifetimes)) => Ok(Answer {
                    entry,
                    served: Served::StaleHeldBack(HeldBack::FailingKey),
                    lifetimes,
                    now,
                }),
                None => Err(error),
            };
        }
        // The day's quota nearly spent: what may stand in does, rather than a refresh.
        if let Some((entry, lifetimes)) = &standing
            && s.upstream.is_thrifty()
        {
            return Ok(Answer {
                entry: Arc::clone(entry),
                served: Served::StaleHeldBack(HeldBack::Thrifty),
                lifetimes: *lifetimes,
                now,
            });
        }
        let fill = |client, seen| {
            let at = Some(now);
            let how = (Priority::Client, false, at);
            self.fill_for(policy, valid, how, (want, seen), client)
        };
        let seen = mark.map(|mark| Seen {
            mark,
            held: cached.clone(),
        });
        let (mut result, mut role) = fill(Some(client.clone()), seen).await;
        if matches!(result, Err(FetchError::Dropped)) {
            // We joined a background refresh that found no budget; a client may wait
            // for budget where background work may not, so ask again as a client.
            (result, role) = fill(Some(client), None).await;
        }
        let now = s.clock.now();
        match result {
            Ok(entry) => {
                let served = match role {
                    FillRole::Found => Served::Hit,
                    _ if entry.shared => Served::Shared,
                    _ if entry.disk => Served::Disk,
                    FillRole::Relayed => Served::Relayed,
                    FillRole::Leader if cached.is_some() => Served::RefetchedStale,
                    FillRole::Leader => Served::Stored,
                    FillRole::Joined => Served::Collapsed,
                };
                let lifetimes = entry.lifetimes_under(policy);
                Ok(Answer {
                    entry,
                    served,
                    lifetimes,
                    now,
                })
            }
            Err(error) => {
                // Stale-if-error: a failing upstream never loses a cached answer,
                // this node's or, when it holds none, the fleet's.
                let standing = if error.is_failure() {
                    shared::stand_in(standing, &*s.shared, &valid.target, policy, now).await
                } else {
                    None
                };
                if let Some((entry, lifetimes)) = standing {
                    if let Some(held) = s.warnings.admit(("stale", error.as_str())) {
                        tracing::warn!(key = %valid.target, upstream_error = error.as_str(), held_back = held, "serving stale answer");
                    }
                    let served = match error {
                        FetchError::Paused { .. } | FetchError::Throttled { .. } => {
                            Served::StaleHeldBack(HeldBack::Paused)
                        }
                        FetchError::OverQuota { .. } => Served::StaleHeldBack(HeldBack::OverQuota),
                        _ => Served::StaleIfError,
                    };
                    return Ok(Answer {
                        entry,
                        served,
                        lifetimes,
                        now,
                    });
                }
                if let Some(held) = s.warnings.admit(("failed", error.as_str())) {
                    tracing::warn!(key = %valid.target, upstream_error = error.as_str(), held_back = held, "upstream fetch failed");
                }
                Err(error)
            }
        }
    }

    /// Retries `valid` in the background at `at` (the end of its backoff): one fill
    /// at prewarm priority, whose outcome the failure memory takes in as any fill's.
    fn retry_at(&self, policy: &Arc<Policy>, valid: &Valid, at: tokio::time::Instant) {
        let (this, policy, valid) = (self.clone(), Arc::clone(policy), valid.clone());
        let stop = self.inner.upstream.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = stop.halted() => return,
            }
            if let (Err(e), _) = this.fill(&policy, &valid, Priority::Prewarm, true).await {
                tracing::debug!(key = %valid.target, error = e.as_str(), "retry of a failing key failed");
            }
            // A retry that was not sent (no budget, a pause) or whose failure was
            // recorded leaves the key to the next request, never held for good.
            this.inner.failures.retry_ended(&valid.target);
        });
    }

    /// Fetches `valid` for the scheduler: unless `force`, an answer that is still
    /// fresh is kept and nothing is asked. Returns where the answer came from.
    ///
    /// # Errors
    /// The fetch's error; the cached answer, if any, stays.
    pub async fn prewarm(
        &self,
        policy: &Arc<Policy>,
        valid: &Valid,
        force: bool,
    ) -> Result<Prewarmed, FetchError> {
        let (result, role) = self.fill(policy, valid, Priority::Prewarm, force).await;
        result.map(|entry| match role {
            FillRole::Found => Prewarmed::Fresh,
            _ if entry.disk => Prewarmed::Disk,
            _ if entry.shared => Prewarmed::Shared,
            _ => Prewarmed::Filled,
        })
    }

    /// Fetches `valid` from the upstream through the single-flight fill and the
    /// upstream budget, caching a successful answer (and a "not found" briefly).
    /// Client misses, background refreshes and the scheduler all come through here.
    /// Unless `force`, an answer that turned fresh meanwhile is used as it is (the
    /// one "skip if fresh" check).
    pub async fn fill(
        &self,
        policy: &Arc<Policy>,
        valid: &Valid,
        priority: Priority,
        force: bool,
    ) -> (Result<Arc<CachedBody>, FetchError>, FillRole) {
        let how = (priority, force, None);
        self.fill_for(policy, valid, how, (Want::Lately, None), None)
            .await
    }

    /// [`fill`](Self::fill) on behalf of a client request (`client`): its ID and
    /// trace go with the fill's work, on whichever task runs it, and on to the
    /// upstream, and its answer is stored with the copies `want` names. An entry
    /// is fresh enough to use instead as of `at` (the client's lookup; else now).
    /// What the client's lookup `seen` may stand for the store's read.
    async fn fill_for(
        &self,
        policy: &Arc<Policy>,
        valid: &Valid,
        (priority, force, at): (Priority, bool, Option<DateTime<Utc>>),
        (want, seen): (Want, Option<Seen>),
        client: Option<ClientFill>,
    ) -> (Result<Arc<CachedBody>, FetchError>, FillRole) {
        let (context, task) = match client {
            Some(ClientFill { context, task }) => (Some(context), task),
            None => (None, FillTask::Starters),
        };
        let s = &*self.inner;
        let now = at.unwrap_or_else(|| s.clock.now());
        let usable = {
            let policy = Arc::clone(policy);
            move |entry: &CachedBody| !force && entry.is_fresh_under(&policy, now)
        };
        let origin = Origin::of(&s.upstream, valid);
        let lease = s.lease + s.upstream.timeout_for(valid.endpoint);
        let (tiers, clock, policy) = (s.tiers.clone(), Arc::clone(&s.clock), Arc::clone(policy));
        let this = self.clone();
        s.store
            .fill_wanting(
                &valid.target,
                (want, task, seen, policy.negative_keep()),
                usable,
                move |held, key| {
                    crate::telemetry::context::within(context, async move {
                        let found = held.is_some_and(|e| e.may_stand_in(&policy, clock.now()));
                        let fill = Fill {
                            key: &key,
                            policy: &policy,
                            clock: &clock,
                            priority,
                            force,
                            lease,
                            since: Stamp::now(),
                        };
                        let fetched = tiers
                            .fill(&fill, |fleet| origin.fetch(&fill, found || fleet))
                            .await;
                        let fetched = origin::over_held(fetched, found);
                        // In the flight, whoever drives it: the client that started it
                        // may be gone, and the flight ends only after this.
                        this.inner.failures.learn(&key, &fetched);
                        fetched
                    })
                },
            )
            .await
    }

    /// Starts a background refresh of `valid` unless one is already under way, or
    /// the upstream holds it back: then why (a key that just failed has its one
    /// retry scheduled instead).
    fn refresh_in_background(&self, policy: &Arc<Policy>, valid: &Valid) -> Option<HeldBack> {
        if self.inner.store.is_filling(&valid.target) {
            return None;
        }
        let upstream = &self.inner.upstream;
        if upstream.is_paused() {
            return Some(HeldBack::Paused);
        }
        if let Some((_, schedule)) = self.inner.failures.held(&valid.target) {
            if let Some(at) = schedule {
                self.retry_at(policy, valid, at);
            }
            return Some(HeldBack::FailingKey);
        }
        if upstream.is_thrifty() {
            return Some(HeldBack::Thrifty);
        }
        self.inner.refreshes.fetch_add(1, Ordering::Relaxed);
        let (this, policy, valid) = (self.clone(), Arc::clone(policy), valid.clone());
        self.inner.tracker.spawn(async move {
            if let (Err(e), _) = this.fill(&policy, &valid, Priority::Background, false).await {
                tracing::debug!(key = %valid.target, error = e.as_str(), "background refresh failed");
            }
        });
        None
    }
}
