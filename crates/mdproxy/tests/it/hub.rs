//! The quote hub through the proxy: one upstream poll per interval for everyone,
//! per-subscriber codes and pz, snapshot first, reconnects, slow subscribers, limits.
//! The simulated clock ticks in session so that quotes move.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use mdproxy_config::Config;
use mdproxy_core::hub::{Pacing, Subscription};
use mdproxy_sim::{ThrottleMode, Throttling};
use std::collections::{BTreeMap, BTreeSet};

use support::{Env, Next, SseReader, TOKEN, header};
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
    // The first quote event of each holds exactly its own codes (pz 20 > 2).
    let set = |codes: &[&str]| codes.iter().map(|c| c.to_string()).collect::<BTreeSet<_>>();
    let e = a.next_quote(WAIT).await.unwrap();
    assert_eq!(
        e.codes().into_iter().collect::<BTreeSet<_>>(),
        set(&["600519", "000001"])
    );
    assert_eq!(e.codes().len(), 2, "no code twice");
    let e = b.next_quote(WAIT).await.unwrap();
    assert_eq!(
        e.codes().into_iter().collect::<BTreeSet<_>>(),
        set(&["300750", "601318"])
    );
    assert_eq!(e.codes().len(), 2, "no code twice");
    for _ in 0..15 {
        let e = a.next_quote(WAIT).await.unwrap();
        for code in e.codes() {
            assert!(code == "600519" || code == "000001", "{code}");
        }
        let e = b.next_quote(WAIT).await.unwrap();
        for code in e.codes() {
            assert!(code == "300750" || code == "601318", "{code}");
        }
        assert!(!e.id.is_empty());
    }
}

/// With `server.work_stealing` off, subscribers on the serving threads (two
/// connections, one a thread) get their own quotes tick after tick, the hub's poll
/// running on the shared runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_on_the_serving_threads_get_their_quotes() {
    let (env, _ticker) = hub_env(|c| {
        c.server.work_stealing = false;
        c.server.threads = 2;
    })
    .await;
    let mut a = subscribe(&env, "codes=600519").await;
    let mut b = subscribe(&env, "codes=000001").await;
    for _ in 0..5 {
        let e = a.next_quote(WAIT).await.unwrap();
        assert_eq!(e.codes(), ["600519"]);
        let e = b.next_quote(WAIT).await.unwrap();
        assert_eq!(e.codes(), ["000001"]);
    }
}

/// The upstream sees one poll per interval, however many subscribers share it: over
/// a window, no more poll requests than intervals (a hub polling per subscriber, or
/// not keeping its interval, would make several times more), each asking for the
/// union of everyone's codes.
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
    // Everyone is in the union once the last stream has its first quote.
    readers.last_mut().unwrap().next_quote(WAIT).await.unwrap();
    assert_eq!(env.proxy.hub().codes(), 3);
    let (requests_before, polls_before) = (env.sim.raw_count(), env.sim.hits("/stock/list"));
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let window = started.elapsed();
    let polls = env.sim.hits("/stock/list") - polls_before;
    // The window is measured after the fact, so a slow machine only makes fewer
    // polls; one in flight at each edge is the most it may add.
    let intervals = (window.as_millis() / 50) as u64;
    assert!(
        (1..=intervals + 2).contains(&polls),
        "{polls} upstream polls in {window:?} ({intervals} intervals) for 30 subscribers"
    );
    // Three codes in the union, one batch: each poll asks for all of them.
    let new = usize::try_from(env.sim.raw_count() - requests_before).unwrap();
    let log = env.sim.raw_requests();
    let asked: Vec<String> = log[log.len().saturating_sub(new)..]
        .iter()
        .filter(|target| target.starts_with("/api/v1/stock/list"))
        .cloned()
        .collect();
    assert!(!asked.is_empty());
    for target in &asked {
        for code in ["600519", "000001", "300750"] {
            assert!(target.contains(code), "{target} lacks {code}");
        }
    }
}

