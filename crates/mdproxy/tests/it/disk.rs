//! The disk tier (`cache.disk_path`): a restart serves from disk without the
//! upstream, damaged records are never served, `disk_bytes` holds, purges reach the
//! disk, and a disk that cannot be written leaves the proxy serving from memory.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mdproxy_core::app::App;
use mdproxy_core::cache::disk::Disk;
use mdproxy_core::cache::purge::Purge;
use mdproxy_market::{Clock, ManualClock};
use mdproxy_sim::SimHandle;
use support::header;

/// K-line ranges that ended before the test's Saturday: final, kept for a week.
const PAST: [&str; 4] = [
    "/stock/kline?code=600519&period=day&fqt=none&to=2026-03-06",
    "/stock/kline?code=000001&period=week&fqt=after&to=2026-03-06",
    "/stock/kline?code=300750&period=month&fqt=none&to=2026-02-27",
    "/stock/kline?code=601318&period=day&fqt=none&to=2026-01-30",
];

/// A fresh directory for one test's disk tier.
fn dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("disk-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A Saturday's clock, a simulator on it, and a fresh directory `name` for a
/// test's disk tier.
async fn start(name: &str) -> (Arc<ManualClock>, SimHandle, PathBuf) {
    let clock = support::saturday();
    let sim = mdproxy_sim::start(&support::sim_config(), clock.clone())
        .await
        .unwrap();
    (clock, sim, dir(name))
}

/// The configuration of a proxy in front of `sim` with a disk tier at `path` of
/// `disk_bytes`, and its admin listener.
fn disk_config(sim: &SimHandle, path: &Path, disk_bytes: u64) -> mdproxy_config::Config {
    let mut config = support::proxy_config(sim);
    config.cache.disk_path = path.display().to_string();
    config.cache.disk_bytes = disk_bytes;
    config.admin.listen = "127.0.0.1:0".into();
    config.admin.token = mdproxy_config::Secret::new("admin-secret");
    config
}

/// A proxy in front of `sim` with a disk tier at `path` of `disk_bytes`.
async fn proxy(sim: &SimHandle, path: &Path, disk_bytes: u64, clock: &Arc<ManualClock>) -> App {
    let clock: Arc<dyn Clock> = clock.clone();
    mdproxy_core::app::start(&disk_config(sim, path, disk_bytes), clock)
        .await
        .unwrap()
}

fn disk(app: &App) -> Disk {
    app.state()
        .cache()
        .store()
        .disk()
        .expect("the disk tier is on")
        .clone()
}

async fn get(app: &App, target: &str) -> reqwest::Response {
    support::client()
        .get(format!("{}{target}", app.base_url()))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap()
}

async fn status_json(app: &App) -> serde_json::Value {
    let admin = format!("http://{}", app.admin_addr.unwrap());
    serde_json::from_str(&support::text(&format!("{admin}/status.json")).await).unwrap()
}

/// Fills `targets` through a proxy with a disk tier, waits for the writes, and
/// stops it; returns the bodies served.
async fn fill(
    sim: &SimHandle,
    path: &Path,
    clock: &Arc<ManualClock>,
    targets: &[&str],
) -> Vec<bytes::Bytes> {
    let app = proxy(sim, path, 64 << 20, clock).await;
    let mut bodies = Vec::new();
    for target in targets {
        let r = get(&app, target).await;
        assert_eq!(r.status(), 200, "{target}");
        bodies.push(r.bytes().await.unwrap());
    }
    disk(&app).flush().await;
    app.shutdown().await;
    bodies
}

/// A node that restarts with its disk serves every entry still inside its life
/// from its first request on, and the simulator counts no request for them.
#[tokio::test]
async fn a_restart_serves_from_disk_without_the_upstream() {
    let (clock, sim, path) = start("restart").await;
    let mut targets = PAST.to_vec();
    targets.push("/stock/detail/600519");
    let bodies = fill(&sim, &path, &clock, &targets).await;
    let before = (sim.hits("/stock/kline"), sim.hits("/stock/detail/{code}"));
    assert_eq!(before, (4, 1));

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    // The engine read its blocks' headers at start: count its reads from here.
    let at_start = status_json(&app).await;
    let opened = at_start["disk"]["engine_reads"].clone();
    // What the status page estimates after the restart is what was written.
    assert_eq!(at_start["disk"]["entries_estimate"], 5, "{at_start}");
    for (target, body) in targets.iter().zip(&bodies) {
        let r = get(&app, target).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-cache"), "HIT", "{target}");
        assert!(
            header(&r, "cache-status").ends_with("detail=disk"),
            "{target}"
        );
        assert_eq!(&r.bytes().await.unwrap(), body, "{target}");
    }
    // Promoted to memory: the next read is a memory hit.
    let again = get(&app, PAST[0]).await;
    assert!(!header(&again, "cache-status").contains("disk"));
    assert_eq!(
        (sim.hits("/stock/kline"), sim.hits("/stock/detail/{code}")),
        before,
        "no upstream request after the restart"
    );
    let status = status_json(&app).await;
    assert_eq!(status["disk"]["state"], "up");
    assert_eq!(status["disk"]["hits"], 5);
    // Each hit was one read of the engine, in place or by its threads (the blocks
    // were just written: in place, where the file system can say so).
    let reads = &status["disk"]["engine_reads"];
    let read = |path: &str| reads[path].as_u64().unwrap() - opened[path].as_u64().unwrap();
    assert_eq!(
        read("page_cache") + read("pool"),
        5,
        "{opened} then {reads}"
    );
    if reads["in_place_supported"] == true {
        assert_eq!(read("page_cache"), 5, "{opened} then {reads}");
    }
    let admin = format!("http://{}", app.admin_addr.unwrap());
    let metrics = support::text(&format!("{admin}/metrics")).await;
    for line in [
        "mdproxy_disk_hits_total 5",
        "mdproxy_disk_dropped_total{reason=\"corrupt\"} 0",
        "mdproxy_disk_writable 1",
        "mdproxy_disk_read_duration_seconds_count 5",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // The metric counts what the status page does (no disk read in between).
    for path in ["page_cache", "pool"] {
        let line = format!(
            "mdproxy_disk_engine_reads_total{{path=\"{path}\"}} {}\n",
            reads[path]
        );
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

async fn get_coded(app: &App, target: &str, accept: &str) -> reqwest::Response {
    support::client()
        .get(format!("{}{target}", app.base_url()))
        .bearer_auth(support::TOKEN)
        .header("accept-encoding", accept)
        .send()
        .await
        .unwrap()
}

/// A record read for a client that wants a coding it lacks is written again with
/// that copy: after the next restart a disk hit is served the copy with nothing
/// compressed or written, and the copy is the one a fresh compression gives.
#[tokio::test]
async fn a_disk_record_keeps_the_copy_its_readers_ask_for() {
    let (clock, sim, path) = start("copies").await;
    // Filled for a client that asked for no coding: the record holds the body alone.
    let bodies = fill(&sim, &path, &clock, &PAST[..1]).await;

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    let r = get_coded(&app, PAST[0], "zstd").await;
    assert!(header(&r, "cache-status").ends_with("detail=disk"));
    // The promotion made the copy this client wanted, and served it.
    assert_eq!(header(&r, "content-encoding"), "zstd");
    let zstd = r.bytes().await.unwrap();
    assert_eq!(zstd::decode_all(&zstd[..]).unwrap(), bodies[0]);
    disk(&app).flush().await;
    let status = status_json(&app).await;
    assert_eq!(status["disk"]["writes"], 1, "the record is written again");
    app.shutdown().await;

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    let r = get_coded(&app, PAST[0], "zstd").await;
    assert!(header(&r, "cache-status").ends_with("detail=disk"));
    assert_eq!(header(&r, "content-encoding"), "zstd");
    assert_eq!(r.bytes().await.unwrap(), zstd);
    // An identity reader of the same record gets the body.
    let plain = get(&app, PAST[0]).await;
    assert!(plain.headers().get("content-encoding").is_none());
    assert_eq!(plain.bytes().await.unwrap(), bodies[0]);
    disk(&app).flush().await;
    let status = status_json(&app).await;
    assert_eq!(status["disk"]["hits"], 1);
    assert_eq!(status["disk"]["writes"], 0, "the copy came from the record");
    assert_eq!(sim.hits("/stock/kline"), 1);

    // A memory hit given the body while its coding is made in the background: the
    // record is written again once the copy is made.
    let filled = get(&app, PAST[1]).await;
    assert_eq!(filled.status(), 200);
    let gz = support::once_coded("gzip", || async {
        let r = get_coded(&app, PAST[1], "gzip").await;
        (header(&r, "content-encoding"), r)
    })
    .await;
    assert!(!header(&gz, "cache-status").contains("disk"));
    let mut writes = serde_json::Value::Null;
    for _ in 0..300 {
        disk(&app).flush().await;
        writes = status_json(&app).await["disk"]["writes"].clone();
        if writes == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(writes, 2, "the fill's record, then the record with gzip");
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// Runs `damage` over the bytes of each of the disk tier's block files and writes
/// back those it changed; returns how many places it changed in all.
fn damage_files(path: &Path, damage: impl Fn(&mut [u8]) -> usize) -> usize {
    let mut changed = 0;
    for entry in std::fs::read_dir(path).unwrap().flatten() {
        let file = entry.path();
        if !file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("foyer")
        {
            continue;
        }
        let mut bytes = std::fs::read(&file).unwrap();
        let here = damage(&mut bytes);
        if here > 0 {
            std::fs::write(&file, bytes).unwrap();
        }
        changed += here;
    }
    changed
}

/// Flips a byte in every place of the disk tier's files where `needle` occurs.
fn corrupt(path: &Path, needle: &[u8]) -> usize {
    damage_files(path, |bytes| {
        let mut flipped = 0;
        let mut at = 0;
        while let Some(i) = bytes[at..].windows(needle.len()).position(|w| w == needle) {
            bytes[at + i + needle.len() / 2] ^= 0x01;
            at += i + needle.len();
            flipped += 1;
        }
        flipped
    })
}

/// After the first of `PAST`'s records was damaged: its answer comes from the
/// upstream again, byte for byte, and the second, untouched, from the disk.
async fn only_the_first_is_asked_again(app: &App, sim: &SimHandle, bodies: &[bytes::Bytes]) {
    let upstream = sim.hits("/stock/kline");
    let r = get(app, PAST[0]).await;
    assert_eq!(header(&r, "x-cache"), "MISS");
    assert_eq!(r.bytes().await.unwrap(), bodies[0], "the upstream's bytes");
    assert_eq!(sim.hits("/stock/kline"), upstream + 1);
    let r = get(app, PAST[1]).await;
    assert!(header(&r, "cache-status").ends_with("detail=disk"));
}

/// A record whose body was damaged on disk is dropped and counted, and the answer
/// comes from the upstream again, byte for byte.
#[tokio::test]
async fn a_corrupted_record_is_never_served() {
    let (clock, sim, path) = start("corrupt").await;
    let bodies = fill(&sim, &path, &clock, &PAST[..2]).await;
    // Damage the first body in the middle, where only the checksums can tell.
    let middle = &bodies[0][bodies[0].len() / 2..bodies[0].len() / 2 + 64];
    assert!(corrupt(&path, middle) >= 1, "the body is on disk");

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    only_the_first_is_asked_again(&app, &sim, &bodies).await;
    let status = status_json(&app).await;
    assert_eq!(status["disk"]["dropped"]["corrupt"], 1);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// Sets the length prefix of every key in the disk tier's files that holds `code`
/// (the engine stores a key as its length, 8 bytes little-endian, then its bytes)
/// to `length`; returns how many it changed.
fn damage_key_lengths(path: &Path, code: &[u8], length: u64) -> usize {
    damage_files(path, |bytes| {
        let mut damaged = 0;
        for i in 0..bytes.len().saturating_sub(8) {
            let len = u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
            if !(16..512).contains(&len) {
                continue;
            }
            let is_key = bytes.get(i + 8..i + 8 + len as usize).is_some_and(|k| {
                k.iter().all(|b| b.is_ascii_graphic()) && k.windows(code.len()).any(|w| w == code)
            });
            if is_key {
                bytes[i..i + 8].copy_from_slice(&length.to_le_bytes());
                damaged += 1;
            }
        }
        damaged
    })
}

/// A record whose key's length was damaged on disk (read before anything is
/// checked) is dropped, not decoded: a length of 2^61 would size an allocation
/// the process cannot make, and abort it.
#[tokio::test]
async fn a_damaged_key_length_is_dropped_not_decoded() {
    let (clock, sim, path) = start("keylen").await;
    let bodies = fill(&sim, &path, &clock, &PAST[..2]).await;
    assert!(
        damage_key_lengths(&path, b"600519", 1 << 61) >= 1,
        "the key is on disk"
    );

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    only_the_first_is_asked_again(&app, &sim, &bodies).await;
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// A flood of distinct keys far larger than `disk_bytes` keeps the files within
/// it, and the latest answers are still on disk.
#[tokio::test]
async fn disk_bytes_holds_under_a_flood_of_distinct_keys() {
    let (clock, sim, path) = start("flood").await;
    let bound = 16 << 20;
    let app = proxy(&sim, &path, bound, &clock).await;
    let d = disk(&app);
    let client = support::client();
    let mut written = 0;
    let mut last = String::new();
    let first = chrono::NaiveDate::from_ymd_opt(2025, 1, 1).unwrap();
    for i in 0..240u32 {
        // Distinct keys: the same stocks' daily bars up to 240 different days.
        let code = ["600519", "000001", "601318", "600036"][i as usize % 4];
        let to = first + chrono::Days::new(u64::from(i));
        last = format!("/stock/kline?code={code}&period=day&fqt=none&to={to}");
        let r = client
            .get(format!("{}{last}", app.base_url()))
            .bearer_auth(support::TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        written += r.bytes().await.unwrap().len();
        if i % 50 == 49 {
            d.flush().await;
        }
    }
    d.flush().await;
    assert!(written > 3 * bound as usize, "the flood is {written} bytes");
    let used = d.used_bytes();
    assert!(used <= bound, "{used} bytes on disk, bound {bound}");
    assert!(
        d.stats().writes.load(std::sync::atomic::Ordering::Relaxed) >= 200,
        "the flood was written: {:?}",
        d.stats()
    );
    app.shutdown().await;
    let app = proxy(&sim, &path, bound, &clock).await;
    let r = get(&app, &last).await;
    assert!(header(&r, "cache-status").ends_with("detail=disk"));
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// Once memory is full, a disk hit is served from the disk alone unless its key was
/// read from the disk again within memory's turnover: a sweep through more than
/// memory holds does not churn it, and a key read twice earns its place.
#[tokio::test]
async fn a_full_memory_keeps_the_disk_hits_read_again() {
    let (clock, sim, path) = start("doorkeeper").await;
    // 40 final K-lines of about 60 KB each (three years of day bars): twice what
    // 1 MiB of memory holds, each under its largest entry (128 KiB).
    let first = chrono::NaiveDate::from_ymd_opt(2021, 6, 1).unwrap();
    let targets: Vec<String> = (0..40u64)
        .map(|i| {
            let to = first + chrono::Days::new(i);
            format!("/stock/kline?code=600519&period=day&fqt=none&from=2018-06-01&to={to}")
        })
        .collect();
    let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
    let bodies = fill(&sim, &path, &clock, &refs).await;
    let bytes: usize = bodies.iter().map(bytes::Bytes::len).sum();
    assert!(bytes > 2 << 20, "the set is {bytes} bytes");
    let upstream = sim.hits("/stock/kline");

    let mut config = disk_config(&sim, &path, 64 << 20);
    config.cache.max_bytes = 1 << 20;
    let app = mdproxy_core::app::start(&config, clock.clone())
        .await
        .unwrap();
    for target in &targets {
        let r = get(&app, target).await;
        assert_eq!(r.status(), 200);
        assert!(
            header(&r, "cache-status").ends_with("detail=disk"),
            "{target}"
        );
    }
    let status = status_json(&app).await;
    let (hits, promoted) = (&status["disk"]["hits"], &status["disk"]["promoted"]);
    assert_eq!(hits, 40);
    let promoted = promoted.as_u64().unwrap();
    assert!(
        promoted > 0 && promoted <= 20,
        "kept while memory had room, then only what was read again: {promoted} of 40"
    );
    assert!(status["cache"]["bytes"].as_u64().unwrap() <= 1 << 20);
    // The last key, read again at once, is kept: its next read is a memory hit.
    let last = targets.last().unwrap();
    for _ in 0..2 {
        assert_eq!(get(&app, last).await.status(), 200);
    }
    let r = get(&app, last).await;
    assert!(!header(&r, "cache-status").contains("disk"), "{r:?}");
    assert_eq!(sim.hits("/stock/kline"), upstream, "no upstream request");
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// A purge by key, by endpoint or by prefix (the admin's) drops the disk's records
/// too, across a restart.
#[tokio::test]
async fn a_purge_removes_disk_entries() {
    let (clock, sim, path) = start("purge").await;
    let mut targets = PAST.to_vec();
    targets.push("/stock/detail/600519");
    targets.push("/market/indices");
    fill(&sim, &path, &clock, &targets).await;

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    let admin = format!("http://{}", app.admin_addr.unwrap());
    let client = support::client();
    for query in [
        "target=/stock/kline%3Fcode%3D600519%26period%3Dday%26fqt%3Dnone%26to%3D2026-03-06",
        "endpoint=/stock/detail/%7Bcode%7D",
        "prefix=/market/",
    ] {
        let r = client
            .post(format!("{admin}/purge?{query}"))
            .bearer_auth("admin-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{query}");
    }
    disk(&app).flush().await;
    app.shutdown().await;

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    for (target, from_disk) in [
        (PAST[0], false),
        ("/stock/detail/600519", false),
        ("/market/indices", false),
        (PAST[1], true),
    ] {
        let r = get(&app, target).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            header(&r, "cache-status").ends_with("detail=disk"),
            from_disk,
            "{target}"
        );
    }
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// A purge rule covers what was stored before it, and only that.
#[tokio::test]
async fn a_purge_rule_spares_what_is_stored_after_it() {
    let (clock, sim, path) = start("purge-after").await;
    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    let cache = app.state().cache().clone();
    get(&app, PAST[0]).await;
    disk(&app).flush().await;
    cache.purge(&Purge::Prefix("/stock/".into())).await;
    // Filled again after the purge: kept.
    get(&app, PAST[0]).await;
    disk(&app).flush().await;
    app.shutdown().await;
    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    let r = get(&app, PAST[0]).await;
    assert!(header(&r, "cache-status").ends_with("detail=disk"));
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// A fill whose upstream request was sent before a purge of its key answers its
/// client, but is written neither to memory nor to disk: after a restart the
/// upstream is asked again.
#[tokio::test]
async fn a_fill_in_flight_across_a_purge_is_not_written() {
    use std::sync::atomic::Ordering::Relaxed;
    let (clock, sim, path) = start("purge-in-flight").await;
    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    sim.set_hang(true);
    let asking = tokio::spawn({
        let request = support::client()
            .get(format!("{}{}", app.base_url(), PAST[0]))
            .bearer_auth(support::TOKEN);
        async move { request.send().await.unwrap() }
    });
    let upstream_asked = || sim.raw_requests().iter().any(|uri| uri.contains("kline"));
    let limit = std::time::Duration::from_secs(10);
    assert!(support::eventually(limit, upstream_asked).await);
    app.state()
        .cache()
        .purge(&Purge::Key(PAST[0].to_owned()))
        .await;
    sim.set_hang(false);
    assert_eq!(asking.await.unwrap().status(), 200);
    let tier = disk(&app);
    tier.flush().await;
    assert_eq!(tier.stats().writes.load(Relaxed), 0);
    assert_eq!(tier.stats().purged.load(Relaxed), 1);
    app.shutdown().await;

    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    assert_eq!(header(&get(&app, PAST[0]).await, "x-cache"), "MISS");
    assert_eq!(sim.hits("/stock/kline"), 2);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// A disk that cannot be used at start, or stops taking writes later, leaves the
/// proxy serving from memory: no request fails, the status page says so.
#[tokio::test]
async fn a_disk_that_cannot_be_written_degrades_to_memory_only() {
    // At start: the path is under a regular file.
    let (clock, sim, blocked) = start("blocked").await;
    std::fs::create_dir_all(&blocked).unwrap();
    std::fs::write(blocked.join("file"), b"x").unwrap();
    let app = proxy(&sim, &blocked.join("file").join("disk"), 64 << 20, &clock).await;
    assert!(app.state().cache().store().disk().is_none());
    assert_eq!(get(&app, PAST[0]).await.status(), 200);
    assert_eq!(status_json(&app).await["disk"]["state"], "off");
    app.shutdown().await;

    // Later: the disk stops taking writes (here the probe's file cannot be
    // written: a directory stands in its place).
    let path = dir("failing");
    let app = proxy(&sim, &path, 64 << 20, &clock).await;
    let d = disk(&app);
    std::fs::remove_file(path.join("mdproxy-probe")).unwrap();
    std::fs::create_dir(path.join("mdproxy-probe")).unwrap();
    d.check().await;
    assert!(!d.is_writable());
    for target in PAST {
        assert_eq!(get(&app, target).await.status(), 200);
        assert_eq!(header(&get(&app, target).await, "x-cache"), "HIT");
    }
    let status = status_json(&app).await;
    assert_eq!(status["disk"]["state"], "failing");
    assert_eq!(status["disk"]["dropped"]["write_failures"], 4);
    assert_eq!(status["disk"]["writes"], 0);
    // Writable again: writes resume.
    std::fs::remove_dir(path.join("mdproxy-probe")).unwrap();
    d.check().await;
    assert!(d.is_writable());
    assert_eq!(get(&app, "/stock/detail/600519").await.status(), 200);
    d.flush().await;
    assert_eq!(status_json(&app).await["disk"]["writes"], 1);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
    let _ = std::fs::remove_dir_all(&blocked);
}

/// The `macro-daily` job as the status page shows it, once its start-up run is
/// recorded.
async fn macro_daily_after_start(app: &App) -> serde_json::Value {
    let mut job = serde_json::Value::Null;
    for _ in 0..200 {
        let status = status_json(app).await;
        job = status["scheduler"]["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["name"] == "macro-daily").cloned())
            .unwrap_or_default();
        if job["runs"].as_u64() > Some(0) {
            return job;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no start-up run of macro-daily recorded: {job}");
}

/// The start-up prewarm is a run of its jobs on the status page, and after a
/// restart it says what it read from the disk apart from what it fetched: the
/// second node asks the upstream nothing and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_prewarm_counts_disk_reads_apart_from_fills() {
    let (clock, sim, path) = start("prewarm").await;
    let start_node = || {
        let mut config = disk_config(&sim, &path, 64 << 20);
        config.scheduler.enabled = true;
        config.scheduler.prewarm_on_start = true;
        let clock: Arc<dyn Clock> = clock.clone();
        async move { mdproxy_core::app::start(&config, clock).await.unwrap() }
    };
    let first = start_node().await;
    let job = macro_daily_after_start(&first).await;
    assert_eq!(job["runs"], 1, "{job}");
    assert_eq!(job["last_run"]["result"], "filled 22 of 22", "{job}");
    first.shutdown().await;

    let asked = sim.total();
    let second = start_node().await;
    let job = macro_daily_after_start(&second).await;
    assert_eq!(
        job["last_run"]["result"], "filled 0 of 22, 22 from disk or the fleet",
        "{job}"
    );
    assert_eq!(
        sim.total(),
        asked,
        "no upstream request for what the disk held"
    );
    second.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}

/// Pass-through answers are purged by every form, in memory and on the disk tier
/// (across restarts): `target=` with their path and query (`/api/v1` in front
/// too), a prefix of their path, `endpoint=passthrough`, and `prefix=/`, which
/// drops everything.
#[tokio::test]
async fn a_purge_reaches_pass_through_answers() {
    let (clock, sim, path) = start("purge-passthrough").await;
    for route in ["/market/newer-a", "/market/newer-b", "/news/newer-c"] {
        sim.serve_undocumented(route);
    }
    let node = || {
        let mut config = disk_config(&sim, &path, 64 << 20);
        config.passthrough.enabled = true;
        let clock: Arc<dyn Clock> = clock.clone();
        async move { mdproxy_core::app::start(&config, clock).await.unwrap() }
    };
    let targets = [
        "/market/newer-a?x=1",
        "/market/newer-b?x=1",
        "/news/newer-c?x=1",
        "/stock/detail/600519",
    ];
    let purge = |app: &App, query: &'static str| {
        let admin = format!("http://{}/purge?{query}", app.admin_addr.unwrap());
        async move {
            let r = support::client()
                .post(admin)
                .bearer_auth("admin-secret")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{query}");
            r.json::<serde_json::Value>().await.unwrap()["purged"].clone()
        }
    };
    // Where each target's answer came from after a restart: the disk or not.
    let from_disk = |app: App| async move {
        let mut read = Vec::new();
        for target in targets {
            let r = get(&app, target).await;
            assert_eq!(r.status(), 200, "{target}");
            read.push(header(&r, "cache-status").ends_with("detail=disk"));
        }
        disk(&app).flush().await;
        (app, read)
    };

    let app = node().await;
    for target in targets {
        assert_eq!(header(&get(&app, target).await, "x-cache"), "MISS");
    }
    disk(&app).flush().await;
    assert_eq!(
        purge(&app, "target=/api/v1/market/newer-a%3Fx%3D1").await,
        1
    );
    assert_eq!(purge(&app, "prefix=/market/").await, 1, "newer-b");
    app.shutdown().await;

    let (app, read) = from_disk(node().await).await;
    assert_eq!(read, [false, false, true, true]);
    assert_eq!(purge(&app, "endpoint=passthrough").await, 3);
    assert_eq!(purge(&app, "prefix=/").await, 1, "the catalogue's answer");
    app.shutdown().await;

    let (app, read) = from_disk(node().await).await;
    assert_eq!(read, [false; 4]);
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&path);
}
