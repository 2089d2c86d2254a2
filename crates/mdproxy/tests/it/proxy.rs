//! The foundation's contract through a real proxy in front of the simulator: every
//! endpoint, validation, auth, routing, HEAD, caching, coalescing, upstream failures.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use mdproxy_api::catalog::catalog;
use support::{Env, TOKEN, UPSTREAM_TOKEN, error_of, eventually, header, headers};

/// Every non-stream endpoint answers `success: true` through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_through_the_proxy() {
    let env = support::start().await;
    let mut checked = 0;
    for e in catalog().endpoints().iter().filter(|e| !e.streaming) {
        let mut target = e.example_target();
        // The docs call every parameter of the earnings forecast optional, yet their
        // sample of the bare request is the upstream's refusal (the simulator's too).
        if e.path == "/stock/earnings-forecast" {
            target.push_str("?reportDate=2024-12-31");
        }
        let r = env.get(&target).await;
        assert_eq!(r.status(), 200, "{target}");
        assert_eq!(header(&r, "content-type"), "application/json", "{target}");
        // The retired flows, asked first, are their successors' requests: one entry.
        let succeeded = catalog()
            .endpoints()
            .iter()
            .any(|old| old.successor.is_some_and(|s| s.path == e.path));
        let expected = if succeeded { "HIT" } else { "MISS" };
        assert_eq!(header(&r, "x-cache"), expected, "{target}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["success"], true, "{target}");
        // An object or, for most single-stock answers, a bare array.
        assert!(
            v["data"].is_object() || v["data"].is_array(),
            "{target}: {v}"
        );
        checked += 1;
    }
    let endpoints = catalog()
        .endpoints()
        .iter()
        .filter(|e| !e.streaming)
        .count();
    assert_eq!(checked, endpoints);
    // Less the two retired flows, whose successors' entries were already filled.
    assert_eq!(env.sim.total(), endpoints as u64 - 2);
}

/// Each validation rule refuses a bad value with 400 naming the parameter, before
/// anything reaches the upstream.
#[tokio::test]
async fn bad_parameters_are_refused_with_the_parameter_named() {
    let env = support::start().await;
    let cases = [
        (
            "/stock/kline?code=600519&period=year",
            "invalid_parameter",
            "period",
        ),
        (
            "/stock/kline?code=600519&fqt=qfq",
            "invalid_parameter",
            "fqt",
        ),
        ("/stock/kline?period=day", "missing_parameter", "code"),
        ("/fund/kline?code=51030", "invalid_parameter", "code"),
        ("/market/flow?type=9", "invalid_parameter", "type"),
        ("/market/flow/list?type=x", "invalid_parameter", "type"),
        (
            "/stock/indicator/realtime/sse?codes=600519&pz=0",
            "invalid_parameter",
            "pz",
        ),
        (
            "/stock/indicator/realtime/sse?codes=600519&pz=101",
            "invalid_parameter",
            "pz",
        ),
        (
            "/stock/indicator/realtime/sse?pz=5",
            "missing_parameter",
            "codes",
        ),
        (
            "/stock/indicator/realtime/sse?codes=60051x",
            "invalid_parameter",
            "codes",
        ),
        ("/stock/list?codes=600519,12", "invalid_parameter", "codes"),
        (
            "/stock/shareholder/research/600519",
            "missing_parameter",
            "endDate",
        ),
        (
            "/stock/shareholder/research/600519?endDate=2024-13-01",
            "invalid_parameter",
            "endDate",
        ),
        (
            "/stock/shareholder/list?code=8001&endDate=20240630",
            "invalid_parameter",
            "endDate",
        ),
        // A date whose format the docs state (the earnings forecast's report date
        // is text: its format is undocumented).
        (
            "/stock/financial/snapshot/600519?reportDate=2023-02-29",
            "invalid_parameter",
            "reportDate",
        ),
        ("/stock/selection?page=one", "invalid_parameter", "page"),
        (
            "/stock/news?code=600519&pageIndex=1&pageSize=100000",
            "invalid_parameter",
            "pageSize",
        ),
        // `year` is a string in the docs, for the upstream to read; a bound the
        // catalogue names is enforced.
        (
            "/stock/financial/history/600519?years=0",
            "invalid_parameter",
            "years",
        ),
        ("/macro/cpi?page=1&limit=5", "unknown_parameter", "limit"),
        ("/news/overview?x=1", "unknown_parameter", "x"),
        ("/stock/detail/ABCDEF", "invalid_parameter", "code"),
        ("/stock/detail/600519.HK", "invalid_parameter", "code"),
        (
            "/news/topic/library/detail/a%20b",
            "invalid_parameter",
            "themeId",
        ),
    ];
    for (target, code, param) in cases {
        let r = env.get(target).await;
        // Made by the proxy, not relayed: no cache outcome.
        assert!(headers(&r, "x-cache").is_empty(), "{target}");
        let (status, got_code, got_param) = error_of(r).await;
        assert_eq!(status, 400, "{target}");
        assert_eq!(got_code, code, "{target}");
        assert_eq!(got_param.as_deref(), Some(param), "{target}");
        // The simulator would answer the same 400 (it runs the same validation), so
        // only its raw recorder shows whether the request was forwarded.
        assert_eq!(
            env.sim.raw_count(),
            0,
            "{target} reached the upstream: {:?}",
            env.sim.raw_requests()
        );
    }
    assert_eq!(env.sim.total(), 0, "nothing invalid reached the upstream");
    // The recorder does see what the proxy forwards.
    assert_eq!(env.get("/stock/kline?code=600519").await.status(), 200);
    assert_eq!(env.sim.raw_count(), 1);
    assert!(env.sim.raw_requests()[0].starts_with("/api/v1/stock/kline?"));
}