/// What a subscriber received: codes per tick, and the latest quote of each code.
#[derive(Default)]
struct Seen {
    latest: BTreeMap<String, serde_json::Value>,
    by_tick: BTreeMap<u64, Vec<String>>,
}

impl Seen {
    /// Records a `quote` event of a `pz=4` stream, checking its size and that no
    /// code comes twice in one tick; returns the tick.
    fn take(&mut self, e: support::Event) -> u64 {
        let quotes = e.quotes();
        assert!((1..=4).contains(&quotes.len()), "{} quotes", quotes.len());
        let tick: u64 = e.id.parse().unwrap();
        let codes = self.by_tick.entry(tick).or_default();
        for q in quotes {
            let code = support::row_code(&q);
            assert!(!codes.contains(&code), "{code} twice in tick {tick}");
            codes.push(code.clone());
            self.latest.insert(code, q);
        }
        tick
    }
}

/// pz bounds every event; more changes make more events and none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pz_bounds_every_event_and_nothing_is_lost() {
    let (env, ticker) = hub_env(|_| {}).await;
    let codes: Vec<String> = support::listed_codes(23);
    let mut r = subscribe(&env, &format!("codes={}&pz=4", codes.join(","))).await;
    // Every event holds 1..=4 quotes, and the events of one tick (one id) carry
    // each code at most once. The latest quote of each code is kept.
    let mut seen = Seen::default();
    // The first tick: every code, in ceil(23 / 4) = 6 events with the same id.
    let first = seen.take(r.next_quote(WAIT).await.unwrap());
    for _ in 0..5 {
        let e = r.next_quote(WAIT).await.unwrap();
        assert_eq!(e.id, first.to_string(), "one tick's events come together");
        seen.take(e);
    }
    let all: BTreeSet<String> = codes.iter().cloned().collect();
    assert_eq!(
        seen.by_tick[&first]
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        all,
        "the first tick carries every code"
    );
    // Later ticks: only what changed, still at most 4 per event.
    for _ in 0..20 {
        seen.take(r.next_quote(WAIT).await.unwrap());
    }
    // Stop the clock: quotes stop changing, and the upstream's answer for the frozen
    // instant is what every subscriber must end up holding. If any change were lost,
    // some code's latest quote would never reach it.
    ticker.abort();
    let _ = ticker.await;
    let expected: serde_json::Value = env
        .client
        .get(format!(
            "{}/stock/list?codes={}",
            env.sim.base_url(),
            codes.join(",")
        ))
        .bearer_auth(support::UPSTREAM_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let expected: BTreeMap<String, serde_json::Value> = expected["data"]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (support::row_code(q), q.clone()))
        .collect();
    assert_eq!(expected.keys().cloned().collect::<BTreeSet<_>>(), all);
    let caught_up = tokio::time::timeout(WAIT, async {
        while seen.latest != expected {
            match r.next_or_end(WAIT).await {
                Next::Event(e) if e.event == "quote" => {
                    seen.take(e);
                }
                Next::Event(_) => {}
                other => panic!("the stream stopped before catching up: {other:?}"),
            }
        }
    })
    .await;
    assert!(
        caught_up.is_ok(),
        "the subscriber never caught up with the frozen quotes"
    );
}

