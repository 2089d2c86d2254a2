//! The answer store: a moka future cache bounded by bytes, plus single-flight fills so
//! that concurrent misses on one key make exactly one upstream request (the flights
//! themselves are `flight`'s), and beside moka the 404s of keys asked once
//! (`first_asks`). What to do with an entry is `readthrough`'s decision;
//! moka's per-entry expiry only bounds how long memory is held.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use moka::Expiry;
use moka::ops::compute::{CompResult, Op};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::cache::compress::{Compressor, Want};
use crate::cache::disk::Disk;
use crate::cache::doorkeeper::Doorkeeper;
use crate::cache::encoding::Coding;
use crate::cache::entry::{CachedBody, settled_weight, weight};
use crate::cache::first_asks::FirstAsks;
use crate::cache::flight::{Driven, Ending, FillTask, Filled, Flights, Mark};
use crate::cache::hot::{Found, Hot};
use crate::cache::purge::Purge;
use crate::cache::purged::{Purged, Stamp};
use crate::upstream::client::FetchError;
use mdproxy_config::NegativeKeep;

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

/// How often moka's maintenance runs on its own ([`Cache::keep_tidy`]).
///
/// moka 0.12 has no housekeeping thread: expired entries are removed by the
/// maintenance a cache call runs, at most 100 ms of it at a time (the bound it
/// sets when an eviction listener is set). After a quiet spell, the entries that
/// expired meanwhile (the 30-second 404s of a burst of unlisted codes: 100,000
/// after five seconds of a flood) were all removed by the first calls of the next
/// burst, on the workers that answer clients: four 5-second floods of 404s, 40 s
/// apart, had a p99 of 7, 7, 46 and 63 ms; with this task 6, 6, 7 and 24 ms
/// (docs/BENCHMARKS.md, "The miss path"). Run every second, the removals follow
/// the expirations in small batches whether or not clients call.
const TIDY_EVERY: Duration = Duration::from_secs(1);

/// What a fill reports besides its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillRole {
    /// This caller started the upstream request.
    Leader,
    /// This caller started the upstream request, and its answer was not kept: a
    /// "not found" asked once (`freshness.negative_keep = "second_ask"`).
    Relayed,
    /// This caller waited on another caller's request.
    Joined,
    /// The answer landed between the caller's lookup and its fill; no request made.
    Found,
}

/// A read the hot set could not answer alone (see [`Cache::held`]): moka must
/// finish it.
pub struct Unheld(Found);

/// What a caller read of a key before it fills it: where the key's flights stood
/// before the read ([`Cache::mark`]), and the entry the read found, if any. A fill
/// started while no flight of the key's shard has ended since uses that entry
/// rather than read again: moka's read of a key it does not hold cost a miss
/// about 1,300 instructions.
pub struct Seen {
    pub mark: Mark,
    pub held: Option<Arc<CachedBody>>,
}

/// The cache. Cheap to clone.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    /// Keyed with foldhash (seeded per process), as the flights and the doorkeeper
    /// are: moka's default SipHash was a tenth of its own work per call.
    entries: moka::future::Cache<String, Arc<CachedBody>, foldhash::fast::RandomState>,
    /// Small entries recently read, in front of `entries`; told of every change.
    hot: Arc<Hot>,
    /// Fills under way, by key.
    flights: Arc<Flights>,
    /// Fills an HTTP/2 stream starts, and those whose starting caller went away,
    /// run as tasks of the application's tracker, awaited at shutdown.
    tracker: TaskTracker,
    /// Largest weight cached (see [`MAX_ENTRY_SHARE`]).
    max_entry: u64,
    max_bytes: u64,
    /// Entries evicted for room, counted by moka's eviction listener.
    evictions: Arc<AtomicU64>,
    /// The disk tier under the memory (`cache.disk_path`), when there is one.
    disk: Option<Disk>,
    /// Which of its reads memory keeps once full.
    doorkeeper: Doorkeeper,
    /// Which keys' "not found" answers were fetched lately, for
    /// `freshness.negative_keep = "second_ask"`.
    negatives: Doorkeeper,
    /// "Not found" answers fetched and relayed without being kept (first asks
    /// under `second_ask`).
    negatives_relayed: AtomicU64,
    /// "Not found" answers kept from their first ask under `first_ask`, until
    /// their key is asked again (then they move to `entries`).
    first_asks: FirstAsks,
    /// Which compressed representations fills make, and their permits.
    compressor: Compressor,
    /// Weight inserted since moka last caught up (see [`SETTLE_SHARE`]).
    unsettled: AtomicU64,
    /// Purges made lately (the disk tier's, when there is one): an answer read or
    /// fetched before one that covers it is not kept after it.
    purged: Arc<Purged>,
}

