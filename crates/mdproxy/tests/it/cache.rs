//! Freshness that knows the market, stale serving, HTTP caching to clients, reload,
//! prewarm and limits, through a real proxy in front of the simulator. Time is a
//! `ManualClock` wherever freshness is asserted; nothing sleeps real minutes.

use crate::support;

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mdproxy_config::{ClientConfig, JobConfig, Secret};
use support::{TOKEN, eventually, header};

/// Monday 2 March 2026, 10:00 China time: in session.
const MONDAY_10_00: &str = "2026-03-02T02:00:00Z";
/// Friday 6 March 2026, 16:00 China time: after the close.
const FRIDAY_16_00: &str = "2026-03-06T08:00:00Z";

/// Polls the proxy's cache until every key is there, for at most `limit`.
async fn cached(env: &support::Env, keys: &[&str], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let mut all = true;
        for key in keys {
            all &= env.proxy.state().cache().store().get(key).await.is_some();
        }
        if all {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// In session a live answer is fresh for its 3 s; after the close it stays fresh over
/// the weekend until shortly after Monday's open.
#[tokio::test]
async fn session_and_closed_ttls_differ() {
    let clock = support::clock_at(MONDAY_10_00);
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    assert_eq!(header(&env.get("/market/indices").await, "x-cache"), "MISS");
    clock.advance(Duration::from_secs(2));
    let hit = env.get("/market/indices").await;
    assert_eq!(header(&hit, "x-cache"), "HIT");
    assert_eq!(header(&hit, "cache-control"), "max-age=1");
    clock.advance(Duration::from_secs(2));
    // 4 s old: past the 3 s fresh, inside the 6 s stale window.
    let stale = env.get("/market/indices").await;
    assert_eq!(header(&stale, "x-cache"), "STALE");
    assert_eq!(header(&stale, "age"), "4");

    clock.set(
        chrono::DateTime::parse_from_rfc3339(FRIDAY_16_00)
            .unwrap()
            .into(),
    );
    env.get("/stock/detail/600519").await; // refetched after the close
    clock.advance(Duration::from_secs(2 * 86_400)); // Sunday 16:00
    let weekend = env.get("/stock/detail/600519").await;
    assert_eq!(header(&weekend, "x-cache"), "HIT");
    let max_age: u64 = header(&weekend, "cache-control")["max-age=".len()..]
        .parse()
        .unwrap();
    assert_eq!(max_age, 17 * 3600 + 16 * 60, "until Monday 09:16");
    clock.advance(Duration::from_secs(17 * 3600 + 16 * 60 + 1)); // Monday 09:16:01
    let after_open = env.get("/stock/detail/600519").await;
    assert_eq!(header(&after_open, "x-cache"), "STALE");
}

/// A stale answer is served at once to everyone, and exactly one background request
/// refreshes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_hits_are_served_at_once_and_refreshed_once() {
    let clock = support::clock_at(MONDAY_10_00);
    let env = Arc::new(support::start_with(|_| {}, |_| {}, Some(clock.clone())).await);
    let first = env.get("/market/indices").await.bytes().await.unwrap();
    env.sim.set_latency(Duration::from_millis(300));
    clock.advance(Duration::from_secs(5)); // past 3 s fresh, inside the 6 s stale window
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let env = env.clone();
        tasks.push(tokio::spawn(async move {
            let r = env.get("/market/indices").await;
            (
                header(&r, "x-cache"),
                header(&r, "age"),
                r.bytes().await.unwrap(),
            )
        }));
    }
    for t in tasks {
        let (x_cache, age, body) = t.await.unwrap();
        assert_eq!(x_cache, "STALE");
        assert_eq!(age, "5");
        assert_eq!(body, first, "the stale answer, not a wait for the upstream");
    }
    assert!(
        eventually(Duration::from_secs(5), || env.sim.hits("/market/indices")
            == 2)
        .await
    );
    // Once the refresh lands requests are fresh hits, and no second refresh ran.
    let mut hit = None;
    for _ in 0..100 {
        let r = env.get("/market/indices").await;
        if header(&r, "x-cache") == "HIT" {
            hit = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hit = hit.expect("the refreshed answer arrives");
    assert_eq!(header(&hit, "age"), "0");
    assert!(header(&hit, "cache-status").starts_with("mdproxy; hit"));
    assert_eq!(env.sim.hits("/market/indices"), 2);
}

/// A stale answer with a quick copy, served while its refresh is under way, gets
/// no copy at the chosen level: the refresh makes it for the entry that replaces
/// the stale one, which is then served with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_answer_being_refreshed_is_not_compressed_again() {
    use mdproxy_core::cache::encoding::Coding;
    let clock = support::clock_at(MONDAY_10_00);
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let target = "/market/indices";
    let accept = [("accept-encoding", "zstd")];
    let first = env.get_with(target, &accept).await;
    assert_eq!(
        header(&first, "content-encoding"),
        "zstd",
        "big enough to compress"
    );
    assert!(header(&first, "etag").ends_with("-zst1\""));
    let store = env.proxy.state().cache().store();
    let key = store.keys().pop().expect("stored");
    let stale_entry = store.get(&key).await.unwrap();
    assert!(stale_entry.has_quick(Coding::Zstd));

    // The refresh takes 1 s (the tests' upstream timeout is 2 s): the stale
    // requests below all come while it runs.
    env.sim.set_latency(Duration::from_secs(1));
    clock.advance(Duration::from_secs(5)); // past 3 s fresh, inside the 6 s stale window
    for _ in 0..3 {
        let stale = env.get_with(target, &accept).await;
        assert_eq!(header(&stale, "x-cache"), "STALE");
        assert!(
            header(&stale, "etag").ends_with("-zst1\""),
            "the quick copy"
        );
    }
    // The refresh lands with the copy at the chosen level made for it.
    let mut hit = None;
    for _ in 0..200 {
        let r = env.get_with(target, &accept).await;
        if header(&r, "x-cache") == "HIT" {
            hit = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hit = hit.expect("the refreshed answer arrives");
    assert!(
        header(&hit, "etag").ends_with("-zst\""),
        "{}",
        header(&hit, "etag")
    );
    assert!(
        stale_entry.encoded_now(Coding::Zstd).is_none(),
        "nothing was made for the entry being replaced"
    );
}

/// With the upstream gone, every key cached before is still answered, marked STALE.
#[tokio::test]
async fn upstream_off_still_serves_every_cached_key() {
    let clock = support::clock_at(MONDAY_10_00);
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    // What each key is 30 minutes later, in session, with the upstream gone: the
    // injected clock fixes it. Short-lived classes are past fresh and served STALE
    // (stale-if-error); the macro series (6 h) and the daily diagnosis (1 h) are
    // still fresh.
    let expected = [
        ("/market/indices", "STALE"),
        ("/stock/detail/000001", "STALE"),
        ("/stock/kline?code=600519&period=week", "STALE"),
        ("/news/feed", "STALE"),
        ("/macro/cpi/series", "HIT"),
        ("/fund/all-etf-list", "STALE"),
        ("/stock/diagnosis/comprehensive/300750", "HIT"),
    ];
    let targets = expected.map(|(t, _)| t);
    let mut bodies = Vec::new();
    for t in targets {
        bodies.push(env.get(t).await.bytes().await.unwrap());
    }
    let support::Env {
        sim, proxy, client, ..
    } = env;
    sim.shutdown().await;
    clock.advance(Duration::from_secs(30 * 60)); // everything short-lived is past fresh
    for ((t, want), body) in expected.iter().zip(bodies) {
        let r = client
            .get(format!("{}{t}", proxy.base_url()))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{t}");
        assert_eq!(header(&r, "x-cache"), *want, "{t}");
        assert_eq!(r.bytes().await.unwrap(), body, "{t}");
    }
    // A key never cached has nothing to fall back on.
    let r = client
        .get(format!("{}/market/hotmap", proxy.base_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
}

/// The answer to `accept` in `coding`, asked until it is made (see
/// [`support::once_coded`]).
async fn coded(env: &support::Env, target: &str, accept: &str, coding: &str) -> reqwest::Response {
    support::once_coded(coding, || async {
        let r = env.get_with(target, &[("accept-encoding", accept)]).await;
        (header(&r, "content-encoding"), r)
    })
    .await
}

/// gzip, brotli and zstd are chosen by Accept-Encoding (q-values, `q=0` refusing),
/// each decompresses to the cached bytes, is made once, is weighed by the store,
/// and has its own ETag that `If-None-Match` recognises.
#[tokio::test]
async fn every_encoding_and_its_etag_follow_the_representation() {
    let env = support::start().await;
    let target = "/stock/kline?code=000001&period=day&fqt=post";
    let plain = env.get(target).await;
    assert_eq!(support::headers(&plain, "vary"), ["Accept-Encoding"]);
    let plain_etag = header(&plain, "etag");
    let plain = plain.bytes().await.unwrap();
    // Filled for a client that asked for nothing: the first gzip request may get
    // the identity body, while gzip is made.
    let gz = coded(&env, target, "gzip, br;q=0.5", "gzip").await;
    let gz_etag = header(&gz, "etag");
    assert_ne!(gz_etag, plain_etag);
    let compressed = gz.bytes().await.unwrap();
    assert!(compressed.len() < plain.len() / 2);
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&compressed[..])
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, plain);
    let again = env
        .get_with(target, &[("accept-encoding", "gzip")])
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(again, compressed, "compressed once, served the same");
    // 304s read off the socket: exactly the headers, no body.
    let nm = env
        .raw(
            "GET",
            target,
            &[("Accept-Encoding", "gzip"), ("If-None-Match", &gz_etag)],
        )
        .await;
    assert_eq!(nm.status, 304);
    assert_eq!(nm.header("etag"), Some(gz_etag.as_str()));
    assert!(nm.body.is_empty(), "{} body bytes", nm.body.len());
    let nm = env
        .raw("GET", target, &[("If-None-Match", &plain_etag)])
        .await;
    assert_eq!(nm.status, 304);
    assert_eq!(nm.header("etag"), Some(plain_etag.as_str()));
    assert!(nm.body.is_empty(), "{} body bytes", nm.body.len());
    assert_eq!(
        env.get_with(target, &[("accept-encoding", "gzip;q=0")])
            .await
            .bytes()
            .await
            .unwrap(),
        plain
    );
    // brotli and zstd: each its own representation and validator, chosen by weight.
    let mut tags = vec![plain_etag.clone(), gz_etag.clone()];
    for (accept, coding) in [
        ("gzip;q=0.5, br", "br"),
        ("gzip, deflate, br, zstd", "zstd"),
        ("zstd;q=0, br;q=0.9, gzip;q=0.8", "br"),
    ] {
        let r = coded(&env, target, accept, coding).await;
        assert_eq!(support::headers(&r, "vary"), ["Accept-Encoding"]);
        let tag = header(&r, "etag");
        let packed = r.bytes().await.unwrap();
        assert!(packed.len() < plain.len() / 2, "{coding}: {}", packed.len());
        let mut out = Vec::new();
        if coding == "br" {
            brotli::Decompressor::new(&packed[..], 4096)
                .read_to_end(&mut out)
                .unwrap();
        } else {
            out = zstd::stream::decode_all(&packed[..]).unwrap();
        }
        assert_eq!(out, plain, "{coding} decompresses to the body");
        if !tags.contains(&tag) {
            tags.push(tag.clone());
        }
        let nm = env
            .raw(
                "GET",
                target,
                &[("Accept-Encoding", accept), ("If-None-Match", &tag)],
            )
            .await;
        assert_eq!(nm.status, 304, "{coding}");
    }
    assert_eq!(tags.len(), 4, "one validator per representation: {tags:?}");
    // The store weighs every representation it holds.
    let store = env.proxy.state().cache().store();
    let keys = store.keys();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let entry = store.get(&keys[0]).await.unwrap();
    let held: usize = mdproxy_core::cache::encoding::Coding::ALL
        .iter()
        .map(|&c| entry.encoded_now(c).expect("made once asked for").len())
        .sum();
    assert!(
        mdproxy_core::cache::entry::weight(&keys[0], &entry) >= (plain.len() + held) as u64,
        "weighed with its representations"
    );
}

/// A fill makes the coding the client that starts it takes, before the answer is
/// stored: the very first answer is compressed, at the coding's quick level, with a
/// validator of its own. The next request has the copy at the chosen level made,
/// which replaces it. Codings that client does not take are not made by it, even
/// when other clients asked for them lately.
#[tokio::test]
async fn a_fill_makes_the_coding_its_clients_ask_for() {
    use mdproxy_core::cache::encoding::Coding;
    let env = support::start().await;
    let target = "/stock/kline?code=000001&period=day&fqt=post";
    let accept = [("accept-encoding", "gzip, deflate, br, zstd")];
    let first = env.get_with(target, &accept).await;
    assert_eq!(header(&first, "x-cache"), "MISS");
    assert_eq!(header(&first, "content-encoding"), "zstd");
    let quick_etag = header(&first, "etag");
    assert!(quick_etag.ends_with("-zst1\""), "{quick_etag}");
    let packed = first.bytes().await.unwrap();
    let store = env.proxy.state().cache().store();
    let key = store.keys().pop().expect("the answer is stored");
    let entry = store.get(&key).await.unwrap();
    assert_eq!(
        entry.copy(Coding::Zstd).map(|(b, _)| b),
        Some(packed.clone())
    );
    assert!(entry.has_quick(Coding::Zstd));
    assert!(
        entry.encoded_now(Coding::Zstd).is_none(),
        "not asked again yet"
    );
    assert!(entry.copy(Coding::Gzip).is_none(), "no client asked");
    assert!(entry.copy(Coding::Brotli).is_none(), "no client asked");
    // Asked again: the chosen level is made, and served from then on.
    // (`once_coded` on the validator's suffix: `zst1` for the quick copy, `zst`.)
    let chosen = support::once_coded("zst", || async {
        let r = env.get_with(target, &accept).await;
        let tag = header(&r, "etag");
        let suffix = tag
            .trim_matches('"')
            .split_once('-')
            .map(|(_, s)| s.to_owned());
        (suffix.unwrap_or_default(), r)
    })
    .await;
    assert_eq!(header(&chosen, "x-cache"), "HIT");
    let chosen = chosen.bytes().await.unwrap();
    assert_eq!(
        zstd::stream::decode_all(&chosen[..]).unwrap(),
        zstd::stream::decode_all(&packed[..]).unwrap()
    );
    assert_eq!(entry.encoded_now(Coding::Zstd), Some(&chosen));
    assert!(!entry.has_quick(Coding::Zstd), "replaced");
    // Another K-line, filled for a client that takes no coding, is stored as it
    // came, though zstd was asked lately: nothing is compressed for a key that no
    // client taking it may ever ask. The first that does has it made (and the
    // plain body meanwhile).
    let other = "/stock/kline?code=000002&period=day&fqt=post";
    assert_eq!(header(&env.get(other).await, "content-encoding"), "");
    let key = store
        .keys()
        .into_iter()
        .find(|k| k.contains("000002"))
        .expect("stored");
    let entry = store.get(&key).await.unwrap();
    assert!(entry.encoded_now(Coding::Zstd).is_none(), "made for no one");
    let hit = env.get_with(other, &[("accept-encoding", "zstd")]).await;
    assert_eq!(header(&hit, "x-cache"), "HIT");
    assert!(
        support::eventually(Duration::from_secs(10), || entry
            .encoded_now(Coding::Zstd)
            .is_some())
        .await,
        "made for the first client that takes it"
    );
}

/// CORS: a configured origin gets its preflight answered without a token and may read
/// the cache headers; any other origin gets nothing.
#[tokio::test]
async fn cors_serves_configured_origins() {
    let env = support::start_with(
        |_| {},
        |c| c.server.cors_origins = vec!["https://dash.example.com".into()],
        Some(support::saturday()),
    )
    .await;
    let pre = env
        .client
        .request(reqwest::Method::OPTIONS, env.url("/market/indices"))
        .header("origin", "https://dash.example.com")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), 204);
    assert_eq!(
        header(&pre, "access-control-allow-origin"),
        "https://dash.example.com"
    );
    assert!(header(&pre, "access-control-allow-headers").contains("Authorization"));
    let get = env
        .get_with("/market/indices", &[("origin", "https://dash.example.com")])
        .await;
    assert_eq!(
        header(&get, "access-control-allow-origin"),
        "https://dash.example.com"
    );
    assert!(header(&get, "access-control-expose-headers").contains("X-Cache"));
    // Two Vary lines: the representation's and CORS's (header() sees only the first).
    let vary = support::headers(&get, "vary");
    assert!(vary.iter().any(|v| v == "Accept-Encoding"), "{vary:?}");
    assert!(vary.iter().any(|v| v == "Origin"), "{vary:?}");
    let other = env
        .get_with("/market/indices", &[("origin", "https://evil.example")])
        .await;
    assert_eq!(header(&other, "access-control-allow-origin"), "");
}

/// An invalid config file is refused and the old config keeps serving (cache and
/// all); a valid one applies without a restart.
#[tokio::test]
async fn invalid_reload_keeps_the_running_config() {
    let dir = std::env::temp_dir().join(format!("mdproxy-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mdproxy.toml");
    let clock = support::saturday();
    let sim = mdproxy_sim::start(&support::sim_config(), clock.clone())
        .await
        .unwrap();
    let write = |tokens: &str, extra: &str| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 50\n[auth]\ntokens = [{tokens}]\n[upstream]\nbase_url = \"{}\"\ntoken = \"{}\"\n[scheduler]\nenabled = false\n{extra}",
            sim.base_url(),
            support::UPSTREAM_TOKEN
        );
        std::fs::write(&path, text).unwrap();
    };
    write("\"old-token\"", "");
    let config = mdproxy_config::load(&path, &|_: &str| None, &[]).unwrap();
    let proxy = mdproxy_core::app::start(&config, clock).await.unwrap();
    // The watcher's environment lookup runs on every load it attempts, valid or not
    // (overrides apply before validation): counting its calls shows, without reading
    // logs, that the watcher did read a file.
    let loads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = loads.clone();
    proxy.watch_config(
        path.clone(),
        Arc::new(move |_: &str| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            None
        }),
    );
    let lookups = || loads.load(std::sync::atomic::Ordering::SeqCst);
    let generation = || proxy.state().snapshot().generation;
    let client = support::client();
    let get = |token: &'static str| {
        let req = client
            .get(format!("{}/macro/gdp/series", proxy.base_url()))
            .bearer_auth(token);
        async move { req.send().await.unwrap() }
    };
    assert_eq!(header(&get("old-token").await, "x-cache"), "MISS");

    let before = lookups();
    write("\"new-token\"", "[limits]\nbackground_percent = 400\n"); // invalid value
    assert!(
        eventually(Duration::from_secs(10), || lookups() > before).await,
        "the watcher read the invalid file"
    );
    // The watcher handles one file at a time: once a later valid change has applied,
    // the invalid one has certainly been dealt with. It was refused if that change
    // is the first generation.
    write("\"old-token\", \"marker-token\"", "");
    assert!(eventually(Duration::from_secs(10), || generation() >= 1).await);
    assert_eq!(generation(), 1, "the invalid file was not applied");
    assert_eq!(get("marker-token").await.status(), 200);
    let r = get("old-token").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-cache"), "HIT");
    assert_eq!(get("new-token").await.status(), 401);

    write("\"new-token\"", "");
    assert!(eventually(Duration::from_secs(10), || generation() == 2).await);
    let r = get("new-token").await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-cache"),
        "HIT",
        "the cache survived the reloads"
    );
    assert_eq!(get("old-token").await.status(), 401);
    std::fs::remove_dir_all(&dir).ok();
}