/// A reconnect with `Last-Event-ID` starts with a fresh snapshot of every code (not
/// only what changed since that id: here nothing did), and its ids continue past
/// the client's last one, also when that is ahead of this proxy's ticks (another
/// node's, or this process's before a restart): an EventSource never sees its ids
/// go back. Polls stop with the last subscriber, so the ticks stand still between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_with_last_event_id_gets_a_fresh_snapshot() {
    // The clock stands still: the quotes never change after the first poll.
    let clock = support::clock_at(MONDAY_10_00);
    let env = support::start_with(|_| {}, fast_hub, Some(clock)).await;
    let query = "codes=600519,000001,300750&pz=10";
    let mut r = subscribe(&env, query).await;
    let first = r.next_quote(WAIT).await.unwrap();
    assert_eq!(first.codes().len(), 3);
    drop(r);
    let last: u64 = first.id.parse().unwrap();
    for sent in [last, last + 1_000_000] {
        let again = env
            .get_with(
                &format!("/stock/indicator/realtime/sse?{query}"),
                &[("last-event-id", &sent.to_string())],
            )
            .await;
        let mut again = SseReader::new(again);
        assert_eq!(again.next(WAIT).await.unwrap().retry, Some(3000));
        let snapshot = again.next_quote(WAIT).await.unwrap();
        let mut codes = snapshot.codes();
        codes.sort();
        assert_eq!(
            codes,
            ["000001", "300750", "600519"],
            "all codes, each once, not only what changed"
        );
        let id: u64 = snapshot.id.parse().unwrap();
        assert!(id > sent, "id {id} after Last-Event-ID {sent}");
    }
    // One no hub made (past 2^53) is ignored: ids built on it would overflow.
    let again = env
        .get_with(
            &format!("/stock/indicator/realtime/sse?{query}"),
            &[("last-event-id", &u64::MAX.to_string())],
        )
        .await;
    let mut again = SseReader::new(again);
    assert_eq!(again.next(WAIT).await.unwrap().retry, Some(3000));
    let id: u64 = again.next_quote(WAIT).await.unwrap().id.parse().unwrap();
    assert!(id < last + 100, "a board tick, not an offset: {id}");
}

/// A subscriber that never reads neither delays another subscriber nor grows its
/// memory, and is disconnected once it stalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_harms_no_one() {
    let (env, _ticker) = hub_env(|c| {
        c.hub.stall_timeout_secs = 2;
        c.hub.max_codes_per_stream = 400;
    })
    .await;
    let hub = env.proxy.hub().clone();
    // The reader first, so that it reads while the sleeper fills its socket.
    let mut reader = subscribe(&env, "codes=600519").await;
    let mut last_id: u64 = reader.next_quote(WAIT).await.unwrap().id.parse().unwrap();
    // 400 quotes change every tick: ~130 KB per 50 ms fills the loopback socket
    // buffers of a client that never reads within a few seconds.
    let codes = support::listed_codes(400);
    // The sleeper: a raw connection that sends its request and never reads.
    let mut sleeper = tokio::net::TcpStream::connect(env.proxy.addr)
        .await
        .unwrap();
    let request = format!(
        "GET /api/v1/stock/indicator/realtime/sse?codes={}&pz=100 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        codes.join(",")
    );
    sleeper.write_all(request.as_bytes()).await.unwrap();
    // Until the sleeper is cut off, the reader keeps getting new ticks (each within
    // the bounded wait, ids rising: nothing old queued up for it), and at most one
    // board's worth of 400 quotes is ever built ahead. No speed is asserted. The
    // sleeper is stuck from its connection's first write that took less than an
    // event (the rest waits for it): the reader must get ticks after that.
    let mut max_pending = 0;
    let mut ticks_while_stuck = 0u32;
    let mut subscribed = false;
    for _ in 0..100_000 {
        let e = reader
            .next_quote(WAIT)
            .await
            .expect("the reader keeps getting events");
        let id: u64 = e.id.parse().unwrap();
        assert!(id > last_id, "tick {id} after {last_id}");
        last_id = id;
        max_pending = max_pending.max(hub.max_pending_bytes());
        assert!(max_pending < 256 * 1024, "{max_pending} bytes pending");
        let open = hub.subscribers() == 2;
        subscribed |= open;
        if open && hub.partial_writes() > 0 {
            ticks_while_stuck += 1;
        }
        if subscribed && !open {
            break;
        }
    }
    assert!(
        ticks_while_stuck >= 3,
        "the reader got {ticks_while_stuck} ticks while the sleeper was stuck"
    );
    assert_eq!(hub.subscribers(), 1, "the sleeper was disconnected");
    assert_eq!(hub.stalled(), 1);
    // The reader is not affected by the disconnect.
    reader
        .next_quote(WAIT)
        .await
        .expect("the reader still gets events");
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

