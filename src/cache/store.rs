//! The answer store: a moka future cache bounded by bytes, plus single-flight fills so
//! that concurrent misses on one key make exactly one upstream request (the flights
//! themselves are `flight`'s). What to do with an entry is `readthrough`'s decision;
//! moka's per-entry expiry only bounds how long memory is held.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use moka::Expiry;
use moka::ops::compute::{CompResult, Op};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::cache::compress::Compressor;
use crate::cache::disk::{Disk, Stamp};
use crate::cache::encoding::Coding;
use crate::cache::entry::{CachedBody, weight};
use crate::cache::flight::{Ending, Filled, Flights};
use crate::cache::freshness::Policy;
use crate::cache::hot::{Found, Hot};
use crate::upstream::client::FetchError;

/// An entry larger than `max_bytes / MAX_ENTRY_SHARE` is served but not cached: one
/// answer must not evict most of the cache (nginx's `proxy_max_temp_file_size`
/// spirit, Varnish's transient storage).
pub const MAX_ENTRY_SHARE: u64 = 8;

/// moka evicts for room only once 64 writes are pending (or 300 ms passed), so a
/// run of large inserts (a disk round promotes thousands of K-lines a second)
/// holds up to 64 entries past `max_bytes`: 13 MiB of 200 KiB K-lines, a fifth of
/// a 64 MiB cache. Once `max_bytes / SETTLE_SHARE` has been inserted since moka
/// last caught up, the insert that crossed it has moka catch up (its pending
/// writes and evictions, work it would do anyway, in one batch): at 64 MiB, once
/// a MiB, every five K-lines or so; for small answers moka's own batch of 64
/// comes first. In the disk benchmark this took the disk rounds' RSS peak from
/// 156 to 149–150 MiB (docs/BENCHMARKS.md, the disk tier's run 6).
const SETTLE_SHARE: u64 = 64;

/// What a fill reports besides its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillRole {
    /// This caller started the upstream request.
    Leader,
    /// This caller waited on another caller's request.
    Joined,
    /// The answer landed between the caller's lookup and its fill; no request made.
    Found,
}

/// A read the hot set could not answer alone (see [`Cache::held`]): moka must
/// finish it.
pub struct Unheld(Found);

/// The cache. Cheap to clone.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    entries: moka::future::Cache<String, Arc<CachedBody>>,
    /// Small entries recently read, in front of `entries`; told of every change.
    hot: Arc<Hot>,
    /// Fills under way, by key.
    flights: Arc<Flights>,
    /// Fills run as tasks of the application's tracker, awaited at shutdown.
    tracker: TaskTracker,
    /// Largest weight cached (see [`MAX_ENTRY_SHARE`]).
    max_entry: u64,
    max_bytes: u64,
    /// Entries evicted for room, counted by moka's eviction listener.
    evictions: Arc<AtomicU64>,
    /// The disk tier under the memory (`cache.disk_path`), when there is one.
    disk: Option<Disk>,
    /// Which compressed representations fills make, and their permits.
    compressor: Compressor,
    /// Weight inserted since moka last caught up (see [`SETTLE_SHARE`]).
    unsettled: AtomicU64,
}

impl Inner {
    /// Stores a filled answer, unless it is too large to cache (then it is served
    /// and let go), and queues it for the disk tier (an answer too large for memory
    /// too; one read from the disk is not written back).
    async fn keep(&self, key: &str, entry: &Arc<CachedBody>) {
        if let Some(disk) = &self.disk {
            disk.put(key, entry);
        }
        let weight = weight(key, entry);
        if weight <= self.max_entry {
            self.entries.insert(key.to_owned(), Arc::clone(entry)).await;
            self.hot.changed(key);
            self.settle(weight).await;
        } else {
            tracing::info!(
                bytes = entry.body.len(),
                max_entry_bytes = self.max_entry,
                "answer served but too large to cache"
            );
        }
    }