/// A scheduled job fills the cache so that the first client request is a HIT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_job_prewarms_the_cache() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.scheduler.enabled = true;
            c.scheduler.prewarm_on_start = false;
            c.scheduler.jobs = vec![JobConfig {
                name: "test".into(),
                cron: "* * * * * *".into(),
                targets: vec![
                    "/market/fund-analysis".into(),
                    "/stock/kline?code=600519&period=month".into(),
                ],
                session_only: false,
            }];
        },
        Some(support::saturday()),
    )
    .await;
    // Wait until the job's answers have landed (not merely reached the upstream).
    assert!(
        cached(
            &env,
            &[
                "/market/fund-analysis",
                "/stock/kline?code=600519&period=month"
            ],
            Duration::from_secs(10)
        )
        .await
    );
    let r = env.get("/market/fund-analysis").await;
    assert_eq!(header(&r, "x-cache"), "HIT");
    assert_eq!(
        header(
            &env.get("/stock/kline?code=600519&period=month").await,
            "x-cache"
        ),
        "HIT"
    );
}

/// Start-up prewarm fills the built-in set (macro series, lists on a trading day).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_prewarm_fills_the_builtin_set() {
    let clock = support::clock_at("2026-03-02T00:00:00Z"); // Monday 08:00 China time
    let env = support::start_with(
        |_| {},
        |c| {
            c.scheduler.enabled = true;
            c.scheduler.prewarm_on_start = true;
        },
        Some(clock),
    )
    .await;
    let keys = [
        "/macro/cpi/series",
        "/macro/pmi",
        "/stock/industry/list",
        "/fund/all-etf-list",
    ];
    assert!(cached(&env, &keys, Duration::from_secs(30)).await);
    for t in [
        "/macro/cpi/series",
        "/macro/pmi",
        "/stock/industry/list",
        "/fund/all-etf-list",
    ] {
        assert_eq!(header(&env.get(t).await, "x-cache"), "HIT", "{t}");
    }
    assert_eq!(
        env.sim.hits("/market/indices"),
        0,
        "indices wait for the session"
    );
}

