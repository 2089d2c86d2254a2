//! The table's tests: what it takes, holds, lets expire, replaces and drops.

use super::*;
use crate::cache::store::tests::body;
use std::time::Duration;

/// A "not found" of `text`, kept for `secs`.
fn not_found(text: &'static str, secs: u64) -> Arc<CachedBody> {
    let mut entry = body(text);
    entry.status = 404;
    entry.keep_for = Duration::from_secs(secs);
    Arc::new(entry)
}

/// A request's read of `key` at `now`.
fn get(table: &FirstAsks, key: &str, now: Instant) -> Option<Found> {
    table.find(key, || now, true)
}

/// A table of one bucket: every key lands in it.
fn one_bucket() -> FirstAsks {
    let table = FirstAsks::new(SHARE * MAX_WEIGHT * WAYS as u64);
    assert_eq!(table.buckets.len(), 1);
    table
}

#[test]
fn only_light_not_founds_in_a_store_large_enough() {
    let default = mdproxy_config::CacheConfig::default().max_bytes;
    let table = FirstAsks::new(default);
    assert_eq!(
        (default, table.buckets.len() * WAYS),
        (256 << 20, 8192),
        "8,192 answers in a sixteenth of the default 256 MiB (docs/http-contract.md)"
    );
    assert_eq!(table.budget(), 16 << 20);
    assert!(table.takes("/stock/detail/605000", &not_found("{}", 30)));
    assert!(
        !table.takes("/a", &body("{}")),
        "a found answer goes to moka"
    );
    let heavy = not_found(Box::leak("x".repeat(4096).into_boxed_str()), 30);
    assert!(!table.takes("/a", &heavy), "a heavy one too");
    let none = FirstAsks::new(64 << 10);
    assert_eq!(none.budget(), 0);
    assert!(
        !none.takes("/a", &not_found("{}", 30)),
        "no table under 128 KiB"
    );
    none.put("/a", &not_found("{}", 30), Instant::now());
    assert!(get(&none, "/a", Instant::now()).is_none());
    assert_eq!(FirstAsks::new(64 << 30).buckets.len(), MAX_BUCKETS);
}

#[test]
fn an_entry_is_held_for_its_keep_and_its_first_read_said() {
    let table = one_bucket();
    let now = Instant::now();
    let entry = not_found("{}", 30);
    table.put("/a", &entry, now);
    assert_eq!((table.len(), table.weight()), (1, weight("/a", &entry)));
    assert!(table.peek("/a", now).is_some());
    let found = get(&table, "/a", now).unwrap();
    assert!(
        Arc::ptr_eq(&found.entry, &entry) && found.first_read,
        "a peek is no read"
    );
    let again = get(&table, "/a", now + Duration::from_secs(29)).unwrap();
    assert!(!again.first_read, "read before");
    assert!(get(&table, "/b", now).is_none());
    assert!(
        get(&table, "/a", now + Duration::from_secs(30)).is_none(),
        "expired"
    );
    assert_eq!((table.len(), table.weight()), (0, 0), "and let go");
}

#[test]
fn a_full_bucket_gives_up_an_expired_entry_else_the_first_to_expire() {
    let table = one_bucket();
    let now = Instant::now();
    for (key, secs) in [("/a", 40), ("/b", 10), ("/c", 30), ("/d", 20)] {
        table.put(key, &not_found("{}", secs), now);
    }
    table.put("/e", &not_found("{}", 30), now);
    assert!(
        get(&table, "/b", now).is_none(),
        "the first to expire made room"
    );
    let later = now + Duration::from_secs(25);
    table.put("/f", &not_found("{}", 30), later);
    assert!(
        get(&table, "/d", now).is_none(),
        "expired at 20 s: its place taken"
    );
    for key in ["/a", "/c", "/e", "/f"] {
        assert!(get(&table, key, later).is_some(), "{key}");
    }
    let newer = not_found("{\"n\":1}", 30);
    table.put("/a", &newer, later);
    assert!(Arc::ptr_eq(
        &get(&table, "/a", later).unwrap().entry,
        &newer
    ));
    assert!(
        get(&table, "/c", later).is_some(),
        "a key put again keeps its place"
    );
    assert_eq!(table.len(), 4);
}

#[test]
fn entries_are_dropped_by_key_by_identity_and_by_match() {
    let table = FirstAsks::new(16 << 20);
    let now = Instant::now();
    let (a, b) = (not_found("{}", 30), not_found("{}", 30));
    table.put("/stock/detail/1", &a, now);
    table.put("/stock/detail/2", &b, now);
    table.put("/macro/cpi?page=9", &not_found("{}", 1), now);
    assert!(table.holds("/stock/detail/2", &b) && !table.holds("/stock/detail/2", &a));
    assert!(!table.remove_if("/stock/detail/1", &b), "not that entry");
    assert!(table.remove_if("/stock/detail/1", &a));
    assert!(!table.remove("/stock/detail/1"), "gone already");
    let mut keys = table.keys(now);
    keys.sort();
    assert_eq!(keys, ["/macro/cpi?page=9", "/stock/detail/2"]);
    assert_eq!(
        table.keys(now + Duration::from_secs(1)),
        ["/stock/detail/2"],
        "an expired key is not listed"
    );
    let dropped = table.remove_matching(|key| key.starts_with("/stock/"));
    assert_eq!(dropped, ["/stock/detail/2"]);
    assert!(table.remove("/macro/cpi?page=9"));
    assert_eq!((table.len(), table.weight()), (0, 0));
}
