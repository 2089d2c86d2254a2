//! The disk tier under the memory cache (`cache.disk_path`, bounded by
//! `cache.disk_bytes`): foyer's block engine holds the records ([`format`]) in
//! preallocated block files with its own index, eviction and recovery. Writes go
//! through a bounded queue to one writer task (a full queue drops the write, never
//! the request); reads check every record and drop what is damaged, foreign, expired
//! or purged ([`purges`]). A failing disk (full, erroring, its directory gone) stops
//! writes with one warning until it takes them again ([`health`]); the tier lives in
//! a directory of its own, one process at a time ([`place`]). What to read or write,
//! and when, is the store's business.

pub mod format;
mod health;
pub mod io;
pub mod metrics;
pub mod place;
pub mod purges;
pub mod tally;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
// Records as the engine stores them: our bytes, written and read as they are. A read
// shares the engine's read buffer instead of copying it and skips the engine's
// checksum of the entry: `format::decode` checks every byte served (header and
// bodies, xxh3: 8 % of a disk hit's CPU in the profile, where the engine's XxHash64
// of the same bytes was 14 %; docs/BENCHMARKS.md, the disk tier).
use foyer_storage::SelfCheckedBytes as Record;

use crate::cache::entry::CachedBody;
use crate::cache::freshness::{Freshness, Policy};
use crate::cache::purged::{Purged, Stamp};
use crate::stats::histogram::Histogram;
pub use format::Refused;
pub use purges::Pattern;

/// Block size of the engine on a disk of a GiB or more: its unit of eviction (a
/// record is at most a write buffer, [`MAX_WRITE_BUFFER`]).
const BLOCK_BYTES: usize = 16 << 20;
/// Smallest block on a small disk (K-lines reach 650 KB).
const MIN_BLOCK_BYTES: usize = 1 << 20;
/// A disk holds at least this many blocks: one is being written, one is being
/// reclaimed, the rest hold records.
const MIN_BLOCKS: usize = 16;
/// Largest write buffer, of which the engine keeps two, and so (less the block's
/// overhead) the largest record the disk takes. The largest answers of the API,
/// minute K-lines over the quarter the source keeps, are about 1.1 MB, 1.5 MB with
/// a compressed copy: 4 MiB leaves them room while sparing a node 10 MiB (at
/// `max_bytes` 64 MiB) to 24 MiB (from 128 MiB up) that buffers sized to the
/// largest answer memory keeps would hold (docs/BENCHMARKS.md, the disk tier's run
/// 9). A larger answer stays in memory alone, counted as too large.
const MAX_WRITE_BUFFER: usize = 4 << 20;
/// Room in a block for the engine's own headers and blob index.
const BLOCK_OVERHEAD: usize = 64 << 10;
/// Records waiting for the writer task; past this a write is dropped and counted.
const WRITE_QUEUE: usize = 512;
/// Body bytes waiting for the writer task (they stay in memory until written, even
/// once the memory cache let them go); past this a write is dropped and counted.
const WRITE_QUEUE_BYTES: u64 = 8 << 20;
/// Reads under way at once, per core: each holds the engine's read buffer, which
/// the record shares (up to 1.3 MB for the largest K-line), until it is promoted,
/// and on a disk whose blocks are in the page cache a read is CPU work, so more at
/// once only adds memory (docs/BENCHMARKS.md, the disk tier's run 5).
const READS_PER_CORE: usize = 4;
/// An answer whose fresh life is shorter than this is not written: a quote
/// refreshed every few seconds gains nothing from a disk.
const MIN_FRESH_SECS: i64 = 60;

/// Below this, a record read from disk is copied out of the engine's read buffer,
/// which is rounded up to whole 4 KiB pages: a 1 KiB record kept in memory must
/// not hold four. At and above it the slack is at most an eighth of the record.
const SHARE_READS_FROM: usize = 32 << 10;

type Engine = foyer::Store<String, Record, foyer::DefaultHasher, foyer::HybridCacheProperties>;
type Pieces = foyer::Cache<String, Record, foyer::DefaultHasher, foyer::HybridCacheProperties>;

/// A record on its way to the writer task.
struct Queued {
    key: String,
    entry: Arc<CachedBody>,
    /// The stamp its record gets: purge rules issued after it cover the record.
    stamp: Stamp,
    /// The bytes counted in `pending_bytes` when it was queued (a copy made while
    /// it waits is written too, but was not counted).
    bytes: u64,
}

