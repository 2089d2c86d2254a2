//! The quote hub through the proxy: one upstream poll per interval for everyone,
//! per-subscriber codes and pz, snapshot first, reconnects, slow subscribers, limits.
//! The simulated clock ticks in session so that quotes move.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mdproxy::config::Config;
use support::{Env, SseReader, TOKEN, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Monday 2 March 2026, 10:00 China time.
const MONDAY_10_00: &str = "2026-03-02T02:00:00Z";
const WAIT: Duration = Duration::from_secs(10);

fn fast_hub(c: &mut Config) {
    c.hub.session_interval_ms = 50;
    c.hub.closed_interval_ms = 50;
    c.hub.keepalive_secs = 1;
}

async fn hub_env(config: impl FnOnce(&mut Config)) -> (Env, tokio::task::JoinHandle<()>) {
    let clock = support::clock_at(MONDAY_10_00);
    let env = support::start_with(
        |_| {},
        |c| {
            fast_hub(c);
            config(c);
        },
        Some(clock.clone()),
    )
    .await;
    let ticker = support::tick_clock(clock, Duration::from_millis(50), 2_000);
    (env, ticker)
}

async fn subscribe(env: &Env, query: &str) -> SseReader {
    let r = env
        .get(&format!("/stock/indicator/realtime/sse?{query}"))
        .await;
    assert_eq!(r.status(), 200, "{query}");
    assert_eq!(header(&r, "content-type"), "text/event-stream");
    assert_eq!(header(&r, "cache-control"), "no-cache");
    SseReader::new(r)
}

/// `retry:` first, then a snapshot; two subscribers each get only their own codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_get_a_snapshot_then_only_their_own_codes() {
    let (env, _ticker) = hub_env(|_| {}).await;
    let mut a = subscribe(&env, "codes=600519,000001").await;
    let mut b = subscribe(&env, "codes=300750.SZ,601318.sh").await;
    let first = a.next(WAIT).await.unwrap();
    assert_eq!(first.retry, Some(3000));
    for _ in 0..15 {
        let e = a.next_quote(WAIT).await.unwrap();
        for code in e.codes() {
            assert!(code == "600519.SH" || code == "000001.SZ", "{code}");
        }
        let e = b.next_quote(WAIT).await.unwrap();
        for code in e.codes() {
            assert!(code == "300750.SZ" || code == "601318.SH", "{code}");
        }
        assert!(!e.id.is_empty());
    }
}

/// The upstream sees one poll per interval, however many subscribers share it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upstream_poll_per_interval_for_everyone() {
    let (env, _ticker) = hub_env(|_| {}).await;
    let mut readers = Vec::new();
    for i in 0..30 {
        let codes = if i % 2 == 0 {
            "600519,000001"
        } else {
            "000001,300750"
        };
        readers.push(subscribe(&env, &format!("codes={codes}")).await);
    }
    let mut last = readers.pop().unwrap();
    let mut id = 0;
    for _ in 0..20 {
        id = last
            .next_quote(WAIT)
            .await
            .unwrap()
            .id
            .parse::<u64>()
            .unwrap();
    }
    let polls = env.sim.hits("/stock/list");
    // Three codes in the union, one batch: one upstream request per tick.
    assert!(
        polls <= id + 2,
        "{polls} upstream polls for {id} ticks and 30 subscribers"
    );
    assert!(polls >= id.saturating_sub(2), "{polls} polls, {id} ticks");
    assert_eq!(env.proxy.hub().codes(), 3);
}

/// pz bounds every event; more changes make more events and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pz_bounds_every_event_and_nothing_is_lost() {
    let (env, _ticker) = hub_env(|_| {}).await;
    let codes: Vec<String> = mdproxy::sim::universe::universe()
        .stocks
        .iter()
        .take(23)
        .map(|s| s.code.clone())
        .collect();
    let mut r = subscribe(&env, &format!("codes={}&pz=4", codes.join(","))).await;
    // The first tick: every code arrives, in events of at most 4.
    let mut seen = std::collections::BTreeSet::new();
    let mut first_id = None;
    while seen.len() < 23 {
        let e = r.next_quote(WAIT).await.unwrap();
        assert!(
            e.quotes().len() <= 4,
            "{} quotes in one event",
            e.quotes().len()
        );
        first_id.get_or_insert(e.id.clone());
        seen.extend(e.codes());
    }
    // Later ticks too.
    for _ in 0..20 {
        let e = r.next_quote(WAIT).await.unwrap();
        assert!((1..=4).contains(&e.quotes().len()));
    }
}

