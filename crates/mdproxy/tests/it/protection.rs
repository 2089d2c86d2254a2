//! Upstream protection (issue 27): the upstream's `Retry-After` honoured, a rate
//! that adapts to a source that warns then bans, vendor quotas over a simulated day,
//! failing keys held back, one breaker per route, a close-delimited answer cut
//! short, and failover to a second upstream and back. Real servers on loopback; the
//! market, quota and rate clocks are injected.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use mdproxy_config::{Config, FallbackConfig, Secret};
use mdproxy_core::upstream::UpstreamOutcome;
use mdproxy_core::upstream::budget::RateClock;
use mdproxy_market::{Clock, ManualClock, ScaledClock};
use mdproxy_sim::{SimHandle, ThrottleMode, Throttling};
use support::{Env, Scripted, error_of, header};

/// Monday 9 March 2026, 10:00 China time: in session, so a quote is fresh for 3 s.
const MONDAY_10AM: &str = "2026-03-09T10:00:00+08:00";

/// A simulator and a proxy on `clock`, the proxy's rates, pauses and breakers on
/// `fake` (which moves only when the test says).
async fn start_faked(
    clock: Arc<ManualClock>,
    fake: &FakeRelativeClock,
    change: impl FnOnce(&mut Config),
) -> Env {
    let sim = mdproxy_sim::start(&support::sim_config(), clock.clone())
        .await
        .unwrap();
    let mut config = support::proxy_config(&sim);
    change(&mut config);
    let proxy =
        mdproxy_core::app::start_with(&config, clock.clone(), RateClock::Fake(fake.clone()))
            .await
            .unwrap();
    Env {
        sim,
        proxy,
        client: support::client(),
        clock: Some(clock),
    }
}

/// A proxy in front of a hand-written upstream, on `clock` and (for rates, pauses
/// and breakers) `fake`.
async fn scripted_proxy(
    upstream: &Scripted,
    clock: Arc<ManualClock>,
    fake: &FakeRelativeClock,
    change: impl FnOnce(&mut Config),
) -> mdproxy_core::app::App {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".into();
    config.auth.tokens = vec![Secret::new(support::TOKEN)];
    config.upstream.base_url = format!("http://{}/api/v1", upstream.addr);
    config.scheduler.enabled = false;
    config.upstream.probe_target = String::new();
    change(&mut config);
    mdproxy_core::app::start_with(&config, clock, RateClock::Fake(fake.clone()))
        .await
        .unwrap()
}

/// GET `target` from `app` with the test token.
async fn get(app: &mdproxy_core::app::App, target: &str) -> reqwest::Response {
    support::client()
        .get(format!("{}{target}", app.base_url()))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap()
}

/// The `Cache-Status` detail of an answer ("" when it has none).
fn detail(r: &reqwest::Response) -> String {
    header(r, "cache-status")
        .split("detail=")
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

/// A `429` pauses the upstream until its `Retry-After`: nothing is sent meanwhile,
/// cached keys are served stale saying why, uncached ones get 503 with the time
/// left at once; when the time is up the upstream is asked again.
#[tokio::test]
async fn a_429_pauses_the_upstream_until_its_retry_after() {
    let clock = support::clock_at(MONDAY_10AM);
    let fake = FakeRelativeClock::default();
    let env = start_faked(clock.clone(), &fake, |_| {}).await;
    // Two requests in each ten minutes of the simulator's clock.
    env.sim.set_throttling(Some(Throttling {
        limit: 2,
        window: Duration::from_secs(600),
        mode: ThrottleMode::TooManyRequests,
    }));
    let cached = ["/stock/detail/600519", "/stock/detail/000001"];
    let mut bodies = Vec::new();
    for target in cached {
        let r = env.get(target).await;
        assert_eq!(header(&r, "x-cache"), "MISS");
        bodies.push(r.bytes().await.unwrap());
    }
    // A minute later both are past fresh and stale (usable on error only).
    clock.advance(Duration::from_secs(60));
    let r = env.get("/stock/detail/600000").await;
    assert_eq!(header(&r, "retry-after"), "540", "the window's end");
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (503, "upstream_throttled"));
    let asked = env.sim.raw_count();

    // Throughout the pause: stale with the reason, or 503 with the time left.
    for round in 0..3 {
        for (target, body) in cached.iter().zip(&bodies) {
            let r = env.get(target).await;
            assert_eq!(header(&r, "x-cache"), "STALE", "{target}");
            assert_eq!(detail(&r), "stale-upstream-paused", "{target}");
            assert_eq!(&r.bytes().await.unwrap(), body);
        }
        let r = env.get(&format!("/stock/detail/60000{round}")).await;
        assert_eq!(r.status(), 503);
        let retry: u64 = header(&r, "retry-after").parse().unwrap();
        assert!((1..=540).contains(&retry), "{retry}");
        fake.advance(Duration::from_secs(100));
        clock.advance(Duration::from_secs(100));
    }
    assert_eq!(
        env.sim.raw_count(),
        asked,
        "nothing was sent during the pause"
    );
    let report = &env.proxy.state().upstream().report()[0];
    assert_eq!(report.pauses, 1);
    assert!(report.paused_for.is_some());

    // The pause is over (and a new window began): asked again.
    fake.advance(Duration::from_secs(240));
    clock.advance(Duration::from_secs(240));
    let r = env.get("/stock/detail/600000").await;
    assert_eq!(header(&r, "x-cache"), "MISS");
    assert_eq!(env.sim.raw_count(), asked + 1);
    assert!(
        env.proxy.state().upstream().report()[0]
            .paused_for
            .is_none()
    );
}