/// The poll stops when the last subscriber's connection goes (the upstream is asked
/// nothing more, over many intervals), and starts again for the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_stops_when_the_last_subscriber_leaves() {
    let (env, _ticker) = hub_env(|_| {}).await;
    let hub = env.proxy.hub().clone();
    let mut r = subscribe(&env, "codes=600519").await;
    r.next_quote(WAIT).await.unwrap();
    drop(r);
    // The hub has seen the connection go and its loop has ended...
    let stopped = support::eventually(WAIT, || !hub.is_polling() && hub.subscribers() == 0).await;
    assert!(stopped, "the hub still counts a subscriber, or polls");
    assert_eq!(hub.codes(), 0);
    // ... and the upstream hears nothing for twenty intervals.
    let polls = env.sim.hits("/stock/list");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.sim.hits("/stock/list"),
        polls,
        "polled without subscribers"
    );
    let mut again = subscribe(&env, "codes=000001").await;
    assert!(again.next_quote(WAIT).await.is_some());
    assert!(
        env.sim.hits("/stock/list") > polls,
        "no poll for the next subscriber"
    );
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
        assert!(support::headers(&r, "x-cache").is_empty(), "{query}");
        let (status, _, got) = support::error_of(r).await;
        assert_eq!((status, got.as_deref()), (400, Some(param)), "{query}");
        // Nothing reached the upstream, not even a request it would refuse too.
        assert_eq!(
            env.sim.raw_count(),
            0,
            "{query}: {:?}",
            env.sim.raw_requests()
        );
    }
    assert_eq!(env.proxy.hub().subscribers(), 0);
}

/// The proxy's own limits are not the upstream's failures: with the
/// upstream-compatible error mode on, the stream caps (429 per token, 503 in all)
/// and the client rate limit keep their statuses.
#[tokio::test]
async fn the_error_mode_leaves_the_proxys_own_limits_alone() {
    let (env, _ticker) = hub_env(|c| {
        c.server.error_mode = mdproxy_config::ErrorMode::Upstream;
        c.hub.max_streams_per_token = 1;
        c.hub.max_streams = 2;
        c.auth.tokens.push(mdproxy_config::Secret::new("second"));
        c.auth.tokens.push(mdproxy_config::Secret::new("third"));
    })
    .await;
    let sse = |code: &str, token: &str| {
        env.client
            .get(env.url(&format!("/stock/indicator/realtime/sse?codes={code}")))
            .bearer_auth(token.to_owned())
            .send()
    };
    let mut a = subscribe(&env, "codes=600519").await;
    assert!(a.next_quote(WAIT).await.is_some());
    let own = env.get("/stock/indicator/realtime/sse?codes=600519").await;
    let (status, code, _) = support::error_of(own).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
    let b = sse("000001", "second").await.unwrap();
    assert_eq!(b.status(), 200);
    let other = sse("000001", "third").await.unwrap();
    let (status, code, _) = support::error_of(other).await;
    assert_eq!((status, code.as_str()), (503, "overloaded"));
    drop(b);

    let limited = support::start_with(
        |_| {},
        |c| {
            c.server.error_mode = mdproxy_config::ErrorMode::Upstream;
            c.limits.client_rps = 1;
            c.limits.client_burst = 1;
        },
        Some(support::saturday()),
    )
    .await;
    assert_eq!(limited.get("/market/indices").await.status(), 200);
    let (status, code, _) = support::error_of(limited.get("/market/indices").await).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
}

