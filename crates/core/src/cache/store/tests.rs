//! The store's tests: coalesced fills, the hot set against moka, the byte bound,
//! the representations a fill makes; and the entries other modules' tests build.

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
        class: mdproxy_api::catalog::FreshnessClass::Live,
        until_open: false,
        negative: false,
        settles: None,
        venue: mdproxy_market::Venue::China,
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
                    move || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(body("{\"success\":true}"))
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

/// A task that fills `k` through `fetch`.
fn spawn_fill<F, Fut>(
    cache: &Cache,
    fetch: F,
) -> tokio::task::JoinHandle<(Result<Arc<CachedBody>, FetchError>, FillRole)>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<CachedBody, FetchError>> + Send + 'static,
{
    let cache = cache.clone();
    tokio::spawn(async move { cache.fill("k", |_| true, fetch).await })
}

/// The fill runs on the tasks of the callers that wait on it; its starter dropped
/// half-way (a client gone), the fill goes on in a task of the tracker: its answer
/// is kept, the caller that joined it gets it, and the flight ends.
#[tokio::test]
async fn a_fill_whose_starter_goes_away_still_ends_and_is_kept() {
    let tracker = TaskTracker::new();
    let cache = Cache::new(16 * 1024 * 1024, tracker.clone());
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (started, on_start) = tokio::sync::oneshot::channel::<()>();
    let starter = spawn_fill(&cache, move || async move {
        let _ = started.send(());
        let _ = released.await;
        Ok(body("{\"success\":true,\"n\":1}"))
    });
    on_start.await.unwrap();
    let joined = spawn_fill(&cache, || async { unreachable!("the flight is under way") });
    // Both wait on the flight before the starter goes away.
    until(|| cache.inner.flights.waiters("k") == 2).await;
    starter.abort();
    assert!(starter.await.unwrap_err().is_cancelled());
    assert_eq!(
        tracker.len(),
        1,
        "the fill was handed to a task of the tracker"
    );
    release.send(()).unwrap();
    let (joined, role) = joined.await.unwrap();
    assert_eq!(role, FillRole::Joined);
    assert_eq!(&joined.unwrap().body[..], b"{\"success\":true,\"n\":1}");
    assert!(cache.get("k").await.is_some(), "the answer is kept");
    until(|| !cache.is_filling("k")).await;
}

/// A fill with what the caller's lookup saw of `key` (its entry and the flights'
/// mark taken before the read).
async fn fill_seen(
    cache: &Cache,
    key: &str,
    mark: Mark,
    held: Option<Arc<CachedBody>>,
) -> (Result<Arc<CachedBody>, FetchError>, FillRole) {
    let how = (
        Want::Lately,
        FillTask::Starters,
        Some(Seen { mark, held }),
        NegativeKeep::FirstAsk,
    );
    cache
        .fill_wanting(key, how, |_| true, |_, _| async { Ok(body("fetched")) })
        .await
}

/// A fill started while no flight of the key's shard has ended since the caller's
/// mark takes what the caller's read found, and moka is not read again; once one
/// has ended, it reads again and finds the answer that flight stored.
#[tokio::test]
async fn a_fill_reads_again_only_when_a_flight_ended_since_the_mark() {
    let cache = Cache::new(16 * 1024 * 1024, TaskTracker::new());
    let seen = Arc::new(body("seen"));
    let (got, role) = fill_seen(&cache, "k", cache.mark("k"), Some(Arc::clone(&seen))).await;
    assert!(
        Arc::ptr_eq(&got.unwrap(), &seen),
        "what the caller saw stood"
    );
    assert_eq!(role, FillRole::Found);
    assert!(cache.get("k").await.is_none(), "nothing fetched or stored");

    let mark = cache.mark("k");
    let stored = put(&cache, "k", "stored").await;
    let (got, role) = fill_seen(&cache, "k", mark, None).await;
    assert!(
        Arc::ptr_eq(&got.unwrap(), &stored),
        "read again: the fill's answer"
    );
    assert_eq!(role, FillRole::Found);

    // A mark taken after the flight ended trusts the read: nothing seen, fetched.
    cache.invalidate("k").await;
    let (got, role) = fill_seen(&cache, "k", cache.mark("k"), None).await;
    assert_eq!(&got.unwrap().body[..], b"fetched");
    assert_eq!(role, FillRole::Leader);
}

