//! The upstream's "not found" answers kept from their first ask, in a fixed table
//! beside moka rather than in it. A scan of codes asked once each (a crawler walking
//! every six-digit code) cost moka an insert, its upkeep and in time an eviction a
//! code: about a third of such a miss's CPU, and more of its gap to nginx
//! (docs/BENCHMARKS.md, "Where the relayed 404 goes"). Held here, a first ask costs a
//! lock of one small bucket; a code found here was asked again, and the store moves
//! it into moka, where a code asked repeatedly stays however many others a scan
//! brings.
//!
//! A key hashes to one bucket of [`WAYS`] entries, each bucket under a lock of its
//! own; a new entry takes the place of its own key's, else of an expired one, else of
//! the one that expires first. The table's most memory, its [`budget`](FirstAsks::budget),
//! is taken from what moka may hold, so `cache.max_bytes` bounds both.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::cache::entry::{CachedBody, weight};

/// Entries a bucket holds.
const WAYS: usize = 4;

/// The heaviest entry the table takes, key and overhead counted (an upstream 404
/// weighs about 700 bytes); a heavier one goes to moka.
const MAX_WEIGHT: u64 = 2048;

/// The table's share of `cache.max_bytes`: a sixteenth (16 MiB, 8,192 entries, of
/// the default 256 MiB). A store under 128 KiB has no table.
const SHARE: u64 = 16;

/// The most buckets (65,536 entries, from a `max_bytes` of 2 GiB up).
const MAX_BUCKETS: usize = 1 << 14;

/// One key's entry.
struct Held {
    key: Box<str>,
    entry: Arc<CachedBody>,
    /// Past it the entry is gone (its `keep_for` from when it was put).
    until: Instant,
    /// Whether a read found it since it was put.
    read: bool,
    /// Its weight when it was put, as counted in [`FirstAsks::weight`].
    weight: u64,
}

/// What [`FirstAsks::get_now`] found.
pub struct Found {
    pub entry: Arc<CachedBody>,
    /// The entry's first read since it was put: its key was asked again.
    pub first_read: bool,
}

/// The table. Shared by the store's clones.
pub struct FirstAsks {
    buckets: Box<[Mutex<[Option<Held>; WAYS]>]>,
    hasher: foldhash::fast::RandomState,
    /// Entries held, expired ones until they are replaced or read.
    held: AtomicU64,
    /// Their weight.
    bytes: AtomicU64,
}