/// The cache-buster `_` is accepted and left out of the key.
#[tokio::test]
async fn cache_buster_is_ignored_by_the_key() {
    let env = support::start().await;
    assert_eq!(
        header(&env.get("/market/indices?_=1").await, "x-cache"),
        "MISS"
    );
    assert_eq!(
        header(&env.get("/market/indices?_=2").await, "x-cache"),
        "HIT"
    );
    assert_eq!(header(&env.get("/market/indices").await, "x-cache"), "HIT");
    assert_eq!(env.sim.hits("/market/indices"), 1);
}

/// Missing or wrong tokens get 401 with `WWW-Authenticate: Bearer`.
#[tokio::test]
async fn requests_without_a_valid_token_are_refused() {
    let env = support::start().await;
    let url = env.url("/news/overview");
    let none = env.client.get(&url).send().await.unwrap();
    assert!(header(&none, "www-authenticate").starts_with("Bearer"));
    assert!(headers(&none, "x-cache").is_empty());
    assert_eq!(error_of(none).await.1, "unauthorized");
    let wrong = env
        .client
        .get(&url)
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // The upstream's token is not a client token.
    let upstream = env
        .client
        .get(&url)
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(upstream.status(), 401);
    assert!(headers(&upstream, "x-cache").is_empty());
    assert_eq!(env.sim.total(), 0);
    assert_eq!(env.sim.raw_count(), 0, "{:?}", env.sim.raw_requests());
}

/// What a client mistyped is named with what it probably meant: a query parameter
/// with the nearest one the endpoint takes, a path with the nearest documented
/// path, a choice of one with that one value.
#[tokio::test]
async fn a_mistyped_name_gets_what_it_probably_meant() {
    let env = support::start().await;
    let message = |r: reqwest::Response| async move {
        let v: serde_json::Value = r.json().await.unwrap();
        v["message"].as_str().unwrap().to_owned()
    };
    let cases = [
        (
            "/stock/kline?code=600519&perod=day",
            "unknown parameter perod (did you mean period?)",
        ),
        ("/news/overview?x=1", "unknown parameter x"),
        (
            "/stock/klin?code=600519",
            "no endpoint at this path (did you mean /stock/kline?)",
        ),
        (
            "/macro/cpi/serie",
            "no endpoint at this path (did you mean /macro/cpi/series?)",
        ),
        ("/weather/today", "no endpoint at this path"),
        ("/market/trading-calendar?market=XX", "market must be CN_A"),
        (
            "/stock/kline?code=600519&period=days",
            "period must be one of 1m, 5m, 15m, 30m, 60m, day, week, month",
        ),
    ];
    for (target, expected) in cases {
        assert_eq!(message(env.get(target).await).await, expected, "{target}");
    }
    assert_eq!(env.sim.total(), 0, "nothing mistyped reached the upstream");
}