/// Streams per token (429) and in all (503) are limited; without a source: 503
/// naming the setting.
#[tokio::test]
async fn stream_limits_and_missing_source() {
    let (env, _ticker) = hub_env(|c| {
        c.hub.max_streams_per_token = 2;
        c.hub.max_streams = 3;
        c.auth.tokens.push(mdproxy_config::Secret::new("second"));
    })
    .await;
    // The streams at the limits work: a token's 2nd, and the 3rd in all.
    let mut a = subscribe(&env, "codes=600519").await;
    let mut b = subscribe(&env, "codes=600519").await;
    assert!(a.next_quote(WAIT).await.is_some());
    assert!(
        b.next_quote(WAIT).await.is_some(),
        "the token's 2nd stream works"
    );
    let third = env.get("/stock/indicator/realtime/sse?codes=600519").await;
    assert!(header(&third, "retry-after").parse::<u64>().unwrap() >= 1);
    let (status, code, _) = support::error_of(third).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
    let other = |q: &str| {
        env.client
            .get(env.url(&format!("/stock/indicator/realtime/sse?{q}")))
            .bearer_auth("second")
            .send()
    };
    let c = other("codes=000001").await.unwrap();
    assert_eq!(c.status(), 200, "the 3rd stream in all is allowed");
    let mut c = SseReader::new(c);
    assert!(c.next_quote(WAIT).await.is_some(), "and works");
    let (status, code, _) = support::error_of(other("codes=000001").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (503, "overloaded"));
    assert_eq!(env.proxy.hub().subscribers(), 3);
    // A refused stream took no slot: closing one frees exactly one.
    drop(c);
    let hub = env.proxy.hub().clone();
    assert!(support::eventually(WAIT, || hub.subscribers() == 2).await);
    let again = other("codes=000001").await.unwrap();
    assert_eq!(again.status(), 200);

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

/// Shutting the proxy down ends open streams at once instead of waiting out the
/// grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams() {
    let (env, _ticker) = hub_env(|c| c.server.shutdown_grace_ms = 30_000).await;
    let mut r = subscribe(&env, "codes=600519").await;
    r.next_quote(WAIT).await.unwrap();
    let support::Env { proxy, sim, .. } = env;
    // Bounded well below the 30 s grace: finishing at all shows it did not wait.
    tokio::time::timeout(Duration::from_secs(10), proxy.shutdown())
        .await
        .expect("shutdown does not wait for the 30 s grace");
    // The stream ended cleanly: what was already sent may still be read, then the
    // end of the body. A stream that merely went silent would time out instead.
    let mut end = None;
    for _ in 0..1_000 {
        match r.next_or_end(WAIT).await {
            Next::Event(_) => continue,
            other => {
                end = Some(other);
                break;
            }
        }
    }
    assert!(matches!(end, Some(Next::End)), "{end:?}");
    drop(sim);
}

/// A stream opened after the proxy stopped ends at once, with or without a poll
/// loop running at the stop: the loop it starts publishes the closing board again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_opened_after_the_stop_ends_at_once() {
    use futures_util::StreamExt;
    let (env, _ticker) = hub_env(|_| {}).await;
    let hub = env.proxy.hub().clone();
    let support::Env { proxy, sim, .. } = env;
    tokio::time::timeout(WAIT, proxy.shutdown())
        .await
        .expect("shutdown ends");
    for _ in 0..2 {
        let mut events = hub
            .subscribe(Subscription {
                token: 0,
                codes: "600519",
                pz: 20,
                last_event_id: None,
                connection: None,
                outlet: None,
            })
            .unwrap();
        let ended =
            tokio::time::timeout(WAIT, async { while events.next().await.is_some() {} }).await;
        assert!(ended.is_ok(), "the stream ended");
        drop(events);
        assert!(support::eventually(WAIT, || hub.subscribers() == 0).await);
    }
    drop(sim);
}

