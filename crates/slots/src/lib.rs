//! A fixed table of versioned slots read without a lock: the one structure behind
//! the cache's hot set and the routing memo. A key hashes to one slot; a value is
//! held with the slot version it was made under and used only while that version
//! stands, so a change told to the table (`changed`) is never answered past.
//!
//! The protocol of [`Slots::hold`] and [`Slots::changed`] is checked with loom
//! (`cargo test --features loom --lib slots::`); the feature `without-slot-tables`
//! turns every table into one that holds nothing, so the suite can run without them.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

#[cfg(feature = "loom")]
use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(feature = "loom"))]
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Whether tables hold anything (the feature `without-slot-tables` says no).
const ENABLED: bool = !cfg!(feature = "without-slot-tables");

/// The version of a slot a value was read under (see [`Slots::read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version(u64);

/// One slot: its version and the value held, made under `version`.
struct Slot<V> {
    /// Bumped after every change told for a key of this slot.
    version: AtomicU64,
    held: cell::Cell<Stamped<V>>,
}

/// A value and the slot version it was made under.
pub struct Stamped<V> {
    version: u64,
    value: V,
}

/// The table.
pub struct Slots<V> {
    hasher: foldhash::fast::RandomState,
    slots: Box<[Slot<V>]>,
}

impl<V> Slots<V> {
    /// A table of `n` slots (at least one).
    pub fn new(n: usize) -> Slots<V> {
        Slots {
            hasher: foldhash::fast::RandomState::default(),
            slots: (0..n.max(1))
                .map(|_| Slot {
                    version: AtomicU64::new(0),
                    held: cell::Cell::default(),
                })
                .collect(),
        }
    }

    /// Where `key` lives: a hash of it with the table's own hasher.
    pub fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    fn slot(&self, hash: u64) -> &Slot<V> {
        &self.slots[(hash % self.slots.len() as u64) as usize]
    }

    /// `f` of the value held at `hash` when `is_for` says it is the key's and it was
    /// made under the slot's current version; otherwise the version a value for the
    /// key must be made under, to [`hold`](Self::hold) it.
    pub fn read<R>(
        &self,
        hash: u64,
        is_for: impl FnOnce(&V) -> bool,
        f: impl FnOnce(&V) -> R,
    ) -> Result<R, Version> {
        let slot = self.slot(hash);
        // Loaded before the value: a value held under this version was made after
        // every change told before it.
        let version = slot.version.load(Ordering::Acquire);
        if !ENABLED {
            return Err(Version(version));
        }
        let held = slot.held.load();
        match cell::deref(&held) {
            Some(stamped) if stamped.version == version && is_for(&stamped.value) => {
                Ok(f(&stamped.value))
            }
            _ => Err(Version(version)),
        }
    }

    /// Holds `value`, made for a key at `hash` under `version` (from a
    /// [`read`](Self::read)), in place of what the slot held.
    pub fn hold(&self, hash: u64, version: Version, value: V) {
        if !ENABLED {
            return;
        }
        let slot = self.slot(hash);
        let held = Arc::new(Stamped {
            version: version.0,
            value,
        });
        slot.held.store(Arc::clone(&held));
        // A change told after the value was made let go of what the slot held
        // before this store, and this value may be stale already: let it go too.
        // The fence pairs with `changed`'s: either that sees this value, or this
        // sees its version.
        fence(Ordering::SeqCst);
        if slot.version.load(Ordering::Relaxed) != version.0 {
            let current = slot.held.load();
            if cell::is(&current, &held) {
                slot.held.clear_if(&current);
            }
        }
    }

    /// Tells that the key at `hash` changed: a value made before is never used
    /// again, and the one held for it (`is_for`) is let go. Call it after the change.
    pub fn changed(&self, hash: u64, is_for: impl FnOnce(&V) -> bool) {
        let slot = self.slot(hash);
        slot.version.fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        let held = slot.held.load();
        if cell::deref(&held).is_some_and(|stamped| is_for(&stamped.value)) {
            // Only if no read has put another value there meanwhile.
            slot.held.clear_if(&held);
        }
    }

    /// Whether the slot at `hash` holds a value `is_for` accepts, current or not.
    pub fn keeps(&self, hash: u64, is_for: impl FnOnce(&V) -> bool) -> bool {
        let held = self.slot(hash).held.load();
        cell::deref(&held).is_some_and(|stamped| is_for(&stamped.value))
    }
}

/// The slot's value cell: an `ArcSwapOption`, read without a lock.
#[cfg(not(feature = "loom"))]
mod cell {
    use std::sync::Arc;

    use arc_swap::{ArcSwapOption, Guard};

    pub struct Cell<T>(ArcSwapOption<T>);

    impl<T> Default for Cell<T> {
        fn default() -> Cell<T> {
            Cell(ArcSwapOption::empty())
        }
    }

    pub type Loaded<T> = Guard<Option<Arc<T>>>;

    impl<T> Cell<T> {
        pub fn load(&self) -> Loaded<T> {
            self.0.load()
        }

        pub fn store(&self, value: Arc<T>) {
            self.0.store(Some(value));
        }

        /// Empties the cell if it still holds what `loaded` saw.
        pub fn clear_if(&self, loaded: &Loaded<T>) {
            let _ = self.0.compare_and_swap(loaded, None);
        }
    }

    pub fn deref<T>(loaded: &Loaded<T>) -> Option<&T> {
        loaded.as_deref()
    }

    pub fn is<T>(loaded: &Loaded<T>, value: &Arc<T>) -> bool {
        loaded.as_ref().is_some_and(|held| Arc::ptr_eq(held, value))
    }
}