/// A fill of `key` started on `task`, polled once: its fetch waits for the sender
/// returned beside it.
async fn held_fill<'a>(
    cache: &'a Cache,
    key: &'static str,
    task: FillTask,
) -> (
    tokio::sync::oneshot::Sender<()>,
    std::pin::Pin<Box<impl Future<Output = (Result<Arc<CachedBody>, FetchError>, FillRole)> + 'a>>,
) {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let fill = cache.fill_wanting(
        key,
        (Want::Lately, task, None, NegativeKeep::FirstAsk),
        |_| true,
        move |_, _| async move {
            let _ = released.await;
            Ok(body("{\"success\":true}"))
        },
    );
    let mut fill = Box::pin(fill);
    assert!(futures_util::poll!(fill.as_mut()).is_pending());
    (release, fill)
}

/// With no other caller, the fill of a starter that went away still ends in the
/// tracker's task (shutdown waits for it) and is kept.
#[tokio::test]
async fn a_fill_left_alone_finishes_on_the_tracker() {
    let tracker = TaskTracker::new();
    let cache = Cache::new(16 * 1024 * 1024, tracker.clone());
    // Polled once (the fill starts and waits), then dropped.
    let (release, fill) = held_fill(&cache, "k", FillTask::Starters).await;
    drop(fill);
    assert!(cache.is_filling("k"), "the flight goes on");
    release.send(()).unwrap();
    tracker.close();
    tracker.wait().await;
    assert!(!cache.is_filling("k"));
    assert!(cache.get("k").await.is_some(), "the answer is kept");
}

/// A fill on the starter's task adds no task while it runs; one asked to run on a
/// task of its own (an HTTP/2 stream's) runs on one of the tracker's.
#[tokio::test]
async fn a_fill_runs_where_its_starter_says() {
    let tracker = TaskTracker::new();
    let cache = Cache::new(16 * 1024 * 1024, tracker.clone());
    for (key, task, tasks) in [("here", FillTask::Starters, 0), ("own", FillTask::Own, 1)] {
        let (release, fill) = held_fill(&cache, key, task).await;
        assert_eq!(tracker.len(), tasks, "{key}");
        release.send(()).unwrap();
        let (r, role) = fill.await;
        assert!(r.is_ok() && role == FillRole::Leader, "{key}");
        assert!(cache.get(key).await.is_some(), "{key}: kept");
    }
}

/// A fill that panics fails the callers that wait on it, as a task of its own
/// did, and its flight ends: the next caller starts a new one.
#[tokio::test]
async fn a_fill_that_panics_fails_its_waiters_and_ends() {
    let cache = Cache::new(16 * 1024 * 1024, TaskTracker::new());
    let (r, role) = cache
        .fill("k", |_| true, || async { panic!("a bug in a fill") })
        .await;
    assert!(matches!(r, Err(FetchError::Unreachable)));
    assert_eq!(role, FillRole::Leader);
    assert!(!cache.is_filling("k"));
    let (r, _) = cache
        .fill("k", |_| true, || async { Ok(body("{\"success\":true}")) })
        .await;
    assert!(r.is_ok(), "a new flight after the panic");
}

/// Purges `key` as an operator does: the key itself, or a prefix of it.
async fn purge(cache: &Cache, key: &str, by_prefix: bool) {
    if by_prefix {
        cache
            .invalidate_matching(&Purge::Prefix(key[..2].to_owned()))
            .await;
    } else {
        cache.invalidate(key).await;
    }
}

/// Yields until `done` says so, a bounded number of times.
async fn until(done: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    panic!("never happened");
}

/// A fill whose fetch began before a purge answers its callers but is not kept:
/// the purge found nothing to drop, and the answer may predate it. One begun
/// after the purge is kept.
#[tokio::test]
async fn an_answer_fetched_across_a_purge_is_served_but_not_kept() {
    for by_prefix in [false, true] {
        let cache = Cache::new(16 << 20, TaskTracker::new());
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let filling = tokio::spawn({
            let cache = cache.clone();
            async move {
                let fetch = || async move {
                    let _ = wait.await;
                    Ok(body("before"))
                };
                cache.fill("/k?a=1", |_| false, fetch).await.0
            }
        });
        until(|| cache.is_filling("/k?a=1")).await;
        purge(&cache, "/k?a=1", by_prefix).await;
        go.send(()).unwrap();
        let served = filling.await.unwrap().unwrap();
        assert_eq!(&served.body[..], b"before");
        assert!(
            cache.get("/k?a=1").await.is_none(),
            "kept (prefix: {by_prefix})"
        );

        put(&cache, "/k?a=1", "after").await;
        assert!(cache.get("/k?a=1").await.is_some());
    }
}