/// One permit (the rate clock standing still at `at`), a first request that the
/// upstream throttles after 300 ms with `Retry-After: retry_after`, and a second
/// queued for budget meanwhile (waiting `client_wait_ms` at most): both answers,
/// the proxy and the upstream.
async fn throttled_with_one_waiting(
    retry_after: &str,
    client_wait_ms: u64,
    at: Duration,
) -> (
    reqwest::Response,
    reqwest::Response,
    mdproxy_core::app::App,
    Scripted,
) {
    let upstream = Scripted::start().await;
    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let fake = FakeRelativeClock::default();
    fake.advance(at);
    let proxy = scripted_proxy(&upstream, clock, &fake, |c| {
        c.limits.upstream_rps = 1;
        c.limits.upstream_burst = 1;
        c.limits.client_wait_ms = client_wait_ms;
    })
    .await;
    let throttled = support::response(
        "429 Too Many Requests",
        &[("Retry-After", retry_after)],
        "{}",
    );
    upstream.then_late(Duration::from_millis(300), throttled);
    let first = get(&proxy, "/news/overview");
    let second = async {
        // Queued for budget while the first is out.
        tokio::time::sleep(Duration::from_millis(50)).await;
        get(&proxy, "/news/mainline").await
    };
    let (first, second) = tokio::join!(first, second);
    (first, second, proxy, upstream)
}

/// A client waiting for budget when a `429` pauses the upstream gives up at once
/// with the pause's 503: it is not sent during the pause, nor kept waiting for
/// budget it cannot use.
#[tokio::test]
async fn a_request_waiting_for_budget_gives_up_when_a_pause_begins() {
    let (first, second, proxy, upstream) =
        throttled_with_one_waiting("120", 20_000, Duration::ZERO).await;
    assert_eq!(first.status(), 503);
    assert_eq!(header(&second, "retry-after"), "120");
    let (status, code, _) = error_of(second).await;
    assert_eq!((status, code.as_str()), (503, "upstream_throttled"));
    assert_eq!(upstream.received(), 1, "nothing was sent during the pause");
    proxy.shutdown().await;
}

/// Defect: a `429` with `Retry-After: 0` (or a date already past) woke every
/// request waiting for budget as a pause would, found no pause running, and sent
/// them all without a permit: the queue fired at an upstream that had just
/// throttled us. A zero wait is no pause; a waiter goes out only with a permit.
#[tokio::test]
async fn a_retry_after_of_zero_sends_no_one_without_a_permit() {
    // The rate clock past zero, where a pause of zero still looked like one
    // ending later than the last.
    let (first, second, proxy, upstream) =
        throttled_with_one_waiting("0", 1_000, Duration::from_secs(5)).await;
    assert_eq!(first.status(), 503);
    assert_eq!(second.status(), 503, "no permit within client_wait_ms");
    assert_eq!(upstream.received(), 1, "nothing went out without a permit");
    assert_eq!(proxy.state().upstream().report()[0].pauses, 0);
    proxy.shutdown().await;
}

/// A spent quota costs a client no wait for budget: it is told at once when the
/// quota resets.
#[tokio::test]
async fn a_spent_quota_costs_no_wait_for_budget() {
    let clock = support::clock_at("2026-11-21T20:00:30+08:00");
    let fake = FakeRelativeClock::default();
    let env = start_faked(clock, &fake, |c| {
        c.limits.upstream_rps = 1;
        c.limits.upstream_burst = 1;
        c.limits.client_wait_ms = 20_000;
        c.limits.upstream_per_minute = 1;
    })
    .await;
    assert_eq!(env.get("/news/overview").await.status(), 200);
    let r = env.get("/news/mainline").await;
    assert_eq!(header(&r, "retry-after"), "30", "the next minute");
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (503, "upstream_throttled"));
    let report = &env.proxy.state().upstream().report()[0];
    assert_eq!(report.quota.this_minute, 1);
}