/// Under the upstream's throttling (the simulator's switch: a `429` with
/// `Retry-After` past three requests a minute) the quote poll sends nothing until
/// the time it was given, not even for a stream of a new code, while every stream
/// stays open, keeps its last quotes and gets keepalives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_upstream_is_not_polled_before_its_retry_after() {
    // The clock stands still, so the simulator's minute never ends: its Retry-After
    // is the whole minute, far longer than this test.
    let clock = support::clock_at(MONDAY_10_00);
    let env = support::start_with(|_| {}, fast_hub, Some(clock)).await;
    env.sim.set_throttling(Some(Throttling {
        limit: 3,
        window: Duration::from_secs(60),
        mode: ThrottleMode::TooManyRequests,
    }));
    let hub = env.proxy.hub().clone();
    let mut r = subscribe(&env, "codes=600519").await;
    r.next_quote(WAIT).await.expect("the snapshot");
    assert!(support::eventually(WAIT, || env.sim.throttled() == 1).await);
    let polls = env.sim.hits("/stock/list");
    assert_eq!(polls, 3, "three polls before the 429");
    // A new code wakes the poll loop: the upstream is still not asked.
    let mut other = subscribe(&env, "codes=000001").await;
    assert_eq!(other.next(WAIT).await.unwrap().retry, Some(3000));
    for _ in 0..3 {
        let e = r.next(WAIT).await.expect("the stream stays open");
        assert!(e.comment, "keepalives only: {e:?}");
        let e = other.next(WAIT).await.expect("the stream stays open");
        assert!(e.comment, "no quote without a poll: {e:?}");
    }
    assert_eq!(env.sim.hits("/stock/list"), polls);
    assert_eq!(env.sim.throttled(), 1, "nothing sent during Retry-After");
    let pacing = hub.pacing();
    assert_eq!(pacing.held_by, Some("paused"));
    assert!(pacing.interval > Duration::from_secs(50), "{pacing:?}");
    assert_eq!(hub.subscribers(), 2);
}

/// With a vendor quota of two requests a minute the quote poll takes half of it:
/// one poll a minute instead of one every 50 ms (which would spend the quota at
/// once and leave nothing for client misses). The stream has its snapshot, then
/// keepalives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quote_poll_keeps_to_its_share_of_a_minute_quota() {
    let clock = support::clock_at(MONDAY_10_00);
    let quota = |c: &mut Config| {
        fast_hub(c);
        c.limits.upstream_per_minute = 2;
    };
    let env = support::start_with(|_| {}, quota, Some(clock)).await;
    let mut r = subscribe(&env, "codes=600519").await;
    r.next_quote(WAIT).await.expect("the snapshot");
    for _ in 0..3 {
        let e = r.next(WAIT).await.expect("the stream stays open");
        assert!(e.comment, "keepalives: {e:?}");
    }
    assert_eq!(env.sim.hits("/stock/list"), 1, "one poll");
    assert_eq!(
        env.proxy.hub().pacing(),
        Pacing {
            interval: Duration::from_secs(60),
            held_by: Some("minute_quota")
        }
    );
    // A client miss still finds the other half.
    let miss = env.get("/stock/detail/600519").await;
    assert_eq!(miss.status(), 200);
}

