//! Reads from the disk tier after a memory miss: the record, the compressed
//! copies its clients want, and whether memory takes it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use super::{Cache, Inner};
use crate::cache::compress::Want;
use crate::cache::disk::Disk;
use crate::cache::entry::{CachedBody, weight};
use crate::cache::freshness::Policy;
use crate::cache::purged::Stamp;

impl Inner {
    /// The record of `key` from `disk`, with the compressed copies clients want
    /// made; a copy made here goes back to the disk with the record (`since`: when
    /// the read began, see [`Inner::keep`]).
    async fn read_disk(
        &self,
        disk: &Disk,
        key: &str,
        policy: &Policy,
        now: DateTime<Utc>,
        since: Stamp,
    ) -> Option<Arc<CachedBody>> {
        let entry = Arc::new(disk.get(key, policy, now).await?);
        let copies = entry.copies_made();
        self.compressor.make_wanted(&entry, Want::Lately).await;
        if entry.copies_made() > copies {
            // The next read of this record (after memory lets it go, or a
            // restart) is served these copies without compressing.
            disk.put_copies(key, &entry, since);
        }
        Some(entry)
    }
}

impl Cache {
    /// Reads `key` from the disk tier after a memory miss, into memory while memory
    /// has room or when the key was read from the disk within memory's turnover
    /// ([`Doorkeeper`]): then one disk read per key however many callers miss at once
    /// (moka's coalesced insert). The entry if the disk holds one that may be served
    /// at `now` under `policy`.
    pub async fn promote(
        &self,
        key: &str,
        policy: &Policy,
        now: DateTime<Utc>,
    ) -> Option<Arc<CachedBody>> {
        let inner = &*self.inner;
        let disk = inner.disk.as_ref()?;
        let again = inner
            .doorkeeper
            .read_again(key, inner.entries.entry_count());
        let room = inner.entries.weighted_size() + inner.max_entry
            <= inner.max_bytes - inner.first_asks.budget();
        if !again && !room {
            return inner.read_disk(disk, key, policy, now, Stamp::now()).await;
        }
        // An entry too large for memory is served without being kept.
        let unkept = std::sync::Mutex::new(None);
        // When this caller's read began, if it made the read (others join it).
        let read_at = std::sync::Mutex::new(None);
        let kept = inner
            .entries
            .optionally_get_with(key.to_owned(), async {
                // Before the read: a purge made after it covers a record written
                // again with new copies, and the entry put in memory.
                let since = Stamp::now();
                *read_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(since);
                let entry = inner.read_disk(disk, key, policy, now, since).await?;
                if weight(key, &entry) <= inner.max_entry {
                    Some(entry)
                } else {
                    *unkept.lock().unwrap_or_else(|e| e.into_inner()) = Some(entry);
                    None
                }
            })
            .await;
        // Counted and settled by the caller that read and inserted it, not by those
        // that joined its read or found it inserted meanwhile.
        if let Some(entry) = &kept
            && let Some(since) = read_at.into_inner().unwrap_or_else(|e| e.into_inner())
        {
            disk.stats().promoted.fetch_add(1, Ordering::Relaxed);
            // Before anything that waits, and on a task of its own: a caller dropped
            // at an await (its client gone) must not leave in memory an answer a
            // purge covered. A fill's `keep` runs in its flight, which always ends.
            if inner.purged.since(key, since) {
                let (this, key, entry) =
                    (Arc::clone(&self.inner), key.to_owned(), Arc::clone(entry));
                let unkept = inner
                    .tracker
                    .spawn(async move { this.unkeep(&key, &entry, since).await });
                let _ = unkept.await;
            }
            inner.settle(weight(key, entry)).await;
        }
        kept.or_else(|| unkept.into_inner().unwrap_or_else(|e| e.into_inner()))
    }
}