/// A key whose retry could not go out (no budget for background work) is not held
/// back for good: the next request after its backoff tries itself, and once the
/// upstream is well again the key is answered.
#[tokio::test]
async fn a_failing_key_is_never_held_for_good() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.limits.upstream_rps = 1_000;
            c.limits.upstream_burst = 1_000;
            // No share for background work: every retry is dropped.
            c.limits.background_percent = 0;
            c.limits.failure_backoff_ms = 50;
            c.limits.failure_backoff_max_ms = 50;
        },
        Some(support::saturday()),
    )
    .await;
    let key = "/fund/detail/159915";
    env.sim.fail_path(key, "socket hang up");
    for _ in 0..2 {
        let v: serde_json::Value = env.get(key).await.json().await.unwrap();
        assert_eq!(v["success"], false);
    }
    env.sim.heal_path(key);
    let healed = async {
        loop {
            let v: serde_json::Value = env.get(key).await.json().await.unwrap();
            if v["success"] == true {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), healed)
        .await
        .expect("the key was held back for good");
}

/// A source that warns (`200` + `success:false`, "socket hang up") past its limit
/// and bans a key that keeps going: under a flood of cold keys mdproxy slows at its
/// first warnings, is never banned, settles near the tolerated rate (2 a second,
/// five times below `upstream_rps`), and serves every cached key throughout. The
/// simulator and the proxy share a clock running 40 times faster than real time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_warns_then_bans_never_bans_mdproxy() {
    const FACTOR: f64 = 40.0;
    let start = chrono::DateTime::parse_from_rfc3339(MONDAY_10AM)
        .unwrap()
        .to_utc();
    let clock = ScaledClock::new(start, FACTOR);
    let sim = mdproxy_sim::start(&support::sim_config(), clock.clone())
        .await
        .unwrap();
    let mut config = support::proxy_config(&sim);
    config.limits.upstream_rps = 10;
    config.limits.upstream_burst = 2;
    config.limits.adaptive_recovery_secs = 60;
    // Real milliseconds (40 s of the clock): a client queues, the flood never ends.
    config.limits.client_wait_ms = 1_000;
    let proxy = mdproxy_core::app::start_with(
        &config,
        clock.clone(),
        mdproxy_core::upstream::budget::RateClock::following(&clock),
    )
    .await
    .unwrap();
    let env = Arc::new(Env {
        sim,
        proxy,
        client: support::client(),
        clock: None,
    });
    let cached = ["/stock/detail/600519", "/market/indices", "/news/overview"];
    for target in cached {
        assert_eq!(env.get(target).await.status(), 200, "{target}");
    }
    // 20 requests in 10 s; past 30 more in one window, a ban of an hour.
    env.sim.set_throttling(Some(Throttling {
        limit: 20,
        window: Duration::from_secs(10),
        mode: ThrottleMode::WarnThenBan {
            warnings: 30,
            lasts: Duration::from_secs(3_600),
        },
    }));
    let codes: Arc<Vec<String>> = Arc::new(
        mdproxy_sim::universe::universe()
            .stocks
            .iter()
            .map(|s| s.code.clone())
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for _ in 0..8 {
        let (env, codes, next, done) = (env.clone(), codes.clone(), next.clone(), done.clone());
        flood.push(tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let i = next.fetch_add(1, Ordering::SeqCst) % codes.len();
                let _ = env.get(&format!("/stock/detail/{}", codes[i])).await;
            }
        }));
    }
    let watcher = {
        let (env, done) = (env.clone(), done.clone());
        tokio::spawn(async move {
            let mut served = 0;
            while !done.load(Ordering::SeqCst) {
                for target in cached {
                    let r = env.get(target).await;
                    assert_eq!(r.status(), 200, "{target}");
                    let v: serde_json::Value = r.json().await.unwrap();
                    assert_eq!(v["success"], true, "{target}: {v}");
                    served += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            served
        })
    };
    // Four minutes of the simulator's clock; the rate is read over the last two.
    let elapsed = || clock.now() - start;
    let settle = async {
        while elapsed() < chrono::Duration::seconds(120) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let sent = env.sim.raw_count();
        while elapsed() < chrono::Duration::seconds(240) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (sent, env.sim.raw_count())
    };
    let (from, to) = tokio::time::timeout(Duration::from_secs(60), settle)
        .await
        .unwrap();
    done.store(true, Ordering::SeqCst);
    for task in flood {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap();
    }
    let served = tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .unwrap()
        .unwrap();
    assert!(served > 0);
    assert!(env.sim.throttled() > 0, "the source warned");
    assert_eq!(env.sim.bans(), 0, "mdproxy triggered a ban");
    let rate = (to - from) as f64 / 120.0;
    assert!(
        (1.0..=3.5).contains(&rate),
        "{rate:.2} requests a second, the source tolerates 2"
    );
    let pace = &env.proxy.state().upstream().report()[0].pace;
    assert!(pace.decreases > 0 && pace.reason.is_some(), "{pace:?}");
}

/// A day's quota over a whole simulated day: background refreshes stop when only
/// the reserve is left, then stale answers are preferred to refreshes, then client
/// misses get 503 until the vendor's day ends at China midnight (not at UTC
/// midnight, which passes at 08:00 in China).
#[tokio::test]
async fn a_day_quota_keeps_its_reserve_and_resets_at_china_midnight() {
    // Saturday: news is fresh 300 s, stale (refreshed in the background) 600 s more.
    let clock = support::clock_at("2026-03-07T07:00:00+08:00");
    let fake = FakeRelativeClock::default();
    let env = start_faked(clock.clone(), &fake, |c| {
        c.limits.upstream_per_day = 10;
        c.limits.quota_reserve_percent = 20;
    })
    .await;
    let quota = || env.proxy.state().upstream().report()[0].quota.clone();
    let key = |n: u32| format!("/news/headlines?keyword=k{n}");
    for n in 1..=7 {
        assert_eq!(header(&env.get(&key(n)).await, "x-cache"), "MISS");
    }
    assert_eq!(quota().today, 7);

    // A background refresh while 3 are left: it goes out.
    clock.advance(Duration::from_secs(400));
    let r = env.get(&key(1)).await;
    assert_eq!(detail(&r), "stale-while-revalidate");
    // Counted when it took its permit; the simulator counts it when it arrives
    // (the refresh runs on a serving thread of its own, beside this test).
    let sent = || quota().today == 8 && env.sim.raw_count() == 8;
    assert!(support::eventually(Duration::from_secs(10), sent).await);
    // With only the reserve left (2), background work steps back.
    let asked = env.sim.raw_count();
    let r = env.get(&key(2)).await;
    assert_eq!(header(&r, "x-cache"), "STALE");
    assert!(support::eventually(Duration::from_secs(10), || quota().skipped_today == 1).await);
    assert_eq!(env.sim.raw_count(), asked, "the reserve is for clients");
    // A client miss still takes one: 1 left, half the reserve.
    assert_eq!(header(&env.get(&key(8)).await, "x-cache"), "MISS");
    assert!(quota().thrifty);
    // Now a stale answer is preferred to a refresh, in and past the stale window.
    clock.advance(Duration::from_secs(600));
    for n in [1, 3] {
        let r = env.get(&key(n)).await;
        assert_eq!(header(&r, "x-cache"), "STALE");
        assert_eq!(detail(&r), "stale-saving-quota", "{}", key(n));
    }
    assert_eq!(env.sim.raw_count(), asked + 1);
    // The last one, then none until the day ends.
    assert_eq!(header(&env.get(&key(9)).await, "x-cache"), "MISS");
    let r = env.get(&key(10)).await;
    let retry: i64 = header(&r, "retry-after").parse().unwrap();
    let midnight = chrono::DateTime::parse_from_rfc3339("2026-03-08T00:00:00+08:00").unwrap();
    assert_eq!(retry, (midnight.to_utc() - clock.now()).num_seconds());
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (503, "upstream_throttled"));
    assert_eq!(quota().today, 10);

    // The rest of the day, hour by hour: UTC's midnight (08:00) resets nothing.
    let mut n = 10;
    while clock.now() + chrono::Duration::hours(1) < midnight.to_utc() {
        clock.advance(Duration::from_secs(3_600));
        n += 1;
        assert_eq!(env.get(&key(n)).await.status(), 503, "{}", clock.now());
    }
    clock.set(midnight.to_utc() - chrono::Duration::seconds(1));
    assert_eq!(env.get(&key(99)).await.status(), 503);
    assert_eq!(env.sim.raw_count(), asked + 2);
    // China's midnight: a new day.
    clock.set(midnight.to_utc());
    assert_eq!(header(&env.get(&key(99)).await, "x-cache"), "MISS");
    let q = quota();
    assert_eq!((q.today, q.skipped_today), (1, 0));
}

