//! Validated requests remembered by their raw path and query, so a hot target is
//! routed and validated once and then looked up. Routing and validation are pure
//! functions of the path and query (the catalogue is fixed), so a remembered
//! answer is the one they would give again; only successes are remembered.
//!
//! The table is a fixed array of slots, each read without a lock. A request hashes
//! to one slot, and one that lands on a slot another holds replaces it: the table
//! only ever saves work. A flood of distinct targets only makes it miss, and a
//! lookup compares the whole path and query, so it never answers for another.

use std::sync::LazyLock;

use crate::params::Valid;
use mdproxy_slots::Slots;

/// Slots in the table.
const SLOTS: usize = 1024;

/// Longer paths and queries are not remembered: they are rare, and this bounds
/// the table (under a MiB when full).
const MAX_RAW: usize = 256;

struct Remembered {
    path: Box<str>,
    query: Option<Box<str>>,
    valid: Valid,
}

struct Memo {
    slots: Slots<Remembered>,
}

impl Memo {
    fn new(slots: usize) -> Memo {
        Memo {
            slots: Slots::new(slots),
        }
    }

    fn get(&self, path: &str, query: Option<&str>) -> Option<Valid> {
        let hash = self.slots.hash(&(path, query));
        let is_for = |r: &Remembered| *r.path == *path && r.query.as_deref() == query;
        self.slots.read(hash, is_for, |r| r.valid.clone()).ok()
    }

    fn put(&self, path: &str, query: Option<&str>, valid: &Valid) {
        if path.len() + query.map_or(0, str::len) > MAX_RAW {
            return;
        }
        let hash = self.slots.hash(&(path, query));
        // What a target validates to never changes (the catalogue is fixed), so
        // the version only guards the table's own protocol.
        let Err(version) = self.slots.read(hash, |_| false, |_| ()) else {
            return;
        };
        let remembered = Remembered {
            path: path.into(),
            query: query.map(Into::into),
            valid: valid.clone(),
        };
        self.slots.hold(hash, version, remembered);
    }
}

static MEMO: LazyLock<Memo> = LazyLock::new(|| Memo::new(SLOTS));

/// What `path` (relative to `/api/v1`) and `query` validated to, if remembered.
pub fn get(path: &str, query: Option<&str>) -> Option<Valid> {
    MEMO.get(path, query)
}

/// Remembers that `path` and `query` validated to `valid`.
pub fn put(path: &str, query: Option<&str>, valid: &Valid) {
    MEMO.put(path, query, valid);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_target;

    #[cfg_attr(
        feature = "without-slot-tables",
        ignore = "tests a slot table, which the feature empties"
    )]
    #[test]
    fn remembers_exactly_what_it_was_given() {
        let memo = Memo::new(SLOTS);
        let valid = parse_target("/stock/kline?code=600519").unwrap();
        assert_eq!(memo.get("/stock/kline", Some("code=600519")), None);
        memo.put("/stock/kline", Some("code=600519"), &valid);
        assert_eq!(memo.get("/stock/kline", Some("code=600519")), Some(valid));
        // Another query, or none, is another request.
        assert_eq!(memo.get("/stock/kline", Some("code=600518")), None);
        assert_eq!(memo.get("/stock/kline", None), None);
        let long = "x".repeat(MAX_RAW);
        let other = parse_target("/market/indices").unwrap();
        memo.put("/market/indices", Some(&long), &other);
        assert_eq!(memo.get("/market/indices", Some(&long)), None);
    }

    #[cfg_attr(
        feature = "without-slot-tables",
        ignore = "tests a slot table, which the feature empties"
    )]
    #[test]
    fn a_shared_slot_answers_only_its_own_target() {
        let memo = Memo::new(1);
        let (a, b) = (
            parse_target("/stock/detail/600519").unwrap(),
            parse_target("/stock/detail/000001").unwrap(),
        );
        memo.put("/stock/detail/600519", None, &a);
        memo.put("/stock/detail/000001", None, &b);
        assert_eq!(memo.get("/stock/detail/600519", None), None);
        assert_eq!(memo.get("/stock/detail/000001", None), Some(b));
    }
}