impl Inner {
    /// Whether a fetched answer is kept: every answer but a "not found" under
    /// `second_ask` whose key the store does not remember fetching (the first ask
    /// of a scan of unknown codes costs no insert, no memory and no eviction).
    fn keeps(&self, key: &str, entry: &CachedBody, negatives: NegativeKeep) -> bool {
        entry.status != 404 || negatives == NegativeKeep::FirstAsk || self.negatives.again(key)
    }

    /// Stores a filled answer, unless it is too large to cache (then it is served
    /// and let go), and queues it for the disk tier (an answer too large for memory
    /// too; one read from the disk is not written back). `since` is when its fetch
    /// began: a purge made after that takes it out again ([`Inner::unkeep`]).
    async fn keep(&self, key: &str, entry: &Arc<CachedBody>, since: Stamp) {
        if let Some(disk) = &self.disk {
            disk.put(key, entry, since);
        }
        let weight = weight(key, entry);
        if settled_weight(key, entry) <= self.max_entry {
            self.entries.insert(key.to_owned(), Arc::clone(entry)).await;
            // After the insert: a key moving from the first asks is always in one.
            if self.first_asks.len() > 0 {
                self.first_asks.remove(key);
            }
            self.hot.changed(key);
            self.settle(weight).await;
            self.unkeep(key, entry, since).await;
        } else {
            tracing::info!(
                bytes = entry.body.len(),
                max_entry_bytes = self.max_entry,
                "answer served but too large to cache"
            );
        }
    }

    /// Holds a "not found" fetched for its key's first ask in [`FirstAsks`] rather
    /// than in moka (nor on the disk: it moves to both if its key is asked again).
    /// `since` as for [`Inner::keep`].
    fn hold_first_ask(&self, key: &str, entry: &Arc<CachedBody>, since: Stamp) {
        self.first_asks.put(key, entry, Instant::now());
        if self.purged.since(key, since) {
            self.first_asks.remove_if(key, entry);
            tracing::debug!(key, "answer taken before a purge not kept");
        }
    }

    /// The "not found" held for `key` from its first ask, if any; found for the
    /// first time since, it is moved into moka on a task of its own (the caller
    /// is answered meanwhile, and a caller that goes away does not stop the move
    /// halfway past a purge).
    fn first_ask(self: &Arc<Self>, key: &str) -> Option<Arc<CachedBody>> {
        if self.first_asks.len() == 0 {
            return None;
        }
        let found = self.first_asks.get_now(key)?;
        if found.first_read {
            // Taken after the read, then the entry looked for again: a purge that
            // dropped it in between is seen here, and one made later takes the
            // moved entry out again (`keep`'s own check).
            let since = Stamp::now();
            if self.first_asks.holds(key, &found.entry) {
                let (this, key, entry) =
                    (Arc::clone(self), key.to_owned(), Arc::clone(&found.entry));
                self.tracker
                    .spawn(async move { this.keep(&key, &entry, since).await });
            }
        }
        Some(found.entry)
    }