/// What the disk tier counted since start.
#[derive(Debug, Default)]
pub struct DiskStats {
    /// Reads answered with a usable record.
    pub hits: AtomicU64,
    /// Of those, records put in memory (the rest were served from the disk alone:
    /// memory was full and the key not read lately, see the cache's doorkeeper).
    pub promoted: AtomicU64,
    /// Reads that found nothing.
    pub misses: AtomicU64,
    /// Records the engine wrote (counted once it had, and no write failed).
    pub writes: AtomicU64,
    /// Bytes of those records.
    pub written_bytes: AtomicU64,
    /// Records dropped as damaged (checksum or length; the engine's own check of
    /// its entry header counts here too, as a miss of a key its index held).
    pub corrupt: AtomicU64,
    /// Records dropped as shorter than their header says.
    pub truncated: AtomicU64,
    /// Records dropped as another version's or another catalogue's.
    pub foreign: AtomicU64,
    /// Records dropped on read as past their stale-if-error time.
    pub expired: AtomicU64,
    /// Records dropped on read, or not written, because a purge covers them.
    pub purged: AtomicU64,
    /// Answers not written: larger than a block.
    pub too_large: AtomicU64,
    /// Answers not written: the write queue was full (a slow disk).
    pub queue_full: AtomicU64,
    /// Answers not written: the disk was failing, or a write of theirs failed.
    pub write_failures: AtomicU64,
    /// Reads the engine failed (an I/O error): answered as misses.
    pub read_errors: AtomicU64,
    /// Time a read took, hit or miss.
    pub read_latency: Histogram,
}

/// The disk tier. Cheap to clone.
#[derive(Clone)]
pub struct Disk {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    pieces: Pieces,
    purges: purges::Purges,
    /// Records and bytes written over the tier's life (the estimate of what it holds).
    tally: tally::Tally,
    /// The lock on the directory, and its identity at open.
    hold: place::Hold,
    path: PathBuf,
    capacity: u64,
    max_record: usize,
    /// The engine's write buffer.
    buffer: usize,
    /// Records on their way to the writer task.
    queue: mpsc::Sender<Queued>,
    /// Permits of the reads under way ([`READS_PER_CORE`]).
    reads: tokio::sync::Semaphore,
    /// Purges made lately: a record queued from before one that covers it is not
    /// written (memory shares it, [`Disk::purged`]).
    purged: Arc<Purged>,
    /// Records queued and not yet handed to the engine.
    pending: AtomicU64,
    /// Their body bytes.
    pending_bytes: AtomicU64,
    /// Cleared while the disk fails (a write failed, or the probe): nothing is
    /// queued or handed to the engine ([`health`]).
    writable: AtomicBool,
    /// Why, while it is cleared.
    failure: std::sync::Mutex<Option<String>>,
    /// A purge rule could not be saved since start: it holds until a restart only.
    rules_lost: AtomicBool,
    /// How long the engine took to open (its index rebuilt from the blocks).
    opened_in: Duration,
    stats: DiskStats,
    /// How the engine's reads went: in place from the page cache, or by its pool.
    read_paths: Arc<io::ReadPaths>,
    /// The engine's writes that failed, since the writer or the probe last looked.
    write_faults: Arc<io::WriteFaults>,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk")
            .field("path", &self.inner.path)
            .field("capacity", &self.inner.capacity)
            .finish_non_exhaustive()
    }
}

/// Why the disk tier could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot use {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("the disk engine refused {path}: {source}")]
    Engine { path: String, source: foyer::Error },
    /// Another process holds the directory, or its lock file cannot be made.
    #[error(transparent)]
    Hold(#[from] place::HoldError),
}