/// A burst of distinct cold keys never pushes the upstream past its cap: on
/// governor's fake clock, the burst (5) goes at once and then exactly one request
/// per interval (200 ms at 5 rps) as the clock is advanced, whatever the speed of
/// the machine (nothing here reads the wall clock to decide).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_cap_holds_under_a_burst_of_cold_keys() {
    use governor::clock::FakeRelativeClock;
    use mdproxy_core::upstream::budget::RateClock;
    let fake = FakeRelativeClock::default();
    let clock = support::saturday();
    let sim = mdproxy_sim::start(&support::sim_config(), clock.clone())
        .await
        .unwrap();
    let mut config = support::proxy_config(&sim);
    config.limits.upstream_rps = 5;
    config.limits.upstream_burst = 5;
    config.limits.client_wait_ms = 60_000;
    let proxy = mdproxy_core::app::start_with(&config, clock, RateClock::Fake(fake.clone()))
        .await
        .unwrap();
    let client = support::client();
    let codes: Vec<String> = support::listed_codes(25);
    let mut tasks = Vec::new();
    for code in codes {
        let request = client
            .get(format!("{}/stock/detail/{code}", proxy.base_url()))
            .bearer_auth(support::TOKEN);
        tasks.push(tokio::spawn(async move {
            request.send().await.unwrap().status()
        }));
    }
    // The burst, and no more while the clock stands.
    assert!(support::eventually(Duration::from_secs(10), || sim.total() == 5).await);
    // Then one more per interval of the injected clock: each step must see exactly
    // one more, so a second per interval would overshoot a step and never come
    // back (and the 25 keys would run out before the 20th). That every waiter looks
    // again before the next interval, on tokio's paused clock, is the budget's own
    // test (waiting_clients_get_one_permit_per_interval).
    for step in 1..=20u64 {
        fake.advance(Duration::from_millis(200));
        assert!(
            support::eventually(Duration::from_secs(10), || sim.total() == 5 + step).await,
            "step {step}: {} upstream requests",
            sim.total()
        );
    }
    for t in tasks {
        let status = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status, 200);
    }
    assert_eq!(sim.total(), 25);
    proxy.shutdown().await;
}