    /// Takes `entry`, just stored under `key`, out again if a purge covering it
    /// was made at or after `since` (when it was read or its fetch began): the
    /// purge may have come before the insert, and found nothing to drop. Checked
    /// after the insert, so a purge is either seen here or drops the entry itself.
    /// The callers waiting for it are still answered with it.
    async fn unkeep(&self, key: &str, entry: &Arc<CachedBody>, since: Stamp) {
        if !self.purged.since(key, since) {
            return;
        }
        self.entries
            .entry(key.to_owned())
            .and_compute_with(|held| {
                std::future::ready(match held {
                    Some(held) if Arc::ptr_eq(held.value(), entry) => Op::Remove,
                    _ => Op::Nop,
                })
            })
            .await;
        self.hot.changed(key);
        tracing::debug!(key, "answer taken before a purge not kept");
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
        let first_asks = FirstAsks::new(max_bytes);
        let entries = moka::future::Cache::builder()
            // The first asks' table takes its share of the bound.
            .max_capacity(max_bytes - first_asks.budget())
            .initial_capacity(table::entries(max_bytes))
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
            .build_with_hasher(foldhash::fast::RandomState::default());
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
                doorkeeper: Doorkeeper::default(),
                negatives: Doorkeeper::default(),
                negatives_relayed: AtomicU64::new(0),
                first_asks,
                compressor: Compressor::default(),
                unsettled: AtomicU64::new(0),
                purged: Arc::default(),
            }),
        }
    }

    /// This cache with `disk` under it.
    ///
    /// # Panics
    /// When the cache was cloned before (call it right after [`Cache::new`]).
    pub fn with_disk(mut self, disk: Disk) -> Cache {
        let inner = Arc::get_mut(&mut self.inner)
            .expect("the disk tier is added before the cache is shared");
        // One record of purges: one noted here stops the disk's queued writes too.
        inner.purged = Arc::clone(disk.purged());
        inner.disk = Some(disk);
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

    /// The purges made lately, ordered against the reads and fills around them.
    pub fn purged(&self) -> &Arc<Purged> {
        &self.inner.purged
    }

    /// The cached answer for `key`, whatever its freshness, as the store holds it
    /// (for inspection; requests read through [`held`](Self::held)).
    pub async fn get(&self, key: &str) -> Option<Arc<CachedBody>> {
        match self.inner.entries.get(key).await {
            Some(entry) => Some(entry),
            None => self.inner.first_asks.peek(key, Instant::now()),
        }
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
                let Some(entry) = inner.entries.get(key).await else {
                    return self.inner.first_ask(key);
                };
                inner
                    .hot
                    .hold(key, version, &entry, weight(key, &entry), now_secs);
                Some(entry)
            }
        }
    }

    /// Drops one key, from the disk tier too; whether memory held it. An answer
    /// read or fetched before it and stored after it is taken out again.
    pub async fn invalidate(&self, key: &str) -> bool {
        let _purging = self.inner.purged.key(key);
        if let Some(disk) = &self.inner.disk {
            disk.delete(key).await;
        }
        let dropped = self.inner.entries.remove(key).await.is_some();
        self.inner.hot.changed(key);
        self.inner.first_asks.remove(key) || dropped
    }

    /// Drops every key `purge` covers; returns those dropped. A walk over the
    /// keys (an operator's purge, not a request path). An answer read or fetched
    /// before it and stored after it is taken out again.
    pub async fn invalidate_matching(&self, purge: &Purge) -> Vec<String> {
        let _purging = self.inner.purged.matching(purge);
        let keys: Vec<String> = self
            .inner
            .entries
            .iter()
            .filter(|(key, _)| purge.matches(key))
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
        // A key held both ways (for the moment it moves into moka) counts once.
        let mut first_asks = self
            .inner
            .first_asks
            .remove_matching(|key| purge.matches(key));
        if !first_asks.is_empty() {
            let known: std::collections::HashSet<&String> = dropped.iter().collect();
            first_asks.retain(|key| !known.contains(key));
            dropped.append(&mut first_asks);
        }
        dropped
    }

    /// Every key cached now (for inspection; a walk over the store).
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .inner
            .entries
            .iter()
            .map(|(key, _)| String::clone(&key))
            .collect();
        keys.extend(self.inner.first_asks.keys(Instant::now()));
        keys
    }

    /// Whether a fill for `key` is under way.
    pub fn is_filling(&self, key: &str) -> bool {
        self.inner.flights.contains(key)
    }

    /// How many requests wait on the fill of `key` now (0 when none is under way).
    pub fn waiters(&self, key: &str) -> usize {
        self.inner.flights.waiters(key)
    }

    /// Where the flights of `key` stand: taken before the store is read for a fill
    /// that may follow ([`Seen`]).
    pub fn mark(&self, key: &str) -> Mark {
        self.inner.flights.mark(key)
    }

    /// Number of entries (approximate until moka's pending tasks run, and
    /// counting first asks' expired "not found"s until their places are taken).
    pub fn entry_count(&self) -> u64 {
        self.inner.entries.entry_count() + self.inner.first_asks.len()
    }

    /// Entries evicted to make room (not those that expired or were purged).
    pub fn evictions(&self) -> u64 {
        self.inner.evictions.load(Ordering::Relaxed)
    }

    /// Upstream "not found" answers relayed without being kept: first asks under
    /// `freshness.negative_keep = "second_ask"`.
    pub fn negatives_relayed(&self) -> u64 {
        self.inner.negatives_relayed.load(Ordering::Relaxed)
    }

    /// The capacity, `cache.max_bytes`.
    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes
    }

    /// Weighted size in bytes (approximate, as `entry_count`).
    pub fn weighted_size(&self) -> u64 {
        self.inner.entries.weighted_size() + self.inner.first_asks.weight()
    }

    /// Runs moka's pending maintenance every [`TIDY_EVERY`] until `stop`, on the
    /// cache's tracker.
    pub fn keep_tidy(&self, stop: CancellationToken) {
        let entries = self.inner.entries.clone();
        self.inner.tracker.spawn(async move {
            let mut tick = tokio::time::interval(TIDY_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => entries.run_pending_tasks().await,
                    () = stop.cancelled() => return,
                }
            }
        });
    }

    /// Runs moka's pending maintenance (tests and the status page use it for exact counts).
    pub async fn sync(&self) {
        self.inner.entries.run_pending_tasks().await;
    }

    /// Fills `key` through one upstream request shared by every concurrent caller.
    ///
    /// The first caller of a key starts a flight that later callers join (no lock is
    /// held across an await). The flight's work is driven by the callers that wait
    /// on it, and by a task of its own once the caller that started it goes away
    /// ([`Driven`]), or from the start when it asks for one ([`FillTask::Own`]): a
    /// caller that goes away does not cancel the request the others wait on. It
    /// first looks at
    /// what the store holds and uses it when `usable` says it will do: that closes
    /// the race where another fill landed between a caller's lookup and its flight
    /// (a flight ends only after its answer is stored). A successful body is stored
    /// before any waiter is released; errors are not stored.
    /// The answer is stored with the compressed copies wanted lately; see
    /// [`fill_wanting`](Self::fill_wanting).
    pub async fn fill<F, Fut>(
        &self,
        key: &str,
        usable: impl Fn(&CachedBody) -> bool + Send + 'static,
        fetch: F,
    ) -> (Result<Arc<CachedBody>, FetchError>, FillRole)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<CachedBody, FetchError>> + Send + 'static,
    {
        let task = FillTask::Starters;
        let how = (Want::Lately, task, None, NegativeKeep::FirstAsk);
        self.fill_wanting(key, how, usable, |_, _| fetch()).await
    }

    /// [`fill`](Self::fill), its answer stored with the compressed copies `want`
    /// names (those of the caller that starts the flight; a caller that joins it
    /// takes what it makes), on `task`, and `fetch` handed what the store holds
    /// that will not do, if anything (the entry its answer would replace: the
    /// read-through keeps a found answer from a "not found" with it), and the key.
    /// What the caller `seen` stands for the store's read when no flight ended
    /// since; `negatives` says when a "not found" is kept.
    pub async fn fill_wanting<F, Fut>(
        &self,
        key: &str,
        (want, task, seen, negatives): (Want, FillTask, Option<Seen>, NegativeKeep),
        usable: impl Fn(&CachedBody) -> bool + Send + 'static,
        fetch: F,
    ) -> (Result<Arc<CachedBody>, FetchError>, FillRole)
    where
        F: FnOnce(Option<Arc<CachedBody>>, Arc<str>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<CachedBody, FetchError>> + Send + 'static,
    {
        let (flight, leader, link) = self.inner.flights.join_or_start(key, |id, key| {
            // The fill's span, a child of the starting caller's (a request's, or
            // none for background work); later callers' waits link to it.
            let (span, link) = crate::telemetry::fill_span(&key);
            let inner = Arc::clone(&self.inner);
            // Before the fetch: a purge made after it covers the answer.
            let since = Stamp::now();
            let ending = Ending::new(Arc::clone(&self.inner.flights), Arc::clone(&key), id);
            // Under the shard's lock: no flight of it ends before this one is
            // registered, so none is missed between the two.
            let known = seen
                .filter(|seen| !self.inner.flights.ended_since(seen.mark))
                .map(|seen| seen.held);
            let work = async move {
                let held = match known {
                    Some(held) => held,
                    None => match inner.entries.get(ending.key()).await {
                        Some(held) => Some(held),
                        None => inner.first_asks.peek(ending.key(), Instant::now()),
                    },
                };
                if let Some(entry) = held.as_ref()
                    && usable(entry)
                {
                    return Ok(Filled {
                        entry: Arc::clone(entry),
                        fetched: false,
                        kept: true,
                    });
                }
                // A "not found" for a key the store holds nothing of is a first ask.
                let first_ask = held.is_none() && negatives == NegativeKeep::FirstAsk;
                // Boxed: the fetch's state (the upstream client's futures, several
                // KB) would otherwise be copied each time the flight is moved; and
                // made in its box, not copied into it.
                let entry = Arc::new(crate::inplace::boxed(|| fetch(held, key)).await?);
                inner.compressor.make_wanted(&entry, want).await;
                let kept = inner.keeps(ending.key(), &entry, negatives);
                if kept && first_ask && inner.first_asks.takes(ending.key(), &entry) {
                    inner.hold_first_ask(ending.key(), &entry, since);
                } else if kept {
                    inner.keep(ending.key(), &entry, since).await;
                } else {
                    inner.negatives_relayed.fetch_add(1, Ordering::Relaxed);
                }
                // The flight ends here, after the insert: a caller that finds no
                // flight is sure to find the answer in `entries` (if it was kept).
                drop(ending);
                Ok(Filled {
                    entry,
                    fetched: true,
                    kept,
                })
            };
            // Run by the callers that wait on it (`Driven`): a fill that panics
            // fails them all, as a task of its own would have, and ends its flight.
            let flight = std::panic::AssertUnwindSafe(work.instrument(span))
                .catch_unwind()
                .map(|ended| {
                    ended.unwrap_or_else(|_| {
                        tracing::error!("cache fill panicked");
                        Err(FetchError::Unreachable)
                    })
                })
                .boxed()
                .shared();
            (flight, link)
        });
        let result = if leader && task == FillTask::Own {
            let tracker = &self.inner.tracker;
            // The flight moves to the task: the one clone left waits on it.
            let fill = tracker.spawn(flight);
            fill.await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "cache fill task failed");
                Err(FetchError::Unreachable)
            })
        } else if leader {
            Driven::new(flight, self.inner.tracker.clone()).await
        } else {
            flight.instrument(crate::telemetry::wait_span(&link)).await
        };
        let role = match &result {
            Ok(filled) if leader && !filled.fetched => FillRole::Found,
            Ok(filled) if leader && !filled.kept => FillRole::Relayed,
            _ if leader => FillRole::Leader,
            _ => FillRole::Joined,
        };
        (result.map(|filled| filled.entry), role)
    }
}

mod promote;
mod table;

#[cfg(test)]
pub(crate) mod tests;