    /// Counts `weight` just inserted; has moka catch up with its evictions once
    /// [`SETTLE_SHARE`] of the bound was inserted since it last did.
    async fn settle(&self, weight: u64) {
        let since = self.unsettled.fetch_add(weight, Ordering::Relaxed) + weight;
        if since >= self.max_bytes / SETTLE_SHARE {
            self.unsettled.store(0, Ordering::Relaxed);
            self.entries.run_pending_tasks().await;
        }
    }
}

struct KeepFor;

impl Expiry<String, Arc<CachedBody>> for KeepFor {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Arc<CachedBody>,
        _created_at: Instant,
    ) -> Option<Duration> {
        Some(value.keep_for)
    }

    fn expire_after_update(
        &self,
        _key: &String,
        value: &Arc<CachedBody>,
        _updated_at: Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.keep_for)
    }
}

impl Cache {
    /// A cache holding at most about `max_bytes` of bodies and keys, running its
    /// fills on `tracker`.
    pub fn new(max_bytes: u64, tracker: TaskTracker) -> Cache {
        let evictions = Arc::new(AtomicU64::new(0));
        let evicted = Arc::clone(&evictions);
        let hot = Arc::new(Hot::new(max_bytes));
        let told = Arc::clone(&hot);
        let entries = moka::future::Cache::builder()
            .max_capacity(max_bytes)
            // Every removal (evicted, expired, replaced, purged) is told to the hot
            // set. moka may tell it before the removal is made, so the changes made
            // here are told again once they are done (see `Hot::changed`).
            .eviction_listener(move |key: Arc<String>, _value, cause| {
                told.changed(&key);
                if cause == moka::notification::RemovalCause::Size {
                    evicted.fetch_add(1, Ordering::Relaxed);
                }
            })
            .weigher(|key: &String, value: &Arc<CachedBody>| {
                u32::try_from(weight(key, value)).unwrap_or(u32::MAX)
            })
            .expire_after(KeepFor)
            .build();
        Cache {
            inner: Arc::new(Inner {
                entries,
                hot,
                max_entry: max_bytes / MAX_ENTRY_SHARE,
                max_bytes,
                evictions,
                flights: Arc::default(),
                tracker,
                disk: None,
                compressor: Compressor::default(),
                unsettled: AtomicU64::new(0),
            }),
        }
    }

    /// This cache with `disk` under it.
    ///
    /// # Panics
    /// When the cache was cloned before (call it right after [`Cache::new`]).
    pub fn with_disk(mut self, disk: Disk) -> Cache {
        Arc::get_mut(&mut self.inner)
            .expect("the disk tier is added before the cache is shared")
            .disk = Some(disk);
        self
    }

    /// The disk tier, when there is one.
    pub fn disk(&self) -> Option<&Disk> {
        self.inner.disk.as_ref()
    }

    /// What makes the compressed representations (the edge tells it what clients
    /// choose).
    pub fn compressor(&self) -> &Compressor {
        &self.inner.compressor
    }

    /// Makes `coding` of `entry`, stored under `key`, in the background (a request
    /// wanted it and was given the identity body), then weighs the entry again if
    /// it is still the one stored: the byte bound counts every representation held.
    /// (moka takes that as an update, so the entry's time in memory starts again:
    /// it only bounds how long memory is held; freshness is the entry's own.)
    pub fn make_soon(&self, key: &str, entry: &Arc<CachedBody>, coding: Coding) {
        // Before the copy: a purge issued after it covers the record written again.
        let since = Stamp::now();
        let Some(made) = self.inner.compressor.start(entry, coding) else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        let (key, entry) = (key.to_owned(), Arc::clone(entry));
        self.inner.tracker.spawn(async move {
            // Only the request whose task made the copy weighs and writes it again.
            if !matches!(made.await, Ok(true)) {
                return;
            }
            let weighed = inner
                .entries
                .entry(key.clone())
                .and_compute_with(|held| {
                    std::future::ready(match held {
                        Some(held) if Arc::ptr_eq(held.value(), &entry) => {
                            Op::Put(Arc::clone(&entry))
                        }
                        _ => Op::Nop,
                    })
                })
                .await;
            if matches!(weighed, CompResult::ReplacedWith(_)) {
                inner.hot.changed(&key);
                // Still stored (not purged meanwhile): its disk record gets the copy.
                if let Some(disk) = &inner.disk
                    && entry.encoded_now(coding).is_some()
                {
                    disk.put_copies(&key, &entry, since);
                }
            }
        });
    }