/// Reads from `stream` into `buf` until `done(buf)` holds (bounded by [`WAIT`]).
async fn read_until(
    stream: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
    done: impl Fn(&[u8]) -> bool,
) {
    let filled = tokio::time::timeout(WAIT, async {
        let mut chunk = [0u8; 4096];
        while !done(buf) {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(buf));
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(filled.is_ok(), "{}", String::from_utf8_lossy(buf));
}

/// The head of a raw HTTP/1.1 answer, and the chunks of its body that have come.
fn chunked(bytes: &[u8]) -> Option<(String, Vec<Vec<u8>>)> {
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8(bytes[..split].to_vec()).unwrap();
    let mut rest = &bytes[split + 4..];
    let mut chunks = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
        let Some(data) = rest.get(eol + 2..eol + 2 + size + 2) else {
            break;
        };
        assert_eq!(&data[size..], b"\r\n", "a chunk ends with CRLF");
        chunks.push(data[..size].to_vec());
        rest = &rest[eol + 2 + size + 2..];
    }
    Some((head, chunks))
}

/// Reads a stream's answer off `stream` up to its first two chunks, checks that they
/// are the `retry:` line and a quote event, and returns the head.
async fn first_two_chunks(stream: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    read_until(stream, &mut buf, |b| {
        chunked(b).is_some_and(|(_, chunks)| chunks.len() >= 2)
    })
    .await;
    let (head, chunks) = chunked(&buf).unwrap();
    assert_eq!(chunks[0], b"retry: 3000\n\n");
    assert!(chunks[1].starts_with(b"event: quote\nid: "), "{chunks:?}");
    head
}

/// A plain HTTP/1.1 stream is written on the bare socket, without hyper: the answer
/// is framed exactly as HTTP/1.1 chunks with the same headers as every answer, a
/// client that hangs up while its stream is quiet ends its subscription, an error on
/// the stream path is a whole envelope followed by the close, and a request whose
/// head comes in pieces is still served (by hyper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_on_the_bare_socket_are_plain_http() {
    let (env, _ticker) = hub_env(|c| c.hub.keepalive_secs = 30).await;
    let hub = env.proxy.hub().clone();
    let target = "/api/v1/stock/indicator/realtime/sse?codes=600519";
    let mut stream = tokio::net::TcpStream::connect(env.proxy.addr)
        .await
        .unwrap();
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: x\r\nX-Api-Key: {TOKEN}\r\nX-Request-Id: bare-1\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = first_two_chunks(&mut stream).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    for line in [
        "content-type: text/event-stream",
        "cache-control: no-cache",
        "transfer-encoding: chunked",
        "x-request-id: bare-1",
        "x-accel-buffering: no",
    ] {
        assert!(head.contains(line), "{line} in {head}");
    }
    assert!(head.contains("\r\ndate: "), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    // The only code's quote has been sent and keepalives are 30 s away: the stream
    // is quiet when the client hangs up, and the hub still learns of it.
    assert!(support::eventually(WAIT, || hub.subscribers() == 1).await);
    assert_eq!(hub.outlet_subscribers(), 1, "written on the bare socket");
    drop(stream);
    assert!(
        support::eventually(WAIT, || hub.subscribers() == 0).await,
        "the subscription ended with its connection"
    );

    // An error on the stream path: the whole envelope, then the connection closes.
    let refused =
        support::raw_request(env.proxy.addr, "GET", target, &[("X-Api-Key", "wrong")]).await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.one("connection"), Some("close"));
    assert_eq!(
        refused.one("content-length"),
        Some(refused.body.len().to_string().as_str())
    );
    let envelope: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(envelope["success"], false);
    assert_eq!(envelope["error"]["code"], "unauthorized");

    // A head in two pieces is left to hyper, which serves the same stream.
    let mut split = tokio::net::TcpStream::connect(env.proxy.addr)
        .await
        .unwrap();
    let (first, second) = request.split_at(30);
    split.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    split.write_all(second.as_bytes()).await.unwrap();
    let head = first_two_chunks(&mut split).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        (hub.subscribers(), hub.outlet_subscribers()),
        (1, 0),
        "hyper serves it: the hub has no outlet for it"
    );
}

/// How long a reader that falls behind stops reading, at most, before a fan-out
/// write stops short (the socket's send buffer grows to a few MB first: about 3 s
/// of ticks on a busy machine, where a fixed 3 s stall failed 7 runs in 8); and how
/// many times it may stop.
const STALL: Duration = Duration::from_secs(15);
const STALLS: u32 = 3;