/// A hanging upstream: the first request for a stale key waits its timeout and
/// gets the stale answer; every later one gets it at once (held back, nothing
/// sent) while the key's backoff runs. Each key pays one timeout, not one per
/// request; an uncached key's failure is repeated at once.
#[tokio::test]
async fn a_failing_key_costs_one_timeout_not_one_per_request() {
    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let fake = FakeRelativeClock::default();
    let mut config = None;
    let env = start_faked(clock.clone(), &fake, |c| {
        c.limits.failure_backoff_ms = 60_000;
        c.limits.failure_backoff_max_ms = 60_000;
        config = Some(c.clone());
    })
    .await;
    let mut config = config.unwrap();
    let keys = ["/news/overview", "/news/mainline"];
    let mut good = Vec::new();
    for key in keys {
        good.push(env.get(key).await.bytes().await.unwrap());
    }
    // A short upstream timeout only now (a first fill may outlast it under load).
    config.upstream.timeout_ms = 300;
    env.proxy.reload(config).unwrap();
    // Past fresh and stale, inside stale-if-error.
    clock.advance(Duration::from_secs(1_000));
    env.sim.set_hang(true);
    let timeouts = || {
        env.proxy
            .state()
            .upstream()
            .counters()
            .outcome_count(UpstreamOutcome::Timeout)
    };
    for (n, (key, body)) in keys.iter().zip(&good).enumerate() {
        let first = env.get(key).await;
        assert_eq!(
            detail(&first),
            "stale-if-error",
            "{key}: waited its timeout"
        );
        assert_eq!(&first.bytes().await.unwrap(), body);
        assert_eq!(timeouts(), n as u64 + 1);
        let asked = env.sim.raw_count();
        let at_once = (0..10).map(|_| env.get(key));
        for r in futures_util::future::join_all(at_once).await {
            assert_eq!(header(&r, "x-cache"), "STALE", "{key}");
            assert_eq!(detail(&r), "stale-key-backing-off", "{key}");
            assert_eq!(&r.bytes().await.unwrap(), body);
        }
        assert_eq!(env.sim.raw_count(), asked, "{key}: nothing more was sent");
    }
    // Uncached: its failure, then the same failure at once.
    let asked = env.sim.raw_count();
    for _ in 0..3 {
        let (status, code, _) = error_of(env.get("/news/headlines?keyword=latest").await).await;
        assert_eq!((status, code.as_str()), (504, "upstream_timeout"));
    }
    assert_eq!(env.sim.raw_count(), asked + 1);
    assert_eq!(timeouts(), 3);
    assert_eq!(env.proxy.state().cache().failures().len(), 3);
}