/// A reconnect with Last-Event-ID starts with a fresh snapshot of every code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_with_last_event_id_gets_a_fresh_snapshot() {
    let (env, _ticker) = hub_env(|_| {}).await;
    let mut r = subscribe(&env, "codes=600519,000001,300750&pz=10").await;
    let e = r.next_quote(WAIT).await.unwrap();
    drop(r);
    let again = env
        .get_with(
            "/stock/indicator/realtime/sse?codes=600519,000001,300750&pz=10",
            &[("last-event-id", &e.id)],
        )
        .await;
    let mut again = SseReader::new(again);
    assert_eq!(again.next(WAIT).await.unwrap().retry, Some(3000));
    let snapshot = again.next_quote(WAIT).await.unwrap();
    assert_eq!(
        snapshot.codes().len(),
        3,
        "all codes, not only what changed"
    );
}

/// A subscriber that never reads neither delays another subscriber nor grows its
/// memory, and is disconnected once it stalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_harms_no_one() {
    let (env, _ticker) = hub_env(|c| {
        c.hub.stall_timeout_secs = 1;
        c.hub.max_codes_per_stream = 400;
    })
    .await;
    // 400 quotes change every tick: ~130 KB per 50 ms fills the loopback socket
    // buffers of a client that never reads within a few seconds.
    let codes: Vec<String> = mdproxy::sim::universe::universe()
        .stocks
        .iter()
        .take(400)
        .map(|s| s.code.clone())
        .collect();
    // The sleeper: a raw connection that sends its request and never reads.
    let mut sleeper = tokio::net::TcpStream::connect(env.proxy.addr)
        .await
        .unwrap();
    let request = format!(
        "GET /api/v1/stock/indicator/realtime/sse?codes={}&pz=100 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        codes.join(",")
    );
    sleeper.write_all(request.as_bytes()).await.unwrap();
    let mut reader = subscribe(&env, "codes=600519").await;
    let hub = env.proxy.hub().clone();
    let started = Instant::now();
    let mut events = 0;
    let mut max_gap = Duration::ZERO;
    let mut last = Instant::now();
    let mut max_pending = 0;
    while started.elapsed() < Duration::from_secs(6) {
        reader
            .next_quote(WAIT)
            .await
            .expect("the reader keeps getting events");
        events += 1;
        max_gap = max_gap.max(last.elapsed());
        last = Instant::now();
        max_pending = max_pending.max(hub.max_pending_bytes());
    }
    assert!(events >= 20, "only {events} events in 6 s");
    assert!(
        max_gap < Duration::from_secs(2),
        "the reader waited {max_gap:?}"
    );
    // At most one board's worth of 400 quotes is ever built ahead; nothing queues up.
    assert!(max_pending < 256 * 1024, "{max_pending} bytes pending");
    let deadline = Instant::now() + Duration::from_secs(20);
    while hub.subscribers() > 1 && Instant::now() < deadline {
        reader
            .next_quote(WAIT)
            .await
            .expect("the reader keeps getting events");
        max_pending = max_pending.max(hub.max_pending_bytes());
    }
    assert_eq!(hub.subscribers(), 1, "the sleeper was disconnected");
    assert!(hub.stalled() >= 1);
    assert!(max_pending < 256 * 1024, "{max_pending} bytes pending");
    // Its socket was closed by the server: reading drains what was sent, then EOF.
    let mut sink = vec![0u8; 1 << 20];
    let drained = tokio::time::timeout(WAIT, async {
        loop {
            match sleeper.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the stalled connection was closed");
}

/// The poll stops when the last subscriber leaves, and starts again for the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_stops_when_the_last_subscriber_leaves() {
    let (env, _ticker) = hub_env(|_| {}).await;
    let hub = env.proxy.hub().clone();
    let mut r = subscribe(&env, "codes=600519").await;
    r.next_quote(WAIT).await.unwrap();
    assert!(hub.is_polling());
    drop(r);
    let deadline = Instant::now() + WAIT;
    while (hub.is_polling() || hub.subscribers() > 0) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!hub.is_polling(), "poll loop still running");
    assert_eq!(hub.codes(), 0);
    let polls = env.sim.hits("/stock/list");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        env.sim.hits("/stock/list"),
        polls,
        "no polls without subscribers"
    );
    let mut again = subscribe(&env, "codes=000001").await;
    assert!(again.next_quote(WAIT).await.is_some());
}