/// Unknown paths 404; other methods 405 with `Allow`; HEAD answers like GET, no body.
#[tokio::test]
async fn routing_and_methods_follow_the_contract() {
    let env = support::start().await;
    for target in ["/stock/nothing", "/stock/detail", "/news/overview/", "/"] {
        let r = env.get(target).await;
        assert!(headers(&r, "x-cache").is_empty(), "{target}");
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (404, "not_found"), "{target}");
    }
    let outside = env
        .client
        .get(format!("http://{}/metrics", env.proxy.addr))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), 404);

    for method in [
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let r = env
            .client
            .request(method.clone(), env.url("/news/overview"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(header(&r, "allow"), "GET, HEAD", "{method}");
        assert!(headers(&r, "x-cache").is_empty(), "{method}");
        assert_eq!(error_of(r).await.1, "method_not_allowed");
    }
    assert_eq!(env.sim.raw_count(), 0, "{:?}", env.sim.raw_requests());

    let get = env.get("/stock/detail/600519").await;
    let get_len = get.bytes().await.unwrap().len();
    assert!(get_len > 0);
    // Read off the socket: an HTTP client never reads a body after HEAD.
    let head = env.raw("HEAD", "/stock/detail/600519", &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("x-cache"), Some("HIT"));
    assert_eq!(
        head.header("content-length"),
        Some(get_len.to_string().as_str())
    );
    assert!(
        head.body.is_empty(),
        "HEAD sent {} body bytes",
        head.body.len()
    );
    assert_eq!(env.sim.hits("/stock/detail/{code}"), 1);
}

/// A second request is a HIT with the same bytes, an `Age`, an `ETag` and `max-age`.
#[tokio::test]
async fn second_request_is_a_hit_with_the_same_bytes() {
    // Saturday noon: intraday data is fresh until shortly after Monday's open.
    let clock = support::saturday();
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let target = "/stock/kline?code=000001&period=day&fqt=pre";
    let first = env.get(target).await;
    assert_eq!(header(&first, "x-cache"), "MISS");
    assert_eq!(header(&first, "age"), "0");
    assert_eq!(
        header(&first, "cache-control"),
        format!("max-age={UNTIL_MONDAY}")
    );
    let etag = header(&first, "etag");
    let first = first.bytes().await.unwrap();
    assert!(
        first.len() > 300_000,
        "a long daily history: {} bytes",
        first.len()
    );

    clock.advance(Duration::from_secs(7));
    // Same key spelled differently: suffix, lower case, parameter order.
    let second = env
        .get("/stock/kline?fqt=pre&code=000001.sz&period=day")
        .await;
    assert_eq!(header(&second, "x-cache"), "HIT");
    assert_eq!(header(&second, "age"), "7");
    assert_eq!(
        header(&second, "cache-control"),
        format!("max-age={}", UNTIL_MONDAY - 7)
    );
    assert_eq!(header(&second, "etag"), etag);
    assert_eq!(second.bytes().await.unwrap(), first);
    assert_eq!(env.sim.hits("/stock/kline"), 1);

    // Read off the socket: an HTTP client never reads a body after 304.
    let not_modified = env.raw("GET", target, &[("If-None-Match", &etag)]).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("etag"), Some(etag.as_str()));
    assert!(
        not_modified.body.is_empty(),
        "304 sent {} body bytes",
        not_modified.body.len()
    );
    assert!(
        not_modified
            .header("content-length")
            .is_none_or(|n| n == "0" || n == first.len().to_string()),
        "{:?}",
        not_modified.header("content-length")
    );
    assert_eq!(env.sim.hits("/stock/kline"), 1);
}