/// A key's failure is learnt even when the client that asked for it gave up: its
/// fill goes on without it, times out, and the key backs off, so the requests after
/// it are answered at once instead of each waiting on the upstream again.
#[tokio::test]
async fn a_failure_is_learnt_when_its_client_gave_up() {
    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let fake = FakeRelativeClock::default();
    let env = start_faked(clock, &fake, |c| {
        c.limits.failure_backoff_ms = 60_000;
        c.limits.failure_backoff_max_ms = 60_000;
        c.upstream.timeout_ms = 300;
    })
    .await;
    env.sim.set_hang(true);
    let key = "/news/headlines?keyword=gave-up";
    let gave_up = env
        .client
        .get(env.url(key))
        .bearer_auth(support::TOKEN)
        .timeout(Duration::from_millis(50))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client gave up before the upstream");
    let failures = || env.proxy.state().cache().failures().len();
    assert!(
        support::eventually(Duration::from_secs(10), || failures() == 1).await,
        "the fill's timeout was learnt"
    );
    let asked = env.sim.raw_count();
    let (status, code, _) = error_of(env.get(key).await).await;
    assert_eq!((status, code.as_str()), (504, "upstream_timeout"));
    assert_eq!(env.sim.raw_count(), asked, "answered without the upstream");
}

/// A key in its stale window whose background refresh failed is not refreshed again
/// by every request: its stale answer is served, saying the key backs off, and the
/// upstream is not asked until its backoff ends.
#[tokio::test]
async fn a_failed_refresh_is_not_repeated_by_every_request() {
    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let fake = FakeRelativeClock::default();
    let env = start_faked(clock.clone(), &fake, |c| {
        c.limits.failure_backoff_ms = 60_000;
        c.limits.failure_backoff_max_ms = 60_000;
    })
    .await;
    let key = "/news/headlines?keyword=k";
    let good = env.get(key).await.bytes().await.unwrap();
    // Past fresh (300 s), inside the stale window (600 s more).
    clock.advance(Duration::from_secs(400));
    env.sim.fail_path("/news/headlines", "socket hang up");
    let r = env.get(key).await;
    assert_eq!(detail(&r), "stale-while-revalidate");
    let failures = || env.proxy.state().cache().failures().len();
    assert!(support::eventually(Duration::from_secs(10), || failures() == 1).await);
    let asked = env.sim.hits("/news/headlines");
    let cache = env.proxy.state().cache();
    let refreshes = cache.refreshes();
    for _ in 0..10 {
        let r = env.get(key).await;
        assert_eq!(detail(&r), "stale-key-backing-off");
        assert_eq!(r.bytes().await.unwrap(), good);
    }
    // No refresh was started behind them, nor is any fill of the key under way: the
    // decision is counted when it is made, not when its request lands.
    assert_eq!(cache.refreshes(), refreshes, "a refresh was started");
    let canonical = mdproxy_api::parse_target(key).unwrap().target;
    assert!(
        !cache.store().is_filling(&canonical),
        "a fill of the key runs"
    );
    assert_eq!(env.sim.hits("/news/headlines"), asked);
}

