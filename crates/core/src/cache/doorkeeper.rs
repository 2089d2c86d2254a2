//! Which keys were asked lately: a key noted again among the last notes earns a
//! place, as nginx's `proxy_cache_min_uses` and TinyLFU's doorkeeper admit. The
//! store keeps two: of disk reads, for memory once full, and of "not found"
//! answers, for memory at all under `freshness.negative_keep = "second_ask"`.
//!
//! Promoting every disk hit into a full memory cache evicts an entry for each one:
//! when the disk serves a working set many times memory (the whole market's charts
//! under 64 MiB), an entry promoted is gone long before its key comes again, and the
//! insert, the eviction and the buffer kept alive until then are spent for nothing
//! (docs/BENCHMARKS.md, the disk tier's run 9: a variant that promoted no disk hit
//! served 13–18 % more of them than one that promoted every hit). A key read twice
//! within that many reads would have been found in memory the second time; it is
//! the one worth a place. Every memory miss of a node with a disk counts as a read,
//! found on disk or not. A scan of unknown codes is the same pattern for "not
//! found" answers: each asked once, each kept for nothing.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

/// Keys remembered at most (16 bytes each in the queue, about 24 in the map).
const REMEMBERED: usize = 16_384;

/// The last keys noted. Cheap to share: one short lock a note.
#[derive(Default)]
pub struct Doorkeeper {
    hasher: foldhash::fast::FixedState,
    reads: Mutex<Reads>,
}

#[derive(Default)]
struct Reads {
    /// Reads noted so far.
    count: u64,
    /// The remembered reads, oldest first: key hash and read number.
    order: VecDeque<(u64, u64)>,
    /// Each remembered key's last read number.
    last: HashMap<u64, u64, foldhash::fast::FixedState>,
}

impl Doorkeeper {
    /// Notes `key`; whether it was noted before among the last [`REMEMBERED`].
    pub fn again(&self, key: &str) -> bool {
        self.read_again(key, u64::MAX)
    }

    /// Notes a disk read of `key`; whether the same key was read within the
    /// `window` reads before this one (at most [`REMEMBERED`]).
    pub fn read_again(&self, key: &str, window: u64) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
        reads.count += 1;
        let now = reads.count;
        let again = reads
            .last
            .insert(hash, now)
            .is_some_and(|before| now - before <= window);
        reads.order.push_back((hash, now));
        if reads.order.len() > REMEMBERED
            && let Some((oldest, at)) = reads.order.pop_front()
            && reads.last.get(&oldest) == Some(&at)
        {
            reads.last.remove(&oldest);
        }
        again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_read_again_within_the_window_is_admitted() {
        let door = Doorkeeper::default();
        assert!(!door.read_again("a", 3), "a first read");
        assert!(!door.read_again("b", 3));
        assert!(door.read_again("a", 3), "two reads apart");
        for other in ["c", "d", "e"] {
            assert!(!door.read_again(other, 3));
        }
        assert!(
            !door.read_again("a", 3),
            "four reads apart: past the window"
        );
        assert!(door.read_again("a", 3), "read again at once");
    }

    #[test]
    fn it_forgets_past_what_it_remembers() {
        let door = Doorkeeper::default();
        let window = u64::MAX;
        assert!(!door.read_again("old", window));
        for i in 0..REMEMBERED {
            assert!(!door.read_again(&format!("k{i}"), window));
        }
        // Pushed out of the queue and the map: a first read again.
        assert!(!door.read_again("old", window));
        let reads = door.reads.lock().unwrap();
        assert_eq!(reads.order.len(), REMEMBERED);
        assert_eq!(reads.last.len(), REMEMBERED);
    }

    /// The HTTP contract says how many uncached "not found"s a node remembers.
    #[test]
    fn the_contract_names_what_it_remembers() {
        let contract = include_str!("../../../../docs/http-contract.md");
        let count = REMEMBERED.to_string();
        let (thousands, rest) = count.split_at(count.len() - 3);
        let said = format!("among the latest {thousands},{rest} 404s it fetched");
        assert!(contract.contains(&said), "{said}");
    }

    #[test]
    fn a_key_read_often_stays_remembered_by_its_last_read() {
        let door = Doorkeeper::default();
        for i in 0..(3 * REMEMBERED) {
            door.read_again("hot", 1);
            door.read_again(&format!("k{i}"), 1);
        }
        // Its older reads left the queue without dropping its latest from the map.
        assert!(door.read_again("hot", 2));
        assert!(door.reads.lock().unwrap().last.len() <= REMEMBERED);
    }
}
