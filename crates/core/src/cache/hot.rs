//! The hot set: the store's recently read entries by key, in a fixed table
//! read without a lock, so a hit on a hot key does not go through moka: its
//! concurrent map, epoch guard, read log and clock took 3.7 % of the server's CPU
//! under load on a small hit, about a third of a microsecond a request.
//!
//! The table is only a shortcut to what moka holds. Every change to a key in the
//! store (insert, removal, eviction, expiry) bumps the version of the key's slot
//! after it is made, and a slot's entry is used only while it was read under the
//! slot's current version: a read never answers with an entry that was replaced or
//! dropped before it began. A key that hashes to the slot of a key that changes
//! often only goes to moka more often.
//!
//! moka still learns which keys are read: a slot's first hit in each second of the
//! caller's clock is also read through moka, so its recency and frequency keep a
//! hot key from being evicted in favour of cold ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::cache::entry::CachedBody;
use mdproxy_slots::{Slots, Version};

/// Slots in the table.
const SLOTS: usize = 1024;

/// An entry is held only when it weighs at most `max_bytes / HELD_SHARE` (512 KiB
/// of the default 256 MiB: a weekly K-line with its gzip, brotli and zstd copies,
/// some 290 KB, a dashboard's heaviest hot answer). The table keeps no entry that
/// moka dropped but for a moment: a change lets go of the key's entry, and a read
/// that raced the change lets go of what it put there itself (see
/// [`Slots::hold`]). Even a moment when every slot kept one would not take more
/// than twice the store's bound.
const HELD_SHARE: u64 = (SLOTS / 2) as u64;

/// One key's entry.
struct Held {
    key: Box<str>,
    entry: Arc<CachedBody>,
    /// The caller's second (Unix time) when moka last saw a read of the key.
    told: AtomicI64,
}

/// What a look in the table found.
pub enum Found {
    /// The entry; `tell` says whether moka should see this read too.
    Held { entry: Arc<CachedBody>, tell: bool },
    /// Not held (or held under an older version): read moka, then [`Hot::hold`]
    /// what it gives, with this version.
    Missing { version: Version },
}

/// The table.
pub struct Hot {
    slots: Slots<Held>,
    /// Heaviest entry held (see [`HELD_SHARE`]).
    max_weight: u64,
}

impl Hot {
    /// A table in front of a store bounded by `max_bytes`.
    pub fn new(max_bytes: u64) -> Hot {
        Hot {
            slots: Slots::new(SLOTS),
            max_weight: max_bytes / HELD_SHARE,
        }
    }

    /// The entry held for `key`, read at `now_secs` (Unix seconds of the caller's
    /// clock).
    pub fn get(&self, key: &str, now_secs: i64) -> Found {
        let hash = self.slots.hash(key);
        let found = self.slots.read(
            hash,
            |held| *held.key == *key,
            |held| {
                let tell = held.told.load(Ordering::Relaxed) < now_secs;
                if tell {
                    held.told.store(now_secs, Ordering::Relaxed);
                }
                Found::Held {
                    entry: Arc::clone(&held.entry),
                    tell,
                }
            },
        );
        found.unwrap_or_else(|version| Found::Missing { version })
    }

    /// Holds `entry` (read from moka for `key` under `version`), when it is light
    /// enough.
    pub fn hold(
        &self,
        key: &str,
        version: Version,
        entry: &Arc<CachedBody>,
        weight: u64,
        now_secs: i64,
    ) {
        if weight > self.max_weight {
            return;
        }
        let held = Held {
            key: key.into(),
            entry: Arc::clone(entry),
            told: AtomicI64::new(now_secs),
        };
        self.slots.hold(self.slots.hash(key), version, held);
    }

    /// Says that `key` changed in the store: what its slot holds is read from moka
    /// again, and an entry held for it is let go. Call it after the change is made.
    pub fn changed(&self, key: &str) {
        self.slots
            .changed(self.slots.hash(key), |held| *held.key == *key);
    }

    /// Whether the slot of `key` keeps an entry for it, usable or not.
    #[cfg(test)]
    pub fn keeps(&self, key: &str) -> bool {
        self.slots
            .keeps(self.slots.hash(key), |held| *held.key == *key)
    }
}