/// One route answering 500 opens its own breaker only: the other routes are still
/// asked and answered. A pass-through path's 4xx is an answer, never a failure.
#[tokio::test]
async fn one_failing_route_does_not_close_the_others() {
    let clock = support::saturday();
    let fake = FakeRelativeClock::default();
    let env = start_faked(clock, &fake, |c| {
        c.upstream.breaker_failures = 3;
        c.upstream.breaker_open_ms = 5_000;
        c.limits.failure_backoff_ms = 0;
        c.passthrough.enabled = true;
    })
    .await;
    env.sim.fail_next(3);
    for n in 0..3 {
        let r = env.get(&format!("/stock/detail/60000{n}")).await;
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (502, "upstream_error"));
    }
    let asked = env.sim.raw_count();
    let r = env.get("/stock/detail/600519").await;
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("circuit breaker open"),
        "{body}"
    );
    assert_eq!(env.sim.raw_count(), asked, "the failing route is not asked");
    for target in ["/market/indices", "/news/overview", "/fund/detail/159915"] {
        assert_eq!(env.get(target).await.status(), 200, "{target}");
    }
    // Pass-through paths the upstream does not have: its 404, every time.
    for n in 0..6 {
        let r = env.get(&format!("/market/brand-new-{n}")).await;
        assert_eq!(r.status(), 404);
    }
    assert_eq!(env.sim.raw_count(), asked + 3 + 6);
    assert_eq!(env.get("/market/hotmap").await.status(), 200);
    let report = &env.proxy.state().upstream().report()[0];
    assert!(
        !report.breaker_open,
        "the upstream-wide breaker stayed closed"
    );
    assert_eq!(report.open_routes, ["/stock/detail/{code}"]);

    // Its interval over, the route is probed and answers again.
    fake.advance(Duration::from_secs(5));
    let r = env.get("/stock/detail/600519").await;
    assert_eq!(header(&r, "x-cache"), "MISS");
    assert!(
        env.proxy.state().upstream().report()[0]
            .open_routes
            .is_empty()
    );
}

/// A proxy in front of `upstream` that retries a failed fill at once (no backoff),
/// on a clock of its own: the clock, the relative clock and the proxy.
async fn cut_answers_proxy(
    upstream: &Scripted,
) -> (Arc<ManualClock>, FakeRelativeClock, mdproxy_core::app::App) {
    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let fake = FakeRelativeClock::default();
    let proxy = scripted_proxy(upstream, clock.clone(), &fake, |c| {
        c.limits.failure_backoff_ms = 0;
    })
    .await;
    (clock, fake, proxy)
}

/// An answer without length or chunked framing whose JSON does not close (the
/// connection dropped mid-body) is a failure: 502 when nothing is cached, the good
/// entry when one is, and never stored in its place.
#[tokio::test]
async fn a_close_delimited_answer_cut_short_is_never_cached() {
    let upstream = Scripted::start().await;
    let (clock, _fake, proxy) = cut_answers_proxy(&upstream).await;
    let close_delimited = |body: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{body}"
        )
    };
    let cut = r#"{"success": true, "data": {"list": [{"title": "a"}, {"title": "b"#;
    let whole = r#"{"success": true, "data": {"list": [{"title": "a"}]}}"#;

    upstream.then(close_delimited(cut));
    let (status, code, _) = error_of(get(&proxy, "/news/overview").await).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
    upstream.then(close_delimited(whole));
    let r = get(&proxy, "/news/overview").await;
    assert_eq!(
        header(&r, "x-cache"),
        "MISS",
        "the cut answer was not cached"
    );
    assert_eq!(r.text().await.unwrap(), whole);

    // Past fresh and stale: a cut answer never replaces the good entry.
    clock.advance(Duration::from_secs(1_000));
    for _ in 0..2 {
        upstream.then(close_delimited(cut));
        let r = get(&proxy, "/news/overview").await;
        assert_eq!(header(&r, "x-cache"), "STALE");
        assert_eq!(r.text().await.unwrap(), whole);
    }
    assert_eq!(upstream.received(), 4);
    let upstream = proxy.state().upstream();
    assert_eq!(
        upstream
            .counters()
            .outcome_count(UpstreamOutcome::Truncated),
        3
    );
    proxy.shutdown().await;
}