    /// Reads `key` from the disk tier into memory after a memory miss: one disk
    /// read per key however many callers miss at once (moka's coalesced insert).
    /// The entry if the disk holds one that may be served at `now` under `policy`.
    pub async fn promote(
        &self,
        key: &str,
        policy: &Policy,
        now: DateTime<Utc>,
    ) -> Option<Arc<CachedBody>> {
        let inner = &*self.inner;
        let disk = inner.disk.as_ref()?;
        // An entry too large for memory is served without being kept.
        let unkept = std::sync::Mutex::new(None);
        let kept = inner
            .entries
            .optionally_get_with(key.to_owned(), async {
                // Before the read: a purge issued after it covers a record written
                // again with new copies.
                let since = Stamp::now();
                let entry = Arc::new(disk.get(key, policy, now).await?);
                let copies = entry.copies_made();
                inner.compressor.make_wanted(&entry).await;
                if entry.copies_made() > copies {
                    // The next read of this record (after memory lets it go, or a
                    // restart) is served these copies without compressing.
                    disk.put_copies(key, &entry, since);
                }
                if weight(key, &entry) <= inner.max_entry {
                    Some(entry)
                } else {
                    *unkept.lock().unwrap_or_else(|e| e.into_inner()) = Some(entry);
                    None
                }
            })
            .await;
        if let Some(entry) = &kept {
            inner.settle(weight(key, entry)).await;
        }
        kept.or_else(|| unkept.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// The cached answer for `key`, whatever its freshness, as moka holds it (for
    /// inspection; requests read through [`held`](Self::held)).
    pub async fn get(&self, key: &str) -> Option<Arc<CachedBody>> {
        self.inner.entries.get(key).await
    }

    /// The cached answer for `key` for a request, whatever its freshness, read at
    /// `now_secs` (Unix seconds of the caller's clock, which paces how often a hot
    /// key's reads are also told to moka), when the hot set answers alone: a hot
    /// key, but for its one read a second that moka sees. Otherwise the read that
    /// moka must finish, with [`Cache::finish_read`]; the caller waits only then.
    pub fn held(&self, key: &str, now_secs: i64) -> Result<Arc<CachedBody>, Unheld> {
        match self.inner.hot.get(key, now_secs) {
            Found::Held { entry, tell: false } => Ok(entry),
            found => Err(Unheld(found)),
        }
    }

    /// The rest of a read that [`Cache::held`] could not answer: the hot set does not
    /// hold the key, or it is the hot key's read of this second.
    pub async fn finish_read(
        &self,
        key: &str,
        unheld: Unheld,
        now_secs: i64,
    ) -> Option<Arc<CachedBody>> {
        let inner = &*self.inner;
        match unheld.0 {
            // Once a second moka answers itself: it counts the read, and an entry it
            // let expire (whose removal it tells later) is not served on.
            Found::Held { .. } => inner.entries.get(key).await,
            Found::Missing { version } => {
                let entry = inner.entries.get(key).await?;
                inner
                    .hot
                    .hold(key, version, &entry, weight(key, &entry), now_secs);
                Some(entry)
            }
        }
    }

    /// Drops one key, from the disk tier too; whether memory held it.
    pub async fn invalidate(&self, key: &str) -> bool {
        if let Some(disk) = &self.inner.disk {
            disk.delete(key);
        }
        let dropped = self.inner.entries.remove(key).await.is_some();
        self.inner.hot.changed(key);
        dropped
    }

    /// Drops every key `matches` accepts; returns those dropped. A walk over the
    /// keys (an operator's purge, not a request path).
    pub async fn invalidate_matching(&self, matches: impl Fn(&str) -> bool) -> Vec<String> {
        let keys: Vec<String> = self
            .inner
            .entries
            .iter()
            .filter(|(key, _)| matches(key))
            .map(|(key, _)| String::clone(&key))
            .collect();
        let mut dropped = Vec::with_capacity(keys.len());
        for key in keys {
            let removed = self.inner.entries.remove(&key).await;
            self.inner.hot.changed(&key);
            if removed.is_some() {
                dropped.push(key);
            }
        }
        dropped
    }

    /// Every key cached now (for inspection; a walk over the store).
    pub fn keys(&self) -> Vec<String> {
        self.inner
            .entries
            .iter()
            .map(|(key, _)| String::clone(&key))
            .collect()
    }

    /// Whether a fill for `key` is under way.
    pub fn is_filling(&self, key: &str) -> bool {
        self.inner.flights.contains(key)
    }

    /// How many requests wait on the fill of `key` now (0 when none is under way).
    pub fn waiters(&self, key: &str) -> usize {
        self.inner.flights.waiters(key)
    }

    /// Number of entries (approximate until moka's pending tasks run).
    pub fn entry_count(&self) -> u64 {
        self.inner.entries.entry_count()
    }

    /// Entries evicted to make room (not those that expired or were purged).
    pub fn evictions(&self) -> u64 {
        self.inner.evictions.load(Ordering::Relaxed)
    }

    /// The capacity, `cache.max_bytes`.
    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes
    }

    /// Weighted size in bytes (approximate, as `entry_count`).
    pub fn weighted_size(&self) -> u64 {
        self.inner.entries.weighted_size()
    }

    /// Runs moka's pending maintenance (tests and the status page use it for exact counts).
    pub async fn sync(&self) {
        self.inner.entries.run_pending_tasks().await;
    }

    /// Fills `key` through one upstream request shared by every concurrent caller.
    ///
    /// The first caller of a key starts a flight that later callers join (no lock is
    /// held across an await). The flight's work runs in its own task: a caller that
    /// goes away does not cancel the request the others wait on. It first looks at
    /// what the store holds and uses it when `usable` says it will do: that closes
    /// the race where another fill landed between a caller's lookup and its flight
    /// (a flight ends only after its answer is stored). A successful body is stored
    /// before any waiter is released; errors are not stored.
    pub async fn fill<F, Fut>(
        &self,
        key: &str,
        usable: impl Fn(&CachedBody) -> bool + Send + 'static,
        fetch: F,
    ) -> (Result<Arc<CachedBody>, FetchError>, FillRole)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<CachedBody, FetchError>> + Send + 'static,
    {
        let (flight, leader, link) = self.inner.flights.join_or_start(key, || {
            // The fill's span, a child of the starting caller's (a request's, or
            // none for background work); later callers' waits link to it.
            let (span, link) = crate::telemetry::fill_span(key);
            let inner = Arc::clone(&self.inner);
            let ending = Ending::new(Arc::clone(&self.inner.flights), key.to_owned());
            let fut = fetch();
            let work = async move {
                if let Some(entry) = inner.entries.get(ending.key()).await
                    && usable(&entry)
                {
                    return Ok(Filled {
                        entry,
                        fetched: false,
                    });
                }
                let entry = Arc::new(fut.await?);
                inner.compressor.make_wanted(&entry).await;
                inner.keep(ending.key(), &entry).await;
                // The flight ends here, after the insert: a caller that finds no
                // flight is sure to find the answer in `entries`.
                drop(ending);
                Ok(Filled {
                    entry,
                    fetched: true,
                })
            };
            let tracker = self.inner.tracker.clone();
            // Spawned when first polled: the starting caller polls it at once.
            let flight = async move {
                tracker
                    .spawn(work.instrument(span))
                    .await
                    .unwrap_or_else(|e| {
                        tracing::error!(error = %e, "cache fill task failed");
                        Err(FetchError::Unreachable)
                    })
            }
            .boxed()
            .shared();
            (flight, link)
        });
        let result = if leader {
            flight.await
        } else {
            flight.instrument(crate::telemetry::wait_span(&link)).await
        };
        let role = match &result {
            Ok(filled) if leader && !filled.fetched => FillRole::Found,
            _ if leader => FillRole::Leader,
            _ => FillRole::Joined,
        };
        (result.map(|filled| filled.entry), role)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::freshness::{Lifetimes, Rule};
    use bytes::Bytes;
    use chrono::Utc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An answer of `s`, fresh for a minute (the cache's tests and its neighbours').
    pub(crate) fn body(s: &'static str) -> CachedBody {
        let now = Utc::now();
        let later = now + chrono::Duration::seconds(60);
        let lifetimes = Lifetimes {
            fresh_until: later,
            stale_until: later,
            error_until: later,
        };
        let rule = Rule {
            endpoint_id: 0,
            class: crate::api::catalog::FreshnessClass::Live,
            until_open: false,
            negative: false,
            settles: None,
            venue: crate::market::Venue::China,
        };
        CachedBody::new(
            Bytes::from_static(s.as_bytes()),
            200,
            now,
            rule,
            lifetimes,
            0,
        )
    }

    #[tokio::test]
    async fn concurrent_fills_make_one_request() {
        let cache = Cache::new(16 * 1024 * 1024, TaskTracker::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(tokio::sync::Barrier::new(50));
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let (cache, calls, barrier) = (cache.clone(), calls.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let (r, _) = cache
                    .fill(
                        "k",
                        |_| true,
                        || {
                            let calls = calls.clone();
                            async move {
                                calls.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                Ok(body("{\"success\":true}"))
                            }
                        },
                    )
                    .await;
                r.unwrap().body.clone()
            }));
        }
        for t in tasks {
            assert_eq!(&t.await.unwrap()[..], b"{\"success\":true}");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(cache.get("k").await.is_some());
    }

    #[tokio::test]
    async fn errors_reach_every_waiter_and_are_not_cached() {
        let cache = Cache::new(16 * 1024 * 1024, TaskTracker::new());
        let (r, role) = cache
            .fill("k", |_| true, || async { Err(FetchError::Timeout) })
            .await;
        assert!(matches!(r, Err(FetchError::Timeout)));
        assert_eq!(role, FillRole::Leader);
        assert!(cache.get("k").await.is_none());
    }

    /// Caches `text` under `key` in place of what is there.
    async fn put(cache: &Cache, key: &str, text: &'static str) -> Arc<CachedBody> {
        let (entry, _) = cache
            .fill(key, |_| false, || async move { Ok(body(text)) })
            .await;
        entry.unwrap()
    }

    /// Whether the hot set holds exactly `entry` for `key`.
    fn holds(cache: &Cache, key: &str, entry: &Arc<CachedBody>) -> bool {
        match cache.inner.hot.get(key, 0) {
            Found::Held { entry: held, .. } => Arc::ptr_eq(&held, entry),
            Found::Missing { .. } => false,
        }
    }

    /// Reads `key` as a request does, at `now_secs`.
    async fn read_at(cache: &Cache, key: &str, now_secs: i64) -> Option<Arc<CachedBody>> {
        match cache.held(key, now_secs) {
            Ok(entry) => Some(entry),
            Err(unheld) => cache.finish_read(key, unheld, now_secs).await,
        }
    }

    async fn read(cache: &Cache, key: &str) -> Option<Arc<CachedBody>> {
        read_at(cache, key, 0).await
    }

    #[cfg_attr(
        feature = "without-slot-tables",
        ignore = "tests a slot table, which the feature empties"
    )]
    #[tokio::test]
    async fn the_hot_set_never_answers_with_a_replaced_or_dropped_entry() {
        let cache = Cache::new(64 * 1024 * 1024, TaskTracker::new());
        let same =
            |a: Option<Arc<CachedBody>>, b: &Arc<CachedBody>| a.is_some_and(|a| Arc::ptr_eq(&a, b));

        let one = put(&cache, "k", "one").await;
        assert!(same(read(&cache, "k").await, &one));
        assert!(holds(&cache, "k", &one), "a read holds a small entry");
        assert!(same(read(&cache, "k").await, &one));

        // A fill that replaces the entry.
        let two = put(&cache, "k", "two").await;
        assert!(!holds(&cache, "k", &one), "a replaced entry is let go");
        assert!(same(read(&cache, "k").await, &two));

        // A purge of the key, and a purge by pattern.
        assert!(cache.invalidate("k").await);
        assert!(!cache.inner.hot.keeps("k"), "a dropped entry is let go");
        assert!(read(&cache, "k").await.is_none());
        let three = put(&cache, "k", "three").await;
        assert!(same(read(&cache, "k").await, &three));
        assert_eq!(cache.invalidate_matching(|k| k == "k").await, ["k"]);
        assert!(read(&cache, "k").await.is_none());

        // A removal moka makes itself (as it evicts or expires) reaches the hot set
        // through its removal listener.
        let four = put(&cache, "k", "four").await;
        assert!(same(read(&cache, "k").await, &four));
        cache.inner.entries.invalidate("k").await;
        cache.sync().await;
        assert!(read(&cache, "k").await.is_none());
    }

    #[cfg_attr(
        feature = "without-slot-tables",
        ignore = "tests a slot table, which the feature empties"
    )]
    #[tokio::test]
    async fn moka_sees_a_hot_keys_reads_once_a_second_and_heavy_entries_are_not_held() {
        let cache = Cache::new(64 * 1024 * 1024, TaskTracker::new());
        let entry = put(&cache, "k", "one").await;
        let hot = &cache.inner.hot;
        let tell = |now| match hot.get("k", now) {
            Found::Held { tell, .. } => tell,
            Found::Missing { .. } => panic!("k is held"),
        };
        assert!(read_at(&cache, "k", 100).await.is_some());
        assert!(!tell(100), "moka saw the read that held it");
        assert!(tell(101), "the first read of the next second goes to moka");
        assert!(!tell(101));
        assert!(tell(102));

        // 64 MiB / 512: entries weighing up to 128 KiB (the body, the compressed
        // copies made, the key and 640 bytes) are held.
        let text = |n: usize| -> &'static str { Box::leak("x".repeat(n).into_boxed_str()) };
        let heavy = put(&cache, "heavy", text(128 * 1024)).await;
        assert!(read(&cache, "heavy").await.is_some());
        assert!(!holds(&cache, "heavy", &heavy));
        let light = put(&cache, "light", text(100 * 1024)).await;
        assert!(read(&cache, "light").await.is_some());
        assert!(holds(&cache, "light", &light));
        assert!(holds(&cache, "k", &entry));
    }

    #[cfg_attr(
        feature = "without-slot-tables",
        ignore = "tests a slot table, which the feature empties"
    )]
    #[tokio::test]
    async fn a_read_that_raced_a_change_keeps_nothing() {
        let cache = Cache::new(64 * 1024 * 1024, TaskTracker::new());
        let entry = put(&cache, "k", "one").await;
        let hot = &cache.inner.hot;
        // A read finds the slot empty and reads moka...
        let Found::Missing { version } = hot.get("k", 0) else {
            panic!("a fill lets go of the key's slot");
        };
        // ...and the key changes (here: moka drops it) before the read holds what
        // it found.
        hot.changed("k");
        hot.hold("k", version, &entry, weight("k", &entry), 0);
        assert!(!hot.keeps("k"), "an entry read before a change is let go");
        // A read under the new version holds it.
        let Found::Missing { version } = hot.get("k", 0) else {
            panic!("nothing is held");
        };
        hot.hold("k", version, &entry, weight("k", &entry), 0);
        assert!(holds(&cache, "k", &entry));
    }

    /// A fill stores its answer with the representations clients asked for made
    /// (each once, decompressing to the body); one made later for a request is
    /// weighed too.
    /// A run of large inserts, fewer than the 64 writes after which moka evicts by
    /// itself, holds no more than the bound and the last share inserted.
    #[tokio::test]
    async fn a_run_of_large_inserts_stays_near_the_bound() {
        const MIB: u64 = 1 << 20;
        let cache = Cache::new(4 * MIB, TaskTracker::new());
        let text: &'static str = Box::leak("x".repeat(200 << 10).into_boxed_str());
        for i in 0..60 {
            put(&cache, &format!("k{i}"), text).await;
        }
        let held: u64 = cache
            .inner
            .entries
            .iter()
            .map(|(key, entry)| weight(&key, &entry))
            .sum();
        let bound = 4 * MIB + 4 * MIB / SETTLE_SHARE + weight("k00", &body(text));
        assert!(
            held <= bound,
            "{held} held against {bound} (60 inserted: 12 MiB)"
        );
    }

    #[tokio::test]
    async fn a_fill_makes_the_representations_asked_for_once() {
        use crate::cache::encoding::Coding;
        let big: &'static str = Box::leak(
            "{\"success\":true,\"data\":[1,2,3]}"
                .repeat(100)
                .into_boxed_str(),
        );
        let cache = Cache::new(64 * 1024 * 1024, TaskTracker::new());
        cache.compressor().note(Coding::Gzip);
        cache.compressor().note(Coding::Zstd);
        let entry = put(&cache, "k", big).await;
        let mut weighed = "k".len() + big.len() + 640;
        for coding in [Coding::Gzip, Coding::Zstd] {
            let made = entry.encoded_now(coding).expect("made by the fill").clone();
            assert!(made.len() < big.len() / 4, "{coding:?}");
            assert_eq!(
                entry.encoded(coding).unwrap().as_ptr(),
                made.as_ptr(),
                "compressed once"
            );
            weighed += made.len();
        }
        assert!(entry.encoded_now(Coding::Brotli).is_none(), "not asked for");
        assert_eq!(
            weight("k", &entry),
            weighed as u64,
            "every representation held weighed, none for the one not made"
        );
        let mut out = String::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(&entry.encoded(Coding::Gzip).unwrap()[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, big);
        let small = put(&cache, "small", "{}").await;
        assert!(Coding::ALL.iter().all(|&c| small.encoded(c).is_none()));
        // Brotli made for a request, in the background: the store weighs the entry
        // again with it.
        cache.sync().await;
        let before = cache.weighted_size();
        cache.make_soon("k", &entry, Coding::Brotli);
        let mut grown = 0;
        for _ in 0..500 {
            cache.sync().await;
            grown = cache.weighted_size().saturating_sub(before);
            if grown > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let brotli = entry.encoded_now(Coding::Brotli).expect("made").len();
        assert_eq!(grown, brotli as u64);
        assert!(Arc::ptr_eq(&cache.get("k").await.unwrap(), &entry));
    }

    #[test]
    fn etag_is_a_quoted_hash_of_the_body() {
        let a = body("abc");
        let b = body("abc");
        let c = body("abd");
        assert_eq!(a.etag, b.etag);
        assert_ne!(a.etag, c.etag);
        assert!(a.etag.to_str().unwrap().starts_with('"'));
    }
}