impl Disk {
    /// Opens (or creates) the tier at `path`, at most `capacity` bytes, its index
    /// rebuilt from what an earlier run left, its records up to a little over
    /// `largest` bytes (the largest answer memory keeps), never over
    /// [`MAX_WRITE_BUFFER`]; the writer and the probe run on `tracker` until `stop`,
    /// when what is queued is written and the engine closed.
    ///
    /// # Errors
    /// When the directory cannot be created or written, or the engine cannot open
    /// its files: the caller runs without a disk tier.
    pub async fn open(
        path: &Path,
        capacity: u64,
        largest: u64,
        tracker: &TaskTracker,
        stop: CancellationToken,
    ) -> Result<Disk, OpenError> {
        let io = |source| OpenError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(path).map_err(io)?;
        let hold = place::Hold::take(path)?;
        health::probe(path, 0).map_err(|e| io(std::io::Error::other(e)))?;
        let purges = purges::Purges::open(path).map_err(io)?;
        let capacity_usize = usize::try_from(capacity).unwrap_or(usize::MAX);
        let block = if capacity_usize >= BLOCK_BYTES * 64 {
            usize::try_from(place::block_size(capacity, BLOCK_BYTES as u64)).unwrap_or(BLOCK_BYTES)
        } else {
            (capacity_usize / MIN_BLOCKS).max(MIN_BLOCK_BYTES) & !4095
        };
        let buffer = write_buffer(block, largest);
        let started = Instant::now();
        let read_paths = io::ReadPaths::new();
        let write_faults = Arc::new(io::WriteFaults::default());
        let pieces: Pieces = foyer::CacheBuilder::new(WRITE_QUEUE).with_shards(4).build();
        // Buffered files (no `with_direct`): the engine's reads come from the page
        // cache in place when they can ([`io`]).
        let device = foyer::DeviceBuilder::build(
            foyer::FsDeviceBuilder::new(path).with_capacity(capacity_usize),
        )
        .map_err(|source| OpenError::Engine {
            path: path.display().to_string(),
            source,
        })?;
        let engine = foyer::StoreBuilder::new(
            "mdproxy-disk",
            pieces.clone(),
            Arc::new(foyer_common::metrics::Metrics::noop()),
        )
        .with_io_engine_config(io::CachedFirstConfig::new(
            Arc::clone(&read_paths),
            Arc::clone(&write_faults),
        ))
        .with_engine_config(
            foyer::BlockEngineConfig::new(device)
                .with_block_size(block)
                .with_flushers(1)
                .with_reclaimers(1)
                // The engine's memory: two write buffers (one filled while the
                // other is written) and records waiting for them up to a block
                // (past that it drops them).
                .with_buffer_pool_size(buffer)
                .with_submit_queue_size_threshold(block.max(BLOCK_BYTES))
                // Purges and dropped records stay dropped across a restart.
                .with_tombstone_log(true),
        )
        // A damaged block is skipped, not fatal: its records are lost, not served.
        .with_recover_mode(foyer::RecoverMode::Quiet)
        .build()
        .await
        .map_err(|source| OpenError::Engine {
            path: path.display().to_string(),
            source,
        })?;
        let opened_in = started.elapsed();
        let (queue, rx) = mpsc::channel(WRITE_QUEUE);
        let disk = Disk {
            inner: Arc::new(Inner {
                engine,
                pieces,
                purges,
                tally: tally::Tally::open(path),
                hold,
                path: path.to_owned(),
                capacity,
                max_record: buffer - BLOCK_OVERHEAD.min(buffer / 4),
                buffer,
                queue,
                reads: tokio::sync::Semaphore::new(
                    READS_PER_CORE
                        * std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
                ),
                purged: Arc::default(),
                pending: AtomicU64::new(0),
                pending_bytes: AtomicU64::new(0),
                writable: AtomicBool::new(true),
                rules_lost: AtomicBool::new(false),
                failure: std::sync::Mutex::default(),
                opened_in,
                stats: DiskStats::default(),
                read_paths,
                write_faults,
            }),
        };
        tracker.spawn(disk.clone().write_until(rx, stop.clone()));
        tracker.spawn(disk.clone().probe_until(stop));
        tracing::info!(
            path = %path.display(),
            disk_bytes = capacity,
            block_bytes = block,
            open_ms = opened_in.as_millis() as u64,
            "disk tier open"
        );
        Ok(disk)
    }