/// The value cell under loom: the index of the value in the cell's own list, in a
/// loom atomic (loom cannot see inside `ArcSwapOption`), with the weakest orderings
/// `ArcSwapOption` gives (acquire loads, release stores, acquire-release swaps), so
/// the protocol is checked under no more help than it has.
#[cfg(feature = "loom")]
mod cell {
    use std::sync::Arc;

    use loom::sync::Mutex;
    use loom::sync::atomic::{AtomicUsize, Ordering};

    pub struct Cell<T> {
        /// 0: empty; n: `values[n - 1]`.
        index: AtomicUsize,
        /// Every value stored, in order. Only the storing thread writes it, before
        /// it publishes the index; readers take a clone of the list's entry.
        values: Mutex<Vec<Arc<T>>>,
    }

    impl<T> Default for Cell<T> {
        fn default() -> Cell<T> {
            Cell {
                index: AtomicUsize::new(0),
                values: Mutex::new(Vec::new()),
            }
        }
    }

    pub struct Loaded<T> {
        index: usize,
        value: Option<Arc<T>>,
    }

    impl<T> Cell<T> {
        pub fn load(&self) -> Loaded<T> {
            let index = self.index.load(Ordering::Acquire);
            let value = index
                .checked_sub(1)
                .map(|i| Arc::clone(&self.values.lock().unwrap()[i]));
            Loaded { index, value }
        }

        pub fn store(&self, value: Arc<T>) {
            let index = {
                let mut values = self.values.lock().unwrap();
                values.push(value);
                values.len()
            };
            self.index.store(index, Ordering::Release);
        }

        pub fn clear_if(&self, loaded: &Loaded<T>) {
            let _ =
                self.index
                    .compare_exchange(loaded.index, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    pub fn deref<T>(loaded: &Loaded<T>) -> Option<&T> {
        loaded.value.as_deref()
    }

    pub fn is<T>(loaded: &Loaded<T>, value: &Arc<T>) -> bool {
        loaded.value.as_ref().is_some_and(|v| Arc::ptr_eq(v, value))
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    fn table() -> (Slots<(&'static str, u32)>, u64) {
        let t = Slots::new(1);
        let h = t.hash("k");
        (t, h)
    }

    #[cfg_attr(
        feature = "without-slot-tables",
        ignore = "tests a slot table, which the feature empties"
    )]
    #[test]
    fn a_value_is_read_under_the_version_it_was_made_under() {
        let (t, h) = table();
        let Err(v0) = t.read(h, |_| true, |_| ()) else {
            panic!("empty")
        };
        t.hold(h, v0, ("k", 1));
        assert_eq!(
            t.read(h, |v| v.0 == "k", |v| v.1),
            Ok(1).map_err(|_: ()| v0)
        );
        assert!(
            t.read(h, |v| v.0 == "other", |v| v.1).is_err(),
            "another key"
        );
        t.changed(h, |v| v.0 == "k");
        assert!(!t.keeps(h, |_| true), "a change lets the value go");
        assert!(t.read(h, |_| true, |v| v.1).is_err());
    }

    #[cfg_attr(
        feature = "without-slot-tables",
        ignore = "tests a slot table, which the feature empties"
    )]
    #[test]
    fn a_value_made_before_a_change_is_let_go() {
        let (t, h) = table();
        let Err(v0) = t.read(h, |_| true, |_| ()) else {
            panic!("empty")
        };
        // The key changes between the read that found nothing and the hold.
        t.changed(h, |v| v.0 == "k");
        t.hold(h, v0, ("k", 1));
        assert!(!t.keeps(h, |_| true));
        let Err(v1) = t.read(h, |_| true, |_| ()) else {
            panic!("empty")
        };
        t.hold(h, v1, ("k", 2));
        assert_eq!(t.read(h, |_| true, |v| v.1).ok(), Some(2));
    }
}

/// The protocol under loom: a value made before a change is never kept once both
/// `hold` and `changed` have returned, whatever their interleaving and the memory
/// orderings allow.
#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::*;

    fn table() -> Slots<u32> {
        Slots::new(1)
    }

    #[test]
    fn a_change_and_a_hold_never_leave_a_stale_value() {
        loom::model(|| {
            let t = Arc::new(table());
            // A reader found nothing under version 0 and read the store...
            let Err(version) = t.read(0, |_| true, |_| ()) else {
                panic!("empty")
            };
            let holder = {
                let t = Arc::clone(&t);
                loom::thread::spawn(move || t.hold(0, version, 7))
            };
            // ...while the key changed in the store, and the change is told.
            let teller = {
                let t = Arc::clone(&t);
                loom::thread::spawn(move || t.changed(0, |_| true))
            };
            holder.join().unwrap();
            teller.join().unwrap();
            assert!(
                !t.keeps(0, |_| true),
                "a value read before the change is kept"
            );
            assert!(t.read(0, |_| true, |v| *v).is_err());
        });
    }

    #[test]
    fn a_hold_after_the_change_stays() {
        loom::model(|| {
            let t = Arc::new(table());
            t.changed(0, |_| true);
            let Err(version) = t.read(0, |_| true, |_| ()) else {
                panic!("empty")
            };
            let reader = {
                let t = Arc::clone(&t);
                loom::thread::spawn(move || t.read(0, |_| true, |v| *v))
            };
            t.hold(0, version, 9);
            let seen = reader.join().unwrap();
            assert!(seen.is_err() || seen == Ok(9));
            assert_eq!(t.read(0, |_| true, |v| *v).ok(), Some(9));
        });
    }
}