/// However the cut answer is framed, it is never kept: a `Content-Length` beside a
/// transfer coding that is not `chunked` (hyper reads such a body to the close),
/// and a 404, which would be kept as a negative entry, whose JSON does not close.
#[tokio::test]
async fn a_cut_answer_is_never_kept_however_it_is_framed() {
    let upstream = Scripted::start().await;
    let (_clock, _fake, proxy) = cut_answers_proxy(&upstream).await;
    let answer = |status: &str, framing: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{framing}Connection: close\r\n\r\n{body}"
        )
    };
    let cut = r#"{"success": true, "data": {"list": [{"title": "a"}, {"title": "b"#;
    upstream.then(answer(
        "200 OK",
        "Content-Length: 5000\r\nTransfer-Encoding: identity\r\n",
        cut,
    ));
    let (status, code, _) = error_of(get(&proxy, "/news/overview").await).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));

    let not_found = r#"{"success": false, "error": "stock not found", "code": 404}"#;
    upstream.then(answer("404 Not Found", "", &not_found[..20]));
    let (status, code, _) = error_of(get(&proxy, "/stock/detail/600519").await).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
    // Asked again, as nothing was kept; the whole 404 is kept.
    upstream.then(answer("404 Not Found", "", not_found));
    let r = get(&proxy, "/stock/detail/600519").await;
    assert_eq!(r.status(), 404);
    let r = get(&proxy, "/stock/detail/600519").await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        upstream.received(),
        3,
        "the whole 404 was kept, the cut one was not"
    );
    assert_eq!(
        proxy
            .state()
            .upstream()
            .counters()
            .outcome_count(UpstreamOutcome::Truncated),
        2
    );
    proxy.shutdown().await;
}