/// A hit is answered inside hyper's service call, as a bare server answers: the
/// request is let go before hyper reads the socket again, so hyper reads the next
/// request into the same buffer. A lookup that must wait (the fill, moka's read of a
/// key the hot set does not hold yet, and a hot key's one read a second that moka
/// sees) is a future. What a hit's response carries from the request (the client's
/// `X-Request-Id`, an allowed `Origin`) is copied, never shared with the request's
/// bytes, which would keep the buffer held.
#[tokio::test]
#[cfg_attr(
    feature = "without-slot-tables",
    ignore = "a hit is answered at once only from the hot set"
)]
async fn a_hit_is_answered_at_once_and_keeps_none_of_the_requests_bytes() {
    use futures_util::future::Either;
    use mdproxy_core::edge::handler::Handled;

    let clock = support::saturday();
    let env = support::start_with(
        |_| {},
        |c| c.server.cors_origins = vec!["https://dash.example.com".into(), "*".into()],
        Some(clock.clone()),
    )
    .await;
    let edge = env.proxy.edge();
    let connection = Arc::new(mdproxy_core::edge::Connection {
        peer: "127.0.0.1:40000".parse().unwrap(),
        close: Default::default(),
        outlet: None,
    });
    let request = |origin: &str| {
        http::Request::get("/api/v1/stock/detail/600519")
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("x-request-id", "dash-7f3a")
            .header("origin", origin)
            .body(())
            .unwrap()
    };
    // Whether the answer was ready at once, and the answer.
    let ask = |request: http::Request<()>| async {
        let handled: Handled = edge.handle(request, Arc::clone(&connection));
        let at_once = matches!(handled, Either::Left(_));
        let Ok(response) = handled.await;
        (at_once, response)
    };
    let x_cache = |r: &http::Response<_>| r.headers()["x-cache"].to_str().unwrap().to_owned();

    let (at_once, first) = ask(request("https://dash.example.com")).await;
    assert_eq!((at_once, x_cache(&first).as_str()), (false, "MISS"));
    let (at_once, second) = ask(request("https://dash.example.com")).await;
    assert_eq!(
        (at_once, x_cache(&second).as_str()),
        (false, "HIT"),
        "moka's read holds the key"
    );
    for origin in ["https://dash.example.com", "https://elsewhere.example.com"] {
        // The fill tells the hot set that the key changed once it has stored the
        // entry (`keep`), which lets go of what a read held: on a busy machine that
        // can come after the read above. Until then a hit is moka's read again.
        let mut at_once = None;
        for _ in 0..50 {
            let sent = request(origin);
            let sent_id = sent.headers()["x-request-id"].as_bytes().as_ptr();
            let sent_origin = sent.headers()["origin"].as_bytes().as_ptr();
            let (now, hit) = ask(sent).await;
            assert_eq!(x_cache(&hit), "HIT", "{origin}");
            if now {
                at_once = Some((sent_id, sent_origin, hit));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (sent_id, sent_origin, hit) = at_once.expect("a hit answered at once");
        let id = &hit.headers()["x-request-id"];
        let allowed = &hit.headers()["access-control-allow-origin"];
        assert_eq!(
            (id.to_str().unwrap(), allowed.to_str().unwrap()),
            ("dash-7f3a", origin)
        );
        assert_ne!(id.as_bytes().as_ptr(), sent_id, "the request ID is copied");
        assert_ne!(
            allowed.as_bytes().as_ptr(),
            sent_origin,
            "the origin is copied"
        );
    }
    // The first read of the next second is moka's; the one after is at once again.
    clock.advance(Duration::from_secs(1));
    let (at_once, told) = ask(request("https://dash.example.com")).await;
    assert_eq!((at_once, x_cache(&told).as_str()), (false, "HIT"));
    let (at_once, hit) = ask(request("https://dash.example.com")).await;
    assert_eq!((at_once, x_cache(&hit).as_str()), (true, "HIT"));
    assert_eq!(env.sim.hits("/stock/detail/{code}"), 1);
}

/// Seconds from Saturday 12:00 to Monday 09:16 China time (the open's auction plus
/// a minute): how long a closed-market answer cached at [`support::SATURDAY_NOON`]
/// stays fresh.
const UNTIL_MONDAY: u64 = 45 * 3600 + 16 * 60;

/// The spec's defaults share one entry: `/news/headlines` is `keyword=新闻联播要闻`.
#[tokio::test]
async fn defaults_share_one_cache_entry() {
    let env = support::start().await;
    assert_eq!(
        header(
            &env.get("/news/headlines?page=0&pageSize=10").await,
            "x-cache"
        ),
        "MISS"
    );
    let explicit = env
        .get("/news/headlines?page=0&pageSize=10&keyword=%E6%96%B0%E9%97%BB%E8%81%94%E6%92%AD%E8%A6%81%E9%97%BB")
        .await;
    assert_eq!(header(&explicit, "x-cache"), "HIT");
    let v: serde_json::Value = explicit.json().await.unwrap();
    let first = v["data"]["data"][0]["content"].as_str().unwrap();
    assert!(first.contains("新闻联播要闻"), "{first}");
    // An empty cursor is the feed's first portion.
    env.get("/news/feed").await;
    assert_eq!(
        header(&env.get("/news/feed?cursor=").await, "x-cache"),
        "HIT"
    );
}

/// 200 concurrent requests on a cold key reach the upstream exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_key_reaches_upstream_once() {
    const N: usize = 200;
    const TARGET: &str = "/stock/indicator/financial/600519";
    let env = Arc::new(support::start().await);
    // The upstream holds its answer until every request waits on the one fill, so
    // the collapse is exercised whatever the machine's speed.
    env.sim.set_hang(true);
    let mut tasks = Vec::new();
    for _ in 0..N {
        let env = env.clone();
        tasks.push(tokio::spawn(async move {
            let r = env.get(TARGET).await;
            assert_eq!(r.status(), 200);
            let status = header(&r, "cache-status");
            (status, r.bytes().await.unwrap())
        }));
    }
    let store = env.proxy.state().cache().store();
    assert!(
        eventually(Duration::from_secs(20), || store.waiters(TARGET) == N).await,
        "every request waits on one fill: {}",
        store.waiters(TARGET)
    );
    assert_eq!(env.sim.hits("/stock/indicator/financial/{code}"), 1);
    env.sim.set_hang(false);
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert!(answers.windows(2).all(|w| w[0].1 == w[1].1), "one body");
    let collapsed = answers
        .iter()
        .filter(|(status, _)| status.ends_with("fwd=miss; collapsed"))
        .count();
    assert_eq!(
        collapsed,
        N - 1,
        "one fill, every other request waited on it"
    );
    assert_eq!(env.sim.hits("/stock/indicator/financial/{code}"), 1);
}

/// With `server.work_stealing` off, connections run on serving threads, one a
/// core: a collapsed miss (its waiters on both threads) and a hit answer as on the
/// shared runtime, the default that every other test runs on.
#[tokio::test]
async fn the_serving_threads_serve_when_asked() {
    const TARGET: &str = "/stock/indicator/financial/600519";
    let env = Arc::new(
        support::start_with(
            |_| {},
            |c| {
                c.server.work_stealing = false;
                c.server.threads = 2;
            },
            None,
        )
        .await,
    );
    env.sim.set_hang(true);
    let waiting: Vec<_> = (0..8)
        .map(|_| {
            let env = env.clone();
            tokio::spawn(async move { header(&env.get(TARGET).await, "x-cache") })
        })
        .collect();
    let store = env.proxy.state().cache().store();
    assert!(
        eventually(Duration::from_secs(20), || store.waiters(TARGET) == 8).await,
        "every request waits on one fill: {}",
        store.waiters(TARGET)
    );
    env.sim.set_hang(false);
    for waiter in waiting {
        let answered = tokio::time::timeout(Duration::from_secs(30), waiter).await;
        assert_eq!(answered.unwrap().unwrap(), "MISS");
    }
    assert_eq!(header(&env.get(TARGET).await, "x-cache"), "HIT");
    assert_eq!(env.sim.hits("/stock/indicator/financial/{code}"), 1);
}

/// A loop that serves every client (the hub's poll and fan-out), started by a
/// request on a serving thread, runs on the shared runtime: on the serving thread
/// it would hold that one thread, and the fan-out would not spread over cores (a
/// tick's spread doubled at 10,000 subscribers).
#[tokio::test]
async fn a_loop_a_request_starts_runs_on_the_shared_runtime() {
    use mdproxy_core::workers::{self, Workers};
    let env = support::start().await;
    let state = env.proxy.state().clone();
    let serving = Workers::start(1).unwrap();
    let (here, there) = serving
        .spawn(async move {
            let looped = state.spawn_shared(async { workers::current() });
            (workers::current(), looped.await.unwrap())
        })
        .await
        .unwrap();
    assert_eq!(here, Some(0), "started on a serving thread");
    assert_eq!(there, None, "run on the runtime the proxy started on");
}

/// An upstream that is down gives 502 in the envelope, at once.
#[tokio::test]
async fn upstream_down_gives_502() {
    let env = support::start().await;
    // Stop the simulator, keep the proxy pointing at its (now closed) port.
    let Env {
        sim, proxy, client, ..
    } = env;
    sim.shutdown().await;
    let r = client
        .get(format!("{}/news/overview", proxy.base_url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
}

/// An upstream slower than `upstream.timeout_ms` gives 504 in the envelope, without
/// waiting for the upstream.
#[tokio::test]
async fn slow_upstream_gives_504() {
    let env = support::start_with(
        |s| s.latency_ms = 60_000,
        |c| c.upstream.timeout_ms = 300,
        None,
    )
    .await;
    // The test client gives up after 30 s, half the upstream's minute: an answer at
    // all shows the proxy's own timeout ended the wait (no clock read here).
    let (status, code, _) = error_of(env.get("/news/overview").await).await;
    assert_eq!((status, code.as_str()), (504, "upstream_timeout"));
}

/// Upstream 5xx becomes 502; the upstream's "not found" is relayed and cached briefly.
#[tokio::test]
async fn upstream_errors_map_and_not_found_is_relayed() {
    // Every request asks the upstream (no key held back after a failure here).
    let env = support::start_with(
        |_| {},
        |c| c.limits.failure_backoff_ms = 0,
        Some(support::saturday()),
    )
    .await;
    env.sim.fail_next(1);
    let (status, code, _) = error_of(env.get("/news/mainline").await).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
    assert_eq!(env.get("/news/mainline").await.status(), 200);

    let unknown = "/stock/detail/605999";
    let r = env.get(unknown).await;
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["success"], false);
    let again = env.get(unknown).await;
    assert_eq!(again.status(), 404);
    assert_eq!(header(&again, "x-cache"), "HIT");
    assert!(header(&again, "cache-status").contains("detail=negative"));
    assert_eq!(
        env.sim.hits_for("/stock/detail/605999"),
        1,
        "negative caching"
    );
}

/// The upstream token travels only to the upstream: never in responses.
#[tokio::test]
async fn upstream_token_never_reaches_clients() {
    let env = support::start().await;
    env.sim.fail_next(1);
    for target in [
        "/news/overview",
        "/news/overview",
        "/nope",
        "/stock/kline?period=x",
    ] {
        let r = env.get(target).await;
        let headers = format!("{:?}", r.headers());
        let body = r.text().await.unwrap();
        assert!(
            !headers.contains(UPSTREAM_TOKEN) && !body.contains(UPSTREAM_TOKEN),
            "{target}"
        );
    }
}

/// Stale-if-error: when the upstream fails, an answer inside its stale window is served.
#[tokio::test]
async fn failing_upstream_serves_the_stale_answer() {
    let clock = support::clock_at("2026-03-02T02:00:00Z");
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let first = env.get("/market/indices").await.bytes().await.unwrap();
    clock.advance(Duration::from_secs(10)); // past 3 s fresh, inside 60 s stale
    env.sim.fail_next(5);
    let r = env.get("/market/indices").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-cache"), "STALE");
    assert_eq!(header(&r, "age"), "10");
    assert_eq!(r.bytes().await.unwrap(), first);
}

/// A hanging upstream times out into 504, and one that always fails gives 502; both
/// recover when the fault is switched off.
#[tokio::test]
async fn hanging_and_failing_upstreams_map_to_504_and_502() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.upstream.timeout_ms = 300;
            c.limits.failure_backoff_ms = 0;
        },
        None,
    )
    .await;
    env.sim.set_hang(true);
    let (status, code, _) = error_of(env.get("/news/overview").await).await;
    assert_eq!((status, code.as_str()), (504, "upstream_timeout"));
    env.sim.set_hang(false);
    env.sim.set_error_rate(1.0);
    let (status, code, _) = error_of(env.get("/news/mainline").await).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
    env.sim.set_error_rate(0.0);
    // Recovered: a 200 within a few tries (one fresh fetch may outlast 300 ms on a
    // loaded machine).
    let mut recovered = false;
    for _ in 0..5 {
        if env.get("/news/mainline").await.status() == 200 {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "no 200 after the faults were switched off");
}