/// Bad codes or pz are refused with 400 in the JSON envelope, before any stream byte.
#[tokio::test]
async fn invalid_streams_are_refused_before_streaming() {
    let (env, _ticker) = hub_env(|c| c.hub.max_codes_per_stream = 3).await;
    for (query, param) in [
        ("codes=600519&pz=0", "pz"),
        ("codes=600519&pz=101", "pz"),
        ("codes=60051", "codes"),
        ("pz=5", "codes"),
        ("codes=600519,000001,300750,601318", "codes"),
    ] {
        let r = env
            .get(&format!("/stock/indicator/realtime/sse?{query}"))
            .await;
        assert_eq!(header(&r, "content-type"), "application/json", "{query}");
        let (status, _, got) = support::error_of(r).await;
        assert_eq!((status, got.as_deref()), (400, Some(param)), "{query}");
    }
}

/// Streams per token (429) and in all (503) are limited; without a source: 503
/// naming the setting.
#[tokio::test]
async fn stream_limits_and_missing_source() {
    let (env, _ticker) = hub_env(|c| {
        c.hub.max_streams_per_token = 2;
        c.hub.max_streams = 3;
        c.auth.tokens.push(mdproxy::config::Secret::new("second"));
    })
    .await;
    let _a = subscribe(&env, "codes=600519").await;
    let _b = subscribe(&env, "codes=600519").await;
    let third = env.get("/stock/indicator/realtime/sse?codes=600519").await;
    assert!(header(&third, "retry-after").parse::<u64>().is_ok());
    assert_eq!(support::error_of(third).await.0, 429);
    let other = |q: &str| {
        env.client
            .get(env.url(&format!("/stock/indicator/realtime/sse?{q}")))
            .bearer_auth("second")
            .send()
    };
    let _c = other("codes=000001").await.unwrap();
    let (status, code, _) = support::error_of(other("codes=000001").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (503, "overloaded"));

    let (no_source, _t) = hub_env(|c| c.hub.source = String::new()).await;
    let r = no_source
        .get("/stock/indicator/realtime/sse?codes=600519")
        .await;
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "stream_unavailable");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("hub.source")
    );
}

/// EventSource cannot send headers: `access_token` in the query authenticates the
/// stream (and only the stream).
#[tokio::test]
async fn access_token_authenticates_event_source_clients() {
    let (env, _ticker) = hub_env(|_| {}).await;
    let url = env.url(&format!(
        "/stock/indicator/realtime/sse?codes=600519&access_token={TOKEN}"
    ));
    let r = env.client.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut r = SseReader::new(r);
    assert!(r.next_quote(WAIT).await.is_some());
    let wrong = env
        .client
        .get(env.url("/stock/indicator/realtime/sse?codes=600519&access_token=nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let cached = env
        .client
        .get(env.url(&format!("/market/indices?access_token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        cached.status(),
        401,
        "only the stream takes a token in the URL"
    );
    drop(Arc::new(()));
}

/// A subscriber whose codes never change still gets keepalives while other codes
/// keep the board busy, and is not mistaken for a stalled one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_subscribers_get_keepalives_and_stay_connected() {
    let (env, _ticker) = hub_env(|c| c.hub.stall_timeout_secs = 2).await;
    let mut busy = subscribe(&env, "codes=600519").await;
    // 605999 is not listed: it never has a quote, so this stream only ever idles.
    let mut quiet = subscribe(&env, "codes=605999").await;
    assert_eq!(quiet.next(WAIT).await.unwrap().retry, Some(3000));
    let started = Instant::now();
    let mut keepalives = 0;
    while started.elapsed() < Duration::from_secs(4) {
        let e = quiet.next(WAIT).await.expect("the quiet stream stays open");
        assert!(e.comment, "only keepalives: {e:?}");
        keepalives += 1;
        busy.next_quote(WAIT)
            .await
            .expect("the busy stream keeps moving");
    }
    assert!(keepalives >= 3, "{keepalives} keepalives in 4 s at 1 s");
    assert_eq!(env.proxy.hub().stalled(), 0);
}

/// Shutting the proxy down ends open streams at once instead of waiting out the
/// grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams() {
    let (env, _ticker) = hub_env(|c| c.server.shutdown_grace_ms = 30_000).await;
    let mut r = subscribe(&env, "codes=600519").await;
    r.next_quote(WAIT).await.unwrap();
    let support::Env { proxy, sim, .. } = env;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), proxy.shutdown())
        .await
        .expect("shutdown does not wait for the 30 s grace");
    assert!(started.elapsed() < Duration::from_secs(10));
    // The stream ended cleanly.
    let mut ended = false;
    for _ in 0..100 {
        match r.next(Duration::from_secs(1)).await {
            None => {
                ended = true;
                break;
            }
            Some(_) => continue,
        }
    }
    assert!(ended);
    drop(sim);
}