/// A reader whose socket fills up (it stops reading for a while, through a small
/// receive buffer) gets the rest of its stream intact once it reads again: the
/// fan-out's writes that the connection took only in part are finished by the
/// stream's task, and every chunk is whole, every event well formed, ticks in
/// order; then it is caught up and gets new ticks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_falls_behind_gets_whole_chunks_in_order() {
    let (env, _ticker) = hub_env(|c| {
        c.hub.stall_timeout_secs = 60;
        c.hub.max_codes_per_stream = 400;
    })
    .await;
    let codes = support::listed_codes(400);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(env.proxy.addr).await.unwrap();
    let request = format!(
        "GET /api/v1/stock/indicator/realtime/sse?codes={}&pz=100 HTTP/1.1\r\nHost: x\r\nX-Api-Key: {TOKEN}\r\n\r\n",
        codes.join(",")
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    read_until(&mut stream, &mut buf, |b| {
        chunked(b).is_some_and(|(_, chunks)| chunks.len() >= 2)
    })
    .await;
    // Two ticks past the snapshot while the client reads: the stream's task has
    // written the snapshot (about 100 KB, more than the socket's buffers may hold
    // at first) and rests, so what fills the socket next is the fan-out's writes.
    let first = newest_tick(&buf);
    read_until(&mut stream, &mut buf, |b| newest_tick(b) >= first + 2).await;
    let hub = env.proxy.hub();
    for stall in 1..=STALLS {
        // Stop reading: 400 quotes move every 50 ms tick (about 130 KB), and once
        // the socket's buffers are full a fan-out write stops short. Unless the
        // kernel refused one whole (a buffer full to the byte): then catch up and
        // stop again.
        if support::eventually(STALL, || hub.partial_writes() > 0).await {
            break;
        }
        assert!(
            stall < STALLS,
            "the connection took part of an event in none of {STALLS} stalls: \
             no rest went to the stream's task"
        );
        let now = hub.tick();
        read_until(&mut stream, &mut buf, |b| newest_tick(b) >= now).await;
    }
    // Read on until 20 ticks past the board the hub had when reading resumed: the
    // backlog is drained and the stream is fed by the fan-out again.
    let resumed_at = hub.tick();
    read_until(&mut stream, &mut buf, |b| newest_tick(b) >= resumed_at + 20).await;
    let (_, chunks) = chunked(&buf).unwrap();
    let mut last = 0u64;
    for chunk in &chunks {
        let text = std::str::from_utf8(chunk).expect("a chunk is whole UTF-8 text");
        if text.starts_with("retry: ") || text == ": keepalive\n\n" {
            continue;
        }
        let rest = text
            .strip_prefix("event: quote\nid: ")
            .unwrap_or_else(|| panic!("an event: {text:?}"));
        let (id, data) = rest.split_once("\ndata: ").expect("a data line");
        let id: u64 = id.parse().unwrap();
        assert!(id >= last, "tick {id} after {last}");
        last = id;
        let data = data.strip_suffix("\n\n").expect("the event ends");
        let quotes: Vec<serde_json::Value> = serde_json::from_str(data).expect("JSON quotes");
        assert!(
            !quotes.is_empty() && quotes.len() <= 100,
            "{}",
            quotes.len()
        );
    }
}

/// The tick of the last event that has begun in `bytes` (0 before any).
fn newest_tick(bytes: &[u8]) -> u64 {
    const MARK: &[u8] = b"event: quote\nid: ";
    let tail = &bytes[bytes.len().saturating_sub(64 * 1024)..];
    let Some(at) = tail.windows(MARK.len()).rposition(|w| w == MARK) else {
        return 0;
    };
    let digits = &tail[at + MARK.len()..];
    let end = digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(0);
    std::str::from_utf8(&digits[..end])
        .unwrap()
        .parse()
        .unwrap_or(0)
}