/// Past a token's limit the client gets 429 with Retry-After; other tokens are not
/// affected.
#[tokio::test]
async fn token_limit_gives_429_with_retry_after() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.auth.clients = vec![ClientConfig {
                name: "tiny".into(),
                token: Secret::new("tiny-token"),
                rps: Some(1),
                burst: Some(2),
            }];
        },
        None,
    )
    .await;
    let get = |token: &str| {
        env.client
            .get(env.url("/market/indices"))
            .bearer_auth(token.to_owned())
            .send()
    };
    assert_eq!(get("tiny-token").await.unwrap().status(), 200);
    assert_eq!(get("tiny-token").await.unwrap().status(), 200);
    let limited = get("tiny-token").await.unwrap();
    assert_eq!(limited.status(), 429);
    let retry: u64 = header(&limited, "retry-after").parse().unwrap();
    assert!(retry >= 1);
    assert_eq!(support::error_of(limited).await.1, "rate_limited");
    assert_eq!(get(TOKEN).await.unwrap().status(), 200);
}

/// Demand-driven jobs fetch only what clients use: nothing for an idle proxy.
#[tokio::test]
async fn demand_driven_jobs_skip_endpoints_nobody_asks_for() {
    let env = support::start().await;
    let plan = mdproxy_core::ops::scheduler::builtin()
        .into_iter()
        .find(|p| p.name == "global-indices")
        .unwrap();
    assert!(plan.on_demand);
    let forced = mdproxy_core::ops::scheduler::Plan {
        force: true,
        ..plan
    };
    mdproxy_core::ops::scheduler::run(env.proxy.state(), &forced).await;
    assert_eq!(
        env.sim.hits("/market/global-index"),
        0,
        "idle: no upstream request"
    );
    env.get("/market/global-index").await;
    assert_eq!(env.sim.hits("/market/global-index"), 1);
    mdproxy_core::ops::scheduler::run(env.proxy.state(), &forced).await;
    assert_eq!(
        env.sim.hits("/market/global-index"),
        2,
        "in use: refreshed by the job"
    );
}
