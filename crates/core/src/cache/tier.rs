//! The tiers a fill consults before the upstream, in order, behind one trait: the
//! disk tier under memory, then the fleet's shared store with its fill lock. The
//! fill is one loop over the list (pingora-cache's `Storage` and cache lock are the
//! model): each tier may answer, or takes part and hears the fill's answer after
//! the upstream was asked. Memory is not in the list: it is where fills are single
//! flights (the store's lock) and what every lookup reads first.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::cache::disk::Disk;
use crate::cache::entry::CachedBody;
use crate::cache::freshness::Policy;
use crate::cache::purged::{Purged, Stamp};
use crate::cache::shared::{self, Share};
use crate::telemetry::cluster_span;
use crate::upstream::budget::Priority;
use crate::upstream::client::FetchError;
use mdproxy_fleet::{FillLock, Lease, SharedStore};
use mdproxy_market::Clock;
use tracing::Instrument;

/// One fill, as the tiers see it.
pub struct Fill<'a> {
    /// The cache key.
    pub key: &'a str,
    /// The policy the fill is made under.
    pub policy: &'a Arc<Policy>,
    pub clock: &'a Arc<dyn Clock>,
    /// Who asked: a client's miss, a background refresh, a prewarm.
    pub priority: Priority,
    /// Ask the upstream whatever a tier holds (a forced prewarm).
    pub force: bool,
    /// How long this fill may hold the fleet's lease on the key.
    pub lease: Duration,
    /// When the fill began: a purge after it covers its answer.
    pub since: Stamp,
}

impl Fill<'_> {
    /// Whether `entry` will do instead of asking the upstream: fresh now, and the
    /// fill not forced.
    pub fn will_do(&self, entry: &CachedBody) -> bool {
        !self.force && entry.is_fresh_under(self.policy, self.clock.now())
    }
}

/// What a tier found before the fill.
pub enum Looked {
    /// An answer that will do: the upstream is not asked.
    Found(CachedBody),
    /// Nothing that will do; what the tier keeps until the fill's answer, and
    /// whether it holds an answer that may stand in for a failure (`found`: a
    /// stale 200, which a "not found" must not replace).
    Missing { held: Held, found: bool },
}

impl Looked {
    /// Nothing that will do, nor that may stand in.
    fn missing(held: Held) -> Looked {
        Looked::Missing { held, found: false }
    }
}

/// What a tier keeps from before a fill to after it.
pub enum Held {
    /// The tier takes no part in this fill (nothing to do after it).
    Out,
    /// The tier waits for the fill's answer, holding the fleet's lease on the key
    /// when it got one.
    In(Option<Lease>),
}