    /// The record of `key` if it may be served at `now` under `policy` (fresh,
    /// stale or usable on error); a damaged, foreign, expired or purged record is
    /// dropped and counted, and a read error is a miss.
    pub async fn get(&self, key: &str, policy: &Policy, now: DateTime<Utc>) -> Option<CachedBody> {
        let s = &*self.inner;
        let started = Instant::now();
        // The engine drops a record whose entry header is damaged and answers a
        // miss: a miss of a key its index held is counted as such a drop.
        let indexed = s.engine.may_contains(key);
        // Never closed.
        let _permit = s.reads.acquire().await.ok();
        let found = s.engine.load(key).await;
        s.stats.read_latency.observe(started.elapsed());
        let (record, check) = match found {
            Ok(foyer::Load::Entry { value, .. }) => (own_if_small(value.0), format::Check::Full),
            // Still in the engine's write buffer: our own bytes, never on a device.
            Ok(foyer::Load::Piece { piece, .. }) => {
                (piece.value().0.clone(), format::Check::Header)
            }
            Ok(_) => {
                let counter = if indexed {
                    &s.stats.corrupt
                } else {
                    &s.stats.misses
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Err(e) => {
                s.stats.read_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "disk read failed");
                return None;
            }
        };
        let dropped = |counter: &AtomicU64| {
            counter.fetch_add(1, Ordering::Relaxed);
            s.engine.delete(key);
            None
        };
        let decoded = match format::decode(&record, key, policy, check) {
            Ok(decoded) => decoded,
            Err(why) => {
                tracing::debug!(key, why = why.as_str(), "disk record dropped");
                return dropped(match why {
                    Refused::Corrupt => &s.stats.corrupt,
                    Refused::Truncated => &s.stats.truncated,
                    Refused::Foreign => &s.stats.foreign,
                });
            }
        };
        if s.purges.covers(key, decoded.stored_at_us) || purges::outlived(decoded.stored_at_us) {
            return dropped(&s.stats.purged);
        }
        if decoded.entry.lifetimes.decide(now) == Freshness::Expired {
            return dropped(&s.stats.expired);
        }
        s.stats.hits.fetch_add(1, Ordering::Relaxed);
        Some(decoded.entry)
    }

    /// Queues `entry` to be written under `key`, unless it is not worth a disk
    /// (a failure, a "not found", an answer fresh for less than a minute) or came
    /// from this disk. `since` is when its fetch began: a purge made after that
    /// covers the record. Never waits: a full queue or a failing disk drops it.
    pub fn put(&self, key: &str, entry: &Arc<CachedBody>, since: Stamp) {
        if !entry.disk {
            self.queue(key, entry, since);
        }
    }

    /// Queues the record of `entry` again, with the compressed copies it gained
    /// since it was written (or read from this disk), as [`put`](Self::put) would
    /// queue a new one: its readers then get the copies without a compression.
    /// `since` is when the entry was last known unpurged (taken before it was read
    /// or its copy made): a purge issued after that covers the new record too.
    pub fn put_copies(&self, key: &str, entry: &Arc<CachedBody>, since: Stamp) {
        self.queue(key, entry, since);
    }

    fn queue(&self, key: &str, entry: &Arc<CachedBody>, stamp: Stamp) {
        let s = &*self.inner;
        if entry.status != 200
            || (entry.lifetimes.fresh_until - entry.fetched_at).num_seconds() < MIN_FRESH_SECS
        {
            return;
        }
        if !s.writable.load(Ordering::Relaxed) {
            s.stats.write_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if entry.body.len() > s.max_record {
            s.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // A quick copy is never written: the record carries the settled copies.
        let bytes = entry.settled_bytes();
        let queued = s.pending_bytes.fetch_add(bytes, Ordering::Relaxed);
        s.pending.fetch_add(1, Ordering::Relaxed);
        if queued + bytes > WRITE_QUEUE_BYTES.max(bytes)
            || s.queue
                .try_send(Queued {
                    key: key.to_owned(),
                    entry: Arc::clone(entry),
                    stamp,
                    bytes,
                })
                .is_err()
        {
            s.pending.fetch_sub(1, Ordering::Relaxed);
            s.pending_bytes.fetch_sub(bytes, Ordering::Relaxed);
            s.stats.queue_full.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops the record of `key`, for good: the engine's delete, and a rule kept
    /// in the purge file (the delete alone is lost to a restart if its tombstone
    /// was not written: a failing disk, a kill in the next milliseconds). A record
    /// of it still queued from before (a promotion's copy, read before the delete)
    /// is not written back when the delete is made under a purge noted in
    /// [`Disk::purged`], as the cache does.
    pub async fn delete(&self, key: &str) {
        self.inner.engine.delete(key);
        if let Err(e) = self.purge(Pattern::Key(key.to_owned())).await {
            tracing::warn!(error = %e, "disk tier: purge rule not saved (it holds until a restart)");
        }
    }

    /// Whether a purge (a rule, or one made lately) came after `stamp`.
    fn purged_since(&self, key: &str, stamp: Stamp) -> bool {
        let s = &*self.inner;
        s.purges.covers(key, stamp.as_micros()) || s.purged.since(key, stamp)
    }

    /// The purges made lately, which the memory above shares: one noted there
    /// (a key, an endpoint, a prefix) stops a record queued from before it.
    pub fn purged(&self) -> &Arc<Purged> {
        &self.inner.purged
    }

    /// Drops every record `pattern` covers that was stored before now: reads apply
    /// the rule at once, and it is kept in the purge file (written on the blocking
    /// pool, never on a runtime thread) before this returns.
    ///
    /// # Errors
    /// When the rule cannot be written to disk: it applies until a restart.
    pub async fn purge(&self, pattern: Pattern) -> std::io::Result<()> {
        self.inner.purges.add(pattern, Stamp::now().as_micros());
        let inner = Arc::clone(&self.inner);
        let saved = tokio::task::spawn_blocking(move || inner.purges.save())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if saved.is_err() {
            self.inner.rules_lost.store(true, Ordering::Relaxed);
        }
        saved
    }

    /// Whether a purge rule could not be saved since start (it holds until a
    /// restart only): the fleet then stops keeping its place in the purge log, so
    /// that a restart reads that purge again.
    pub fn rules_lost(&self) -> bool {
        self.inner.rules_lost.load(Ordering::Relaxed)
    }

    /// Waits until every record queued so far is on disk (tests and the
    /// benchmark; requests never wait for it).
    pub async fn flush(&self) {
        // Bounded: a writer that stopped (shutdown) leaves records queued.
        for _ in 0..1_000 {
            if self.inner.pending.load(Ordering::Relaxed) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.inner.engine.wait().await;
    }

    /// What was counted.
    pub fn stats(&self) -> &DiskStats {
        &self.inner.stats
    }

    /// How the engine's reads went: in place from the page cache, or by its pool.
    pub fn read_paths(&self) -> &io::ReadPaths {
        &self.inner.read_paths
    }

    /// Where it lives.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// `cache.disk_bytes`.
    pub fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// Bytes its files take on the disk now (allocated blocks, not their
    /// preallocated length: the engine's files are sparse until written).
    pub fn used_bytes(&self) -> u64 {
        used_bytes(&self.inner.path)
    }

    /// About how many records it holds (the engine does not count its index): the
    /// bytes used over the mean room a record took in the tier's life, this run and
    /// those before, and never more than the records it wrote.
    pub fn entries_estimate(&self) -> u64 {
        self.inner.tally.estimate(self.used_bytes())
    }

    /// Whether writes go on (`false` while the disk fails).
    pub fn is_writable(&self) -> bool {
        self.inner.writable.load(Ordering::Relaxed)
    }

    /// How long the engine took to open.
    pub fn opened_in(&self) -> Duration {
        self.inner.opened_in
    }

    /// The purge rules in force.
    pub fn purge_rules(&self) -> usize {
        self.inner.purges.count()
    }
}

/// The engine's write buffer, of which it keeps two: room for a record of `largest`
/// bytes of answer and its header, rounded up to a MiB, at most a block and at most
/// [`MAX_WRITE_BUFFER`]. Sized to the memory cache rather than to the block: a node
/// given 8 MiB of memory (its largest answer 1 MiB) keeps two 2 MiB buffers
/// (docs/BENCHMARKS.md, the disk tier's runs 5 and 9).
fn write_buffer(block: usize, largest: u64) -> usize {
    const MIB: usize = 1 << 20;
    let needed = usize::try_from(largest)
        .unwrap_or(usize::MAX)
        .saturating_add(BLOCK_OVERHEAD)
        .saturating_add(MIB - 1)
        & !(MIB - 1);
    needed.clamp(MIN_BLOCK_BYTES.min(block), block.min(MAX_WRITE_BUFFER))
}

/// A record read from disk, in a buffer of its own when it is small (see
/// [`SHARE_READS_FROM`]).
fn own_if_small(record: Bytes) -> Bytes {
    if record.len() < SHARE_READS_FROM {
        Bytes::copy_from_slice(&record)
    } else {
        record
    }
}

/// Blocks allocated to the files in `dir`, in bytes.
fn used_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.blocks() * 512)
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// A small record read from disk gets a buffer of its own, so a memory cache of
    /// small answers does not hold a page for each; a large one keeps sharing the
    /// engine's read buffer, uncopied.
    #[test]
    fn small_records_leave_the_read_buffer() {
        let page = Bytes::from(vec![7u8; 4096]);
        let small = own_if_small(page.slice(..1000));
        assert_ne!(small.as_ptr(), page.as_ptr());
        let owned = small.try_into_mut().expect("a buffer of its own");
        assert_eq!(owned.capacity(), 1000);

        let read = Bytes::from(vec![7u8; SHARE_READS_FROM + 4096]);
        let large = own_if_small(read.slice(64..64 + SHARE_READS_FROM));
        assert_eq!(large.as_ptr(), read[64..].as_ptr(), "not copied");
        let manual = include_str!("../../../../docs/disk-tier.md");
        let said = format!("a record of {} KiB or more", SHARE_READS_FROM >> 10);
        assert!(manual.contains(&said), "docs/disk-tier.md says {said:?}");
    }

    /// A record read (or its copy made) before a delete of its key is not written
    /// back after it; one queued after the delete (a new fill) is.
    #[tokio::test]
    async fn a_delete_stops_a_record_queued_from_before_it() {
        let dir = std::env::temp_dir().join(format!("mdproxy-disk-delete-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (tracker, stop) = (TaskTracker::new(), CancellationToken::new());
        let disk = Disk::open(&dir, 64 << 20, 1 << 20, &tracker, stop.clone())
            .await
            .unwrap();
        let (entry, policy) = format::tests::entry("{\"data\":[1,2,3]}");
        let entry = Arc::new(entry);
        let now = entry.fetched_at + chrono::Duration::hours(1);

        let since = Stamp::now();
        let purging = disk.purged().key("k");
        disk.delete("k").await;
        drop(purging);
        // Kept in the purge file: the delete outlasts a restart whose engine lost
        // its tombstone.
        let kept = purges::Purges::open(&dir).unwrap();
        assert!(kept.covers("k", since.as_micros()));
        assert!(!kept.covers("other", since.as_micros()));
        disk.put_copies("k", &entry, since);
        disk.flush().await;
        assert!(disk.get("k", &policy, now).await.is_none());
        assert_eq!(disk.stats().purged.load(Ordering::Relaxed), 1);
        assert_eq!(disk.stats().writes.load(Ordering::Relaxed), 0);

        disk.put("k", &entry, Stamp::now());
        disk.flush().await;
        let read = disk
            .get("k", &policy, now)
            .await
            .expect("written after the delete");
        assert_eq!(read.body, entry.body);
        stop.cancel();
        tracker.close();
        tracker.wait().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The write buffer holds the largest answer memory keeps and its header, sized
    /// by the memory cache, never past a block or the cap nor under the smallest
    /// block.
    #[test]
    fn the_write_buffer_follows_the_memory_cache() {
        // 8 MiB of memory: answers up to 1 MiB kept, two 2 MiB buffers.
        assert_eq!(write_buffer(BLOCK_BYTES, MIB as u64), 2 * MIB);
        // 64 MiB (answers up to 8 MiB) and the default 256 MiB: the cap.
        assert_eq!(write_buffer(BLOCK_BYTES, 8 * MIB as u64), MAX_WRITE_BUFFER);
        assert_eq!(write_buffer(BLOCK_BYTES, 32 * MIB as u64), MAX_WRITE_BUFFER);
        assert_eq!(write_buffer(BLOCK_BYTES, u64::MAX), MAX_WRITE_BUFFER);
        // A small disk's block is smaller than the cap.
        assert_eq!(write_buffer(2 * MIB, 8 * MIB as u64), 2 * MIB);
        assert_eq!(write_buffer(4 * MIB, 100 << 10), MIN_BLOCK_BYTES);
        for largest in [0, 1, 100 << 10, 2 * MIB as u64, 3 * MIB as u64] {
            let buffer = write_buffer(BLOCK_BYTES, largest);
            let max_record = buffer - BLOCK_OVERHEAD.min(buffer / 4);
            assert!(max_record as u64 >= largest, "{largest}: {max_record}");
            assert_eq!(buffer % MIB, 0);
        }
        // The largest answer of the API with a compressed copy fits.
        let buffer = write_buffer(BLOCK_BYTES, u64::MAX);
        assert!(buffer - BLOCK_OVERHEAD >= 3 * MIB);
    }
}