/// A promotion whose disk read came before a purge answers its caller but puts
/// nothing back in memory, nor on disk (the copy it made is not written).
#[tokio::test]
async fn a_disk_read_across_a_purge_is_served_but_not_kept() {
    use crate::cache::disk::format::tests::entry;
    use crate::cache::encoding::Coding;
    use tokio_util::sync::CancellationToken;

    const BODY: &str = concat!(
        "{\"data\":[",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810],",
        "[20260302,1485.5,1490.1,1479.2,1488.0,31022],[20260303,1488.0,1501.7,1486.3,1499.9,35810]]}"
    );
    for by_prefix in [false, true] {
        let key = "/stock/kline?code=600519";
        let dir = std::env::temp_dir().join(format!(
            "mdproxy-store-purge-{}-{by_prefix}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let (tracker, stop) = (TaskTracker::new(), CancellationToken::new());
        let disk = Disk::open(&dir, 64 << 20, 1 << 20, &tracker, stop.clone())
            .await
            .unwrap();
        let (stored, policy) = entry(BODY);
        assert!(stored.is_compressible());
        let now = stored.fetched_at + chrono::Duration::hours(1);
        disk.put(key, &Arc::new(stored), Stamp::now());
        disk.flush().await;
        let written = disk.stats().writes.load(Ordering::Relaxed);

        let cache = Cache::new(16 << 20, tracker.clone()).with_disk(disk.clone());
        cache.compressor().note(Coding::Gzip);
        // The promotion reads the record, then waits to make the gzip copy.
        let permits = cache.compressor().hold_all().await;
        let promoting = tokio::spawn({
            let (cache, policy) = (cache.clone(), policy.clone());
            async move { cache.promote(key, &policy, now).await }
        });
        until(|| disk.stats().hits.load(Ordering::Relaxed) == 1).await;
        purge(&cache, key, by_prefix).await;
        drop(permits);
        let served = promoting.await.unwrap().expect("read before the purge");
        assert_eq!(&served.body[..], BODY.as_bytes());
        assert!(cache.get(key).await.is_none(), "kept (prefix: {by_prefix})");
        disk.flush().await;
        assert_eq!(disk.stats().writes.load(Ordering::Relaxed), written);
        assert_eq!(disk.stats().purged.load(Ordering::Relaxed), 1);

        stop.cancel();
        tracker.close();
        tracker.wait().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Caches `text` under `key` in place of what is there.
async fn put(cache: &Cache, key: &str, text: &'static str) -> Arc<CachedBody> {
    let (entry, _) = cache
        .fill(key, |_| false, move || async move { Ok(body(text)) })
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
    assert_eq!(
        cache.invalidate_matching(&Purge::Key("k".into())).await,
        ["k"]
    );
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

/// A fill stores its answer with the representations clients asked for made
/// (each once, decompressing to the body); one made later for a request is
/// weighed too.
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
    use crate::cache::entry::{COPIES_OVERHEAD, ENTRY_OVERHEAD};
    let mut weighed = ("k".len() + big.len()) as u64 + ENTRY_OVERHEAD + COPIES_OVERHEAD;
    for coding in [Coding::Gzip, Coding::Zstd] {
        let made = entry.encoded_now(coding).expect("made by the fill").clone();
        assert!(made.len() < big.len() / 4, "{coding:?}");
        assert_eq!(
            entry.encoded(coding).unwrap().as_ptr(),
            made.as_ptr(),
            "compressed once"
        );
        weighed += made.len() as u64;
    }
    assert!(entry.encoded_now(Coding::Brotli).is_none(), "not asked for");
    assert_eq!(
        weight("k", &entry),
        weighed,
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

/// What expired while nobody called the cache is removed all the same, by the
/// maintenance [`Cache::keep_tidy`] runs (moka's own runs only within calls).
#[tokio::test]
async fn expired_entries_go_without_a_call() {
    let cache = Cache::new(16 * 1024 * 1024, TaskTracker::new());
    let mut short = body(r#"{"success":true}"#);
    short.keep_for = Duration::from_millis(100);
    let (entry, _) = cache
        .fill("k", |_| false, || async move { Ok(short) })
        .await;
    assert!(entry.is_ok());
    cache.sync().await;
    assert_eq!(cache.entry_count(), 1);
    let stop = CancellationToken::new();
    cache.keep_tidy(stop.clone());
    // Bounded: the tidy runs at once and every second after.
    for _ in 0..60 {
        if cache.entry_count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(cache.entry_count(), 0, "the expired entry is still counted");
    stop.cancel();
}

/// A "not found" fetched for `key` under `negatives`: what the fill reports, and
/// whether the store holds it afterwards.
async fn fill_not_found(cache: &Cache, key: &str, negatives: NegativeKeep) -> (FillRole, bool) {
    let how = (Want::Lately, FillTask::Starters, None, negatives);
    let (r, role) = cache
        .fill_wanting(
            key,
            how,
            |_| false,
            |_, _| async {
                let mut answer = body(r#"{"success":false,"error":"not found"}"#);
                answer.status = 404;
                Ok(answer)
            },
        )
        .await;
    assert_eq!(r.unwrap().status, 404, "{key}: served either way");
    (role, cache.get(key).await.is_some())
}

/// Under `second_ask` a "not found" is served and let go the first time its key is
/// fetched, and kept the second; `first_ask` keeps it at once, and a found answer
/// is kept at once under either.
#[tokio::test]
async fn a_not_found_is_kept_from_the_ask_its_setting_names() {
    let cache = Cache::new(16 * 1024 * 1024, TaskTracker::new());
    let second = NegativeKeep::SecondAsk;
    assert_eq!(
        fill_not_found(&cache, "/a", second).await,
        (FillRole::Relayed, false)
    );
    assert_eq!(
        fill_not_found(&cache, "/b", second).await,
        (FillRole::Relayed, false)
    );
    assert_eq!(
        fill_not_found(&cache, "/a", second).await,
        (FillRole::Leader, true)
    );
    assert_eq!(cache.negatives_relayed(), 2, "the two first asks, counted");
    let first = NegativeKeep::FirstAsk;
    assert_eq!(
        fill_not_found(&cache, "/c", first).await,
        (FillRole::Leader, true)
    );

    let how = (Want::Lately, FillTask::Starters, None, second);
    let (r, role) = cache
        .fill_wanting("/d", how, |_| false, |_, _| async { Ok(body("{}")) })
        .await;
    assert!(r.is_ok() && role == FillRole::Leader);
    assert!(
        cache.get("/d").await.is_some(),
        "a found answer is kept at once"
    );
    assert_eq!(cache.negatives_relayed(), 2, "kept answers are not counted");
}

/// Under `first_ask` a "not found" for a key the store holds nothing of waits in
/// the first asks' table, not in moka: found there, it is served and moved into
/// moka; a found answer for its key takes its place; purges, counts and the key
/// list see it.
#[tokio::test]
async fn a_not_found_asked_once_waits_beside_moka_until_asked_again() {
    let cache = Cache::new(16 << 20, TaskTracker::new());
    let first = NegativeKeep::FirstAsk;
    let key = "/stock/detail/605000";
    assert_eq!(
        fill_not_found(&cache, key, first).await,
        (FillRole::Leader, true)
    );
    let inner = &cache.inner;
    assert!(!inner.entries.contains_key(key), "not in moka");
    cache.sync().await;
    assert_eq!(
        (cache.entry_count(), cache.keys()),
        (1, vec![key.to_owned()])
    );
    assert!(cache.weighted_size() > 0);

    let now = Utc::now().timestamp();
    let Err(unheld) = cache.held(key, now) else {
        panic!("the hot set holds no first ask");
    };
    let read = cache.finish_read(key, unheld, now).await.unwrap();
    assert_eq!(read.status, 404, "asked again: served from the table");
    until(|| inner.entries.contains_key(key)).await;
    assert_eq!(inner.first_asks.len(), 0, "moved into moka");

    let found = "/stock/detail/605001";
    fill_not_found(&cache, found, first).await;
    assert_eq!(inner.first_asks.len(), 1);
    put(&cache, found, "{\"found\":true}").await;
    assert_eq!(
        &cache.get(found).await.unwrap().body[..],
        b"{\"found\":true}"
    );
    assert_eq!(inner.first_asks.len(), 0, "a found answer takes its place");

    for key in ["/x/1", "/x/2", "/y"] {
        fill_not_found(&cache, key, first).await;
    }
    assert!(cache.invalidate("/y").await);
    assert!(!cache.invalidate("/y").await, "dropped once");
    let mut dropped = cache
        .invalidate_matching(&Purge::Prefix("/x/".into()))
        .await;
    dropped.sort();
    assert_eq!(dropped, ["/x/1", "/x/2"]);
    assert_eq!(inner.first_asks.len(), 0);
}

/// A "not found" fetched across a purge of its key is served and not held.
#[tokio::test]
async fn a_first_ask_fetched_across_a_purge_is_served_but_not_held() {
    let cache = Cache::new(16 << 20, TaskTracker::new());
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let filling = tokio::spawn({
        let cache = cache.clone();
        async move {
            let how = (
                Want::Lately,
                FillTask::Starters,
                None,
                NegativeKeep::FirstAsk,
            );
            let fetch = |_, _| async move {
                let _ = wait.await;
                let mut answer = body("{\"success\":false}");
                answer.status = 404;
                Ok(answer)
            };
            cache.fill_wanting("/k/1", how, |_| false, fetch).await
        }
    });
    until(|| cache.is_filling("/k/1")).await;
    cache.invalidate("/k/1").await;
    go.send(()).unwrap();
    let (served, role) = filling.await.unwrap();
    assert_eq!((served.unwrap().status, role), (404, FillRole::Leader));
    assert!(cache.get("/k/1").await.is_none(), "held past the purge");
}