/// A tier a fill consults before the upstream.
#[async_trait]
pub trait Tier: Send + Sync {
    /// Looks for an answer that will do for `fill`.
    async fn before_fill(&self, fill: &Fill<'_>) -> Looked;

    /// Hears what the fill got (`answer`: `None` when it failed), with what
    /// [`before_fill`](Tier::before_fill) kept.
    async fn after_fill(&self, fill: &Fill<'_>, answer: Option<&CachedBody>, held: Held);
}

/// The tiers under memory, in the order a fill consults them. Cheap to clone.
#[derive(Clone, Default)]
pub struct Tiers(Arc<[Arc<dyn Tier>]>);

impl Tiers {
    /// The tiers in order.
    pub fn new(tiers: Vec<Arc<dyn Tier>>) -> Tiers {
        Tiers(tiers.into())
    }

    /// Fills `fill`: the first tier whose answer will do answers; else `origin`
    /// (the upstream) is asked, told whether a tier holds an answer that may stand
    /// in for a failure, and every tier that took part hears its answer, the
    /// lowest first.
    ///
    /// # Errors
    /// The origin's failure.
    pub async fn fill<F>(
        &self,
        fill: &Fill<'_>,
        origin: impl FnOnce(bool) -> F,
    ) -> Result<CachedBody, FetchError>
    where
        F: Future<Output = Result<CachedBody, FetchError>>,
    {
        let mut held = Vec::with_capacity(self.0.len());
        let mut found_any = false;
        for tier in self.0.iter() {
            match tier.before_fill(fill).await {
                Looked::Found(entry) => {
                    self.after(fill, held, Some(&entry)).await;
                    return Ok(entry);
                }
                Looked::Missing { held: h, found } => {
                    held.push(h);
                    found_any |= found;
                }
            }
        }
        let result = origin(found_any).await;
        self.after(fill, held, result.as_ref().ok()).await;
        result
    }

    /// The tiers that took part (`held`, in order) hear `answer`, the lowest first.
    async fn after(&self, fill: &Fill<'_>, held: Vec<Held>, answer: Option<&CachedBody>) {
        for (tier, held) in self.0.iter().zip(held).rev() {
            if let Held::In(_) = held {
                tier.after_fill(fill, answer, held).await;
            }
        }
    }
}

/// The disk tier in a fill: a prewarm (unless forced) uses a fresh record on this
/// node's disk before the fleet and the upstream are asked, so a restart reads the
/// disk; a client's miss has read it already, through memory's promotion. The
/// disk is written when memory takes the fill's answer, not here.
pub struct DiskTier(pub Disk);

#[async_trait]
impl Tier for DiskTier {
    async fn before_fill(&self, fill: &Fill<'_>) -> Looked {
        if fill.force || fill.priority != Priority::Prewarm {
            return Looked::missing(Held::Out);
        }
        match self.0.get(fill.key, fill.policy, fill.clock.now()).await {
            Some(entry) if fill.will_do(&entry) => Looked::Found(entry),
            _ => Looked::missing(Held::Out),
        }
    }

    async fn after_fill(&self, _: &Fill<'_>, _: Option<&CachedBody>, _: Held) {}
}

/// The fleet's shared store in a fill: another node's answer (or this node's
/// before a restart) is used before the upstream is asked, and one node per key
/// asks the upstream while the others wait for its publication. Out of the fill
/// while Redis is away.
pub struct SharedTier {
    pub store: Arc<dyn SharedStore>,
    pub lock: Arc<dyn FillLock>,
    /// This node's purges (its own and those heard from the fleet): an answer
    /// fetched before one that covers it is not published, or it would undo the
    /// purge in the shared store for every node.
    pub purged: Arc<Purged>,
}

#[async_trait]
impl Tier for SharedTier {
    async fn before_fill(&self, fill: &Fill<'_>) -> Looked {
        if !self.store.is_up() {
            return Looked::missing(Held::Out);
        }
        // Forced: the upstream is asked and the answer published, no lease taken
        // (a 404 still not over a stale 200 of the fleet's).
        if fill.force {
            let (store, now) = (&*self.store, fill.clock.now());
            let found = shared::stand_in(None, store, fill.key, fill.policy, now)
                .await
                .is_some();
            return Looked::Missing {
                held: Held::In(None),
                found,
            };
        }
        let faces = (&*self.store, &*self.lock);
        let now = || fill.clock.now();
        let fresh = |e: &CachedBody| fill.will_do(e);
        let lookup = shared::before_fill(faces, fill.key, fill.policy, fill.lease, now, fresh);
        match lookup.instrument(cluster_span()).await {
            Share::Found(entry) => Looked::Found(entry),
            Share::Fetch { lease, found } => Looked::Missing {
                held: Held::In(lease),
                found,
            },
        }
    }

    async fn after_fill(&self, fill: &Fill<'_>, answer: Option<&CachedBody>, held: Held) {
        if let Held::In(lease) = held {
            let faces = (&*self.store, &*self.lock);
            let answer = answer.filter(|_| !self.purged.since(fill.key, fill.since));
            shared::after_fill(faces, fill.key, answer, lease).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use mdproxy_fleet::{Alone, Unavailable};
    use std::sync::Mutex;

    /// A shared store that is up, keeps the keys it was given and holds one
    /// stored answer (the second field) for every key.
    #[derive(Default)]
    struct Kept(Mutex<Vec<String>>, Option<Bytes>);

    #[async_trait]
    impl SharedStore for Kept {
        fn is_up(&self) -> bool {
            true
        }
        fn max_body(&self) -> usize {
            1 << 20
        }
        async fn get(&self, _key: &str) -> Result<Option<Bytes>, Unavailable> {
            Ok(self.1.clone())
        }
        async fn put(&self, key: &str, _value: Bytes, _ttl: Duration) {
            self.0.lock().unwrap().push(key.to_owned());
        }
        async fn purge(&self, _key: &str, _message: &str) {}
        async fn purge_matching(
            &self,
            _prefixes: &[&str],
            _matches: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
            _message: &str,
        ) {
        }
        fn invalidations(&self) -> tokio::sync::broadcast::Receiver<String> {
            tokio::sync::broadcast::channel(1).1
        }
    }

    /// The default policy, and Monday 2 March 2026, 11:00 in China, on a clock.
    fn monday_11() -> (Arc<Policy>, chrono::DateTime<chrono::Utc>, Arc<dyn Clock>) {
        let policy = Arc::new(Policy::new(&mdproxy_config::Config::default(), 0));
        let now = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        (policy, now, mdproxy_market::ManualClock::new(now))
    }

    /// A client's fill of `/k` begun now (`force`: a forced prewarm's).
    fn fill_of<'a>(policy: &'a Arc<Policy>, clock: &'a Arc<dyn Clock>, force: bool) -> Fill<'a> {
        Fill {
            key: "/k",
            policy,
            clock,
            priority: if force {
                Priority::Prewarm
            } else {
                Priority::Client
            },
            force,
            lease: Duration::from_secs(1),
            since: Stamp::now(),
        }
    }

    /// A fill whose key was purged while it ran does not publish its answer: in
    /// the shared store it would undo the purge for every node. One that began
    /// after the purge publishes.
    #[tokio::test]
    async fn an_answer_fetched_before_a_purge_is_not_published() {
        let (policy, now, clock) = monday_11();
        let kept = Arc::new(Kept::default());
        let tier = SharedTier {
            store: Arc::clone(&kept) as Arc<dyn SharedStore>,
            lock: Arc::new(Alone),
            purged: Arc::default(),
        };
        let answer = shared::tests::entry(now, &policy);
        for purged_meanwhile in [true, false] {
            let fill = fill_of(&policy, &clock, false);
            if purged_meanwhile {
                drop(tier.purged.key("/k"));
            }
            tier.after_fill(&fill, Some(&answer), Held::In(None)).await;
        }
        assert_eq!(*kept.0.lock().unwrap(), ["/k"], "only the later fill's");
    }

    /// A forced fill takes no lease, but still says whether the fleet holds an
    /// answer that may stand in for a failure (a stale 200), which a "not found"
    /// must not replace; a cached "not found" is none.
    #[tokio::test]
    async fn a_forced_fill_says_whether_the_fleet_holds_a_stand_in() {
        // In session: a live answer a minute old is stale and may stand in (fresh
        // 3 s, on error an hour).
        let (policy, now, clock) = monday_11();
        for (status, stands) in [(200, true), (404, false)] {
            let mut held = shared::tests::entry(now - chrono::Duration::seconds(60), &policy);
            held.status = status;
            let tier = SharedTier {
                store: Arc::new(Kept(Mutex::default(), Some(shared::encode(&held)))),
                lock: Arc::new(Alone),
                purged: Arc::default(),
            };
            let fill = fill_of(&policy, &clock, true);
            match tier.before_fill(&fill).await {
                Looked::Missing { found, .. } => assert_eq!(found, stands, "{status}"),
                Looked::Found(_) => panic!("a forced fill uses no stored answer"),
            }
        }
    }
}