/// Defect: a 404 for a key whose 200 was held replaced it, and every client got
/// "not found" for an answer the proxy had. The real upstream documents its 404
/// for unknown paths only, so after a 200 it is the upstream's fault: the 200
/// stands in while its stale-if-error window lasts (a background refresh and a
/// client's miss alike), the 404 is kept nowhere, and the key backs off. After the
/// window a 404 is kept as any. (News out of session: fresh 300 s, stale until
/// 900 s, served on error until 3,900 s.)
#[tokio::test]
async fn a_not_found_never_replaces_a_found_answer_that_may_stand_in() {
    let upstream = Scripted::start().await;
    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let fake = FakeRelativeClock::default();
    let proxy = scripted_proxy(&upstream, clock.clone(), &fake, |c| {
        // No retry comes within the test: the scripted answers are the requests'.
        c.limits.failure_backoff_ms = 60_000;
        c.limits.failure_backoff_max_ms = 60_000;
    })
    .await;
    let found =
        |n: u32| format!(r#"{{"success": true, "data": {{"list": [{{"title": "{n}"}}]}}}}"#);
    let ok = |n: u32| support::response("200 OK", &[], &found(n));
    let not_found = || {
        let body = r#"{"success": false, "error": "not found", "code": 404}"#;
        support::response("404 Not Found", &[], body)
    };
    let keys = ["/news/overview", "/news/mainline", "/news/headlines"];
    for (n, key) in (1..).zip(keys) {
        upstream.then(ok(n));
        assert_eq!(header(&get(&proxy, key).await, "x-cache"), "MISS");
    }

    // Stale: served at once while a background refresh gets the 404.
    clock.advance(Duration::from_secs(400));
    upstream.then(not_found());
    let r = get(&proxy, keys[0]).await;
    assert_eq!(detail(&r), "stale-while-revalidate");
    assert_eq!(r.text().await.unwrap(), found(1));
    let cache = proxy.state().cache();
    let canonical = mdproxy_api::parse_target(keys[0]).unwrap().target;
    let refreshed = || cache.failures().len() == 1 && !cache.store().is_filling(&canonical);
    assert!(support::eventually(Duration::from_secs(10), refreshed).await);
    assert_eq!(upstream.received(), 4);
    let r = get(&proxy, keys[0]).await;
    assert_eq!(detail(&r), "stale-key-backing-off", "the 200 was kept");
    assert_eq!(r.text().await.unwrap(), found(1));

    // Past stale: a client's miss gets the 404, and the 200 in its place.
    clock.advance(Duration::from_secs(600));
    upstream.then(not_found());
    for expected in ["stale-if-error", "stale-key-backing-off"] {
        let r = get(&proxy, keys[1]).await;
        assert_eq!(
            (r.status().as_u16(), detail(&r)),
            (200, expected.to_owned())
        );
        assert_eq!(r.text().await.unwrap(), found(2));
    }
    assert_eq!(
        upstream.received(),
        5,
        "the backing-off key was not asked again"
    );

    // Past the window: the 404 is the answer, and kept.
    clock.advance(Duration::from_secs(3_000));
    upstream.then(not_found());
    for expected in ["", "negative"] {
        let r = get(&proxy, keys[2]).await;
        assert_eq!(
            (r.status().as_u16(), detail(&r)),
            (404, expected.to_owned())
        );
    }
    assert_eq!(upstream.received(), 6);
    let not_founds = proxy
        .state()
        .upstream()
        .counters()
        .outcome_count(UpstreamOutcome::NotFound);
    assert_eq!(not_founds, 3, "each 404 counted as the upstream sent it");
    proxy.shutdown().await;
}

/// A second upstream (`[[upstream.fallback]]`, its own key) takes what the primary
/// cannot: while the primary is paused by a `Retry-After`, and while a route of it
/// fails (its breaker open). The primary takes over again when its pause ends, and
/// after a probe of its own once its breaker's interval is over. Entries filled by
/// either are the same keys.
#[tokio::test]
async fn a_fallback_takes_over_and_the_primary_takes_back() {
    let clock = support::saturday();
    let fake = FakeRelativeClock::default();
    let fallback = mdproxy_sim::start(
        &mdproxy_sim::SimConfig {
            token: "fallback-key-77".into(),
            ..support::sim_config()
        },
        clock.clone(),
    )
    .await
    .unwrap();
    let fallback_url = fallback.base_url();
    let env = start_faked(clock, &fake, |c| {
        c.upstream.breaker_failures = 2;
        c.upstream.breaker_open_ms = 5_000;
        c.limits.failure_backoff_ms = 0;
        c.upstream.fallback.push(FallbackConfig {
            base_url: fallback_url,
            token: Secret::new("fallback-key-77"),
            upstream_rps: None,
            upstream_burst: None,
            upstream_per_minute: None,
            upstream_per_day: None,
        });
    })
    .await;
    let primary: &SimHandle = &env.sim;
    let detail_hits = |sim: &SimHandle| sim.hits("/stock/detail/{code}");

    // The primary throttles: paused, and the fallback answers at once.
    primary.set_throttling(Some(Throttling {
        limit: 0,
        window: Duration::from_secs(60),
        mode: ThrottleMode::TooManyRequests,
    }));
    for code in ["600519", "000001", "300750"] {
        let r = env.get(&format!("/stock/detail/{code}")).await;
        assert_eq!(header(&r, "x-cache"), "MISS", "{code}");
    }
    assert_eq!(detail_hits(&fallback), 3);
    assert_eq!(
        primary.raw_count(),
        1,
        "one 429, then nothing during the pause"
    );
    // Its pause over, the primary answers again; what the fallback filled is a hit.
    primary.set_throttling(None);
    fake.advance(Duration::from_secs(60));
    assert_eq!(
        header(&env.get("/stock/detail/600000").await, "x-cache"),
        "MISS"
    );
    assert_eq!((detail_hits(primary), detail_hits(&fallback)), (1, 3));
    assert_eq!(
        header(&env.get("/stock/detail/600519").await, "x-cache"),
        "HIT"
    );

    // A route failing at the primary: each failure goes on to the fallback, then
    // the primary's breaker for that route sends it there at once.
    primary.fail_next(2);
    for code in ["600036", "601318", "000858"] {
        let r = env.get(&format!("/stock/detail/{code}")).await;
        assert_eq!(header(&r, "x-cache"), "MISS", "{code}");
    }
    assert_eq!(detail_hits(&fallback), 6);
    let report = env.proxy.state().upstream().report();
    assert_eq!(report[0].open_routes, ["/stock/detail/{code}"]);
    // The interval over, a probe of its own goes to the primary (the client's
    // request to the fallback); its success gives the route back.
    fake.advance(Duration::from_secs(5));
    assert_eq!(
        header(&env.get("/stock/detail/002594").await, "x-cache"),
        "MISS"
    );
    let closed = support::eventually(Duration::from_secs(10), || {
        env.proxy.state().upstream().report()[0]
            .open_routes
            .is_empty()
    })
    .await;
    assert!(closed, "the probe closed the primary's route breaker");
    let before = detail_hits(&fallback);
    assert_eq!(
        header(&env.get("/stock/detail/600887").await, "x-cache"),
        "MISS"
    );
    assert_eq!(detail_hits(&fallback), before, "the primary took back");

    let report = env.proxy.state().upstream().report();
    assert_eq!(report[1].label, "fallback-1");
    let ok = |r: &mdproxy_core::upstream::target::TargetReport| {
        r.outcomes
            .iter()
            .find(|(o, _)| *o == UpstreamOutcome::Ok)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(ok(&report[1]), 7);
    fallback.shutdown().await;
}