impl FirstAsks {
    /// A table for a store bounded by `max_bytes`: a power of two of buckets
    /// within [`SHARE`] of it, or none.
    pub fn new(max_bytes: u64) -> FirstAsks {
        let fits = max_bytes / SHARE / MAX_WEIGHT / WAYS as u64;
        let buckets = match usize::try_from(fits).unwrap_or(usize::MAX) {
            0 => 0,
            n => 1 << n.min(MAX_BUCKETS).ilog2(),
        };
        FirstAsks {
            buckets: (0..buckets).map(|_| Mutex::default()).collect(),
            hasher: foldhash::fast::RandomState::default(),
            held: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// The most memory the table holds: taken from moka's bound.
    pub fn budget(&self) -> u64 {
        self.buckets.len() as u64 * WAYS as u64 * MAX_WEIGHT
    }

    /// Whether the table would hold `entry` under `key`: a "not found" light enough,
    /// in a table that has room for any.
    pub fn takes(&self, key: &str, entry: &CachedBody) -> bool {
        !self.buckets.is_empty() && entry.status == 404 && weight(key, entry) <= MAX_WEIGHT
    }

    /// Holds `entry` under `key` from `now` for its `keep_for`, in place of the
    /// key's entry, else of an expired one or the one that expires first. Call it
    /// only when [`takes`](Self::takes) says so.
    pub fn put(&self, key: &str, entry: &Arc<CachedBody>, now: Instant) {
        let Some(mut bucket) = self.bucket(key) else {
            return;
        };
        let at = bucket
            .iter()
            .position(|held| held.as_ref().is_some_and(|held| *held.key == *key))
            .or_else(|| {
                bucket
                    .iter()
                    .position(|held| held.as_ref().is_none_or(|held| held.until <= now))
            })
            .unwrap_or_else(|| {
                (0..WAYS)
                    .min_by_key(|&at| bucket[at].as_ref().map(|held| held.until))
                    .unwrap_or(0)
            });
        let held = Held {
            key: key.into(),
            entry: Arc::clone(entry),
            until: now + entry.keep_for,
            read: false,
            weight: weight(key, entry),
        };
        self.count_in(&held);
        self.count_out(bucket[at].replace(held).as_ref());
    }

    /// The entry held for `key` now, if it has not expired, read by a request: its
    /// next read is not its first. The clock is read only when the key is held (a
    /// miss of a key the table does not hold reads none).
    pub fn get_now(&self, key: &str) -> Option<Found> {
        self.find(key, Instant::now, true)
    }

    /// The entry held for `key` at `now`, without counting as a read (an
    /// inspection, or a fill looking at what the store holds before it asks the
    /// upstream).
    pub fn peek(&self, key: &str, now: Instant) -> Option<Arc<CachedBody>> {
        self.find(key, || now, false).map(|found| found.entry)
    }

    /// Whether `key`'s entry is `entry` itself (not one put since, nor dropped).
    pub fn holds(&self, key: &str, entry: &Arc<CachedBody>) -> bool {
        self.bucket(key).is_some_and(|bucket| {
            bucket
                .iter()
                .flatten()
                .any(|held| *held.key == *key && Arc::ptr_eq(&held.entry, entry))
        })
    }

    fn find(&self, key: &str, now: impl FnOnce() -> Instant, read: bool) -> Option<Found> {
        let mut bucket = self.bucket(key)?;
        let slot = bucket
            .iter_mut()
            .find(|held| held.as_ref().is_some_and(|held| *held.key == *key))?;
        let held = slot.as_mut()?;
        if held.until <= now() {
            self.count_out(slot.take().as_ref());
            return None;
        }
        let first_read = read && !std::mem::replace(&mut held.read, true);
        Some(Found {
            entry: Arc::clone(&held.entry),
            first_read,
        })
    }

    /// Drops `key`'s entry; whether there was one (expired or not).
    pub fn remove(&self, key: &str) -> bool {
        self.remove_where(key, |_| true)
    }

    /// Drops `key`'s entry if it is `entry` itself (not one put since).
    pub fn remove_if(&self, key: &str, entry: &Arc<CachedBody>) -> bool {
        self.remove_where(key, |held| Arc::ptr_eq(held, entry))
    }

    fn remove_where(&self, key: &str, is: impl Fn(&Arc<CachedBody>) -> bool) -> bool {
        let Some(mut bucket) = self.bucket(key) else {
            return false;
        };
        let Some(slot) = bucket.iter_mut().find(|held| {
            held.as_ref()
                .is_some_and(|held| *held.key == *key && is(&held.entry))
        }) else {
            return false;
        };
        self.count_out(slot.take().as_ref());
        true
    }

    /// Drops every entry whose key `matches`; returns their keys (a walk over the
    /// table: an operator's purge).
    pub fn remove_matching(&self, matches: impl Fn(&str) -> bool) -> Vec<String> {
        let mut dropped = Vec::new();
        for bucket in &self.buckets {
            let mut bucket = bucket.lock().unwrap_or_else(PoisonError::into_inner);
            for slot in bucket.iter_mut() {
                if slot.as_ref().is_some_and(|held| matches(&held.key)) {
                    let gone = slot.take();
                    self.count_out(gone.as_ref());
                    dropped.extend(gone.map(|held| held.key.into_string()));
                }
            }
        }
        dropped
    }

    /// The keys of the entries held at `now` (a walk over the table).
    pub fn keys(&self, now: Instant) -> Vec<String> {
        let mut keys = Vec::new();
        for bucket in &self.buckets {
            let bucket = bucket.lock().unwrap_or_else(PoisonError::into_inner);
            keys.extend(
                bucket
                    .iter()
                    .flatten()
                    .filter(|held| held.until > now)
                    .map(|held| held.key.to_string()),
            );
        }
        keys
    }

    /// Entries held (expired ones too, until they are replaced or read).
    pub fn len(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Their weight, as moka weighs its entries.
    pub fn weight(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn bucket(&self, key: &str) -> Option<MutexGuard<'_, [Option<Held>; WAYS]>> {
        if self.buckets.is_empty() {
            return None;
        }
        // A power of two of buckets: the hash's low bits pick one.
        let at = self.hasher.hash_one(key) as usize & (self.buckets.len() - 1);
        Some(
            self.buckets[at]
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Counts `held`, just put.
    fn count_in(&self, held: &Held) {
        self.held.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(held.weight, Ordering::Relaxed);
    }

    /// Counts out what a slot gave up, if anything.
    fn count_out(&self, gone: Option<&Held>) {
        if let Some(gone) = gone {
            self.held.fetch_sub(1, Ordering::Relaxed);
            self.bytes.fetch_sub(gone.weight, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
