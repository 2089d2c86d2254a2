//! mdproxy as a drop-in in front of the real upstream (issue 8), against the
//! simulator's model of it: bodies that are not strict JSON, failures reported as
//! HTTP 200 with `success: false`, the three auth forms, the real failure envelope,
//! the stream on `data.diff` rows, the newer documented parameters, and pass-through.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use mdproxy_api::catalog::catalog;
use mdproxy_core::stats::CacheStatus;
use mdproxy_core::upstream::UpstreamOutcome;
use mdproxy_market::Clock;
use serde_json::Value;
use support::{Env, Next, SseReader, TOKEN, UPSTREAM_TOKEN, error_of, header};

/// Saturday 21 November 2026, 20:00 China time: closed, so `news` answers are fresh
/// for 300 s, stale for 600 s more, and usable on error for 3600 s past fresh.
const SATURDAY_20_00: &str = "2026-11-21T20:00:00+08:00";

/// Asks the simulator directly (with the upstream token): what the upstream says.
async fn from_sim(env: &Env, target: &str) -> (u16, Bytes) {
    let r = env
        .client
        .get(format!("{}{target}", env.sim.base_url()))
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap())
}

/// GET through the proxy with no credentials but `headers`.
async fn get_as(env: &Env, target: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = env.client.get(env.url(target));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

// ---------------------------------------------------------------------------------
// 2. Bodies are relayed, not judged by a strict parser.
// ---------------------------------------------------------------------------------

/// The heat map, the ETF list and the fund screener carry raw control characters
/// inside strings upstream: relayed byte for byte, cached, then a HIT.
#[tokio::test]
async fn bodies_that_are_not_strict_json_are_relayed_byte_for_byte_then_hit() {
    let env = support::start().await;
    env.sim.set_dirty_bodies(true);
    for target in ["/market/hotmap", "/fund/all-etf-list", "/fund/selection"] {
        let (status, upstream) = from_sim(&env, target).await;
        assert_eq!(status, 200);
        assert!(
            serde_json::from_slice::<Value>(&upstream).is_err(),
            "{target}: the simulator's body should not be strict JSON"
        );
        let first = env.get(target).await;
        assert_eq!(first.status(), 200, "{target}");
        assert_eq!(header(&first, "x-cache"), "MISS");
        assert_eq!(first.bytes().await.unwrap(), upstream, "{target}");
        let again = env.get(target).await;
        assert_eq!(header(&again, "x-cache"), "HIT", "{target}");
        assert_eq!(again.bytes().await.unwrap(), upstream, "{target}");
    }
    let upstream = env.proxy.state().upstream();
    assert_eq!(
        upstream
            .counters()
            .outcome_count(UpstreamOutcome::InvalidBody),
        0
    );
    assert_eq!(upstream.counters().outcome_count(UpstreamOutcome::Ok), 3);
}

// ---------------------------------------------------------------------------------
// 3. 200 + success:false is an upstream failure.
// ---------------------------------------------------------------------------------

/// When the upstream turns to `200 + success:false`, a stale answer inside its
/// stale-if-error window is served; without one the upstream's answer is relayed
/// exactly (status and body) and never cached; metrics count it on its own.
#[tokio::test]
async fn a_reported_failure_is_hidden_by_a_stale_answer_else_relayed_uncached() {
    let clock = support::clock_at(SATURDAY_20_00);
    let start = clock.now();
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let good = env.get("/news/overview").await.bytes().await.unwrap();

    // Past the fresh (300 s) and stale (600 s) windows, inside the error window.
    clock.set(start + chrono::Duration::seconds(1_000));
    env.sim.fail_path("/news/overview", "socket hang up");
    let r = env.get("/news/overview").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-cache"), "STALE");
    assert!(
        header(&r, "cache-status").ends_with("; detail=stale-if-error"),
        "{}",
        header(&r, "cache-status")
    );
    assert_eq!(r.bytes().await.unwrap(), good);
    assert_eq!(env.sim.hits("/news/overview"), 2, "the upstream was asked");

    // Nothing cached: the upstream's own answer, exactly, every time.
    let failing = "/fund/detail/159915";
    env.sim.fail_path(failing, "socket hang up");
    let (status, upstream) = from_sim(&env, failing).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&upstream).unwrap();
    assert_eq!(
        (v["success"].clone(), v["message"].clone()),
        (false.into(), "socket hang up".into())
    );
    let before = env.sim.hits("/fund/detail/{code}");
    for _ in 1..=2 {
        let r = env.get("/fund/detail/159915").await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "cache-control"), "no-store");
        assert_eq!(r.bytes().await.unwrap(), upstream);
    }
    // The first request asked; the second got the same failure at once, the key
    // being held back for its backoff (tests/protection.rs), never from the cache.
    assert_eq!(env.sim.hits("/fund/detail/{code}"), before + 1);
    assert!(
        env.proxy
            .state()
            .cache()
            .store()
            .keys()
            .iter()
            .all(|k| k != failing)
    );
    let upstream = env.proxy.state().upstream();
    assert_eq!(
        upstream.counters().outcome_count(UpstreamOutcome::Reported),
        2
    );
    assert_eq!(UpstreamOutcome::Reported.as_str(), "reported_failure");

    // Healed: the key's one retry (at the end of its backoff) fills it.
    env.sim.heal_path(failing);
    let healed = async {
        loop {
            let r = env.get("/fund/detail/159915").await;
            if r.json::<Value>().await.unwrap()["success"] == true {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), healed)
        .await
        .expect("the retry after the backoff filled the key");
}

// ---------------------------------------------------------------------------------
// 4. The three auth forms.
// ---------------------------------------------------------------------------------

/// `x-api-key` as a header or a query parameter authenticates like a bearer token;
/// the query form is never forwarded upstream and never part of a cache key.
#[tokio::test]
async fn x_api_key_in_header_or_query_authenticates_and_is_never_forwarded_or_keyed() {
    let env = support::start().await;
    env.sim.clear_raw_requests();

    let by_header = get_as(&env, "/stock/detail/600519", &[("x-api-key", TOKEN)]).await;
    assert_eq!(by_header.status(), 200);
    assert_eq!(header(&by_header, "x-cache"), "MISS");
    let by_query = get_as(
        &env,
        &format!("/stock/detail/600519?x-api-key={TOKEN}"),
        &[],
    )
    .await;
    assert_eq!(by_query.status(), 200);
    assert_eq!(header(&by_query, "x-cache"), "HIT", "the key is not keyed");
    let kline = format!("/stock/kline?x-api-key={TOKEN}&code=600519&period=week");
    assert_eq!(get_as(&env, &kline, &[]).await.status(), 200);
    let by_bearer = env.get("/stock/kline?code=600519&period=week").await;
    assert_eq!(header(&by_bearer, "x-cache"), "HIT");

    let forwarded = env.sim.raw_requests();
    assert_eq!(forwarded.len(), 2, "{forwarded:?}");
    assert!(
        forwarded
            .iter()
            .all(|uri| !uri.contains("x-api-key") && !uri.contains(TOKEN)),
        "{forwarded:?}"
    );

    for (target, headers) in [
        ("/stock/detail/600519", vec![("x-api-key", "wrong")]),
        ("/stock/detail/600519?x-api-key=wrong", vec![]),
        // The first form present decides: a wrong bearer is not rescued.
        (
            &*format!("/stock/detail/600519?x-api-key={TOKEN}"),
            vec![("authorization", "Bearer wrong")],
        ),
    ] {
        let (status, code, _) = error_of(get_as(&env, target, &headers).await).await;
        assert_eq!((status, code.as_str()), (401, "unauthorized"), "{target}");
    }
}

// ---------------------------------------------------------------------------------
// 5. Errors in the real envelope.
// ---------------------------------------------------------------------------------

/// 400, 401, 404, 405 and 429 are all `{"success":false,"data":null,"message":..,
/// "error":{..}}` (checked by `error_of`), with the message clients of the real
/// API read.
#[tokio::test]
async fn every_error_mdproxy_makes_is_in_the_real_envelope() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.limits.client_rps = 1;
            c.limits.client_burst = 3;
        },
        Some(support::saturday()),
    )
    .await;
    let r = env.get("/stock/kline?code=600519&period=hour").await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "success": false,
            "data": null,
            "message": "period must be one of 1m, 5m, 15m, 30m, 60m, day, week, month",
            "error": {
                "code": "invalid_parameter",
                "message": "period must be one of 1m, 5m, 15m, 30m, 60m, day, week, month",
                "param": "period",
            },
        })
    );
    let cases = [
        (
            get_as(&env, "/market/indices", &[]).await,
            401,
            "unauthorized",
        ),
        (env.get("/nope").await, 404, "not_found"),
        (
            env.client
                .post(env.url("/stock/list"))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap(),
            405,
            "method_not_allowed",
        ),
    ];
    for (response, status, code) in cases {
        let (got_status, got_code, _) = error_of(response).await;
        assert_eq!((got_status, got_code.as_str()), (status, code));
    }
    // The three above spent the burst; the bucket refills one a second.
    let mut limited = None;
    for _ in 0..5 {
        let r = env.get("/market/indices").await;
        if r.status() == 429 {
            limited = Some(r);
            break;
        }
    }
    let (status, code, _) = error_of(limited.expect("a 429 within five requests")).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
}

// ---------------------------------------------------------------------------------
// 6. The stream on the real quote shape.
// ---------------------------------------------------------------------------------

/// The stream delivers the upstream's `data.diff` rows, unchanged, for exactly the
/// subscriber's codes (asked with and without exchange suffix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_delivers_the_real_diff_rows_for_the_subscribers_codes() {
    let env = support::start().await;
    let (_, body) = from_sim(&env, "/stock/list?codes=600519,000001").await;
    let upstream: Value = serde_json::from_slice(&body).unwrap();
    let expected: BTreeMap<String, Value> = upstream["data"]["diff"]
        .as_array()
        .expect("the upstream answers {total, diff}")
        .iter()
        .map(|row| (row["code"].as_str().unwrap().to_owned(), row.clone()))
        .collect();
    assert_eq!(expected.len(), 2);

    let r = env
        .get("/stock/indicator/realtime/sse?codes=600519,000001.SZ")
        .await;
    assert_eq!(r.status(), 200);
    let mut reader = SseReader::new(r);
    let mut seen = BTreeMap::new();
    for _ in 0..10 {
        if seen.len() == expected.len() {
            break;
        }
        match reader.next_or_end(Duration::from_secs(10)).await {
            Next::Event(e) if e.event == "quote" => {
                for row in e.quotes() {
                    seen.insert(row["code"].as_str().unwrap().to_owned(), row);
                }
            }
            Next::Event(_) => {}
            other => panic!("the stream stopped: {other:?}"),
        }
    }
    assert_eq!(seen, expected, "the upstream's rows, unchanged");
}

// ---------------------------------------------------------------------------------
// 7. The newer documented parameters.
// ---------------------------------------------------------------------------------

/// `fqt=after` (and `post`, its synonym: one cache entry, forwarded as `after`),
/// `from`/`to` on the stock K-line, the shareholder list's paging and filters and the
/// ten-year performance's sort column are answered 200 and forwarded.
#[tokio::test]
async fn the_newer_documented_parameters_are_answered_and_forwarded() {
    let env = support::start().await;
    env.sim.clear_raw_requests();
    let range = "from=2024-01-02&to=2024-03-29";
    let after = env
        .get(&format!("/stock/kline?code=600519&fqt=after&{range}"))
        .await;
    assert_eq!(after.status(), 200);
    assert_eq!(header(&after, "x-cache"), "MISS");
    // The range holds: only bars inside it come back.
    let bars: Value = after.json().await.unwrap();
    let bars = bars["data"]["klines"].as_array().expect("klines").clone();
    assert!(
        bars.len() > 40,
        "about a quarter of trading days: {}",
        bars.len()
    );
    for bar in &bars {
        let day = &bar.as_str().unwrap()[..10];
        assert!(("2024-01-02"..="2024-03-29").contains(&day), "{day}");
    }
    let post = env
        .get(&format!("/stock/kline?code=600519.SH&{range}&fqt=post"))
        .await;
    assert_eq!(header(&post, "x-cache"), "HIT", "post is after");

    for target in [
        "/fund/kline?code=510300&fqt=after".to_owned(),
        "/stock/shareholder/list".to_owned(),
        "/stock/shareholder/list?type=top10Float&page=2&pageSize=20&holdNumChange=%E5%A2%9E%E5%8A%A0"
            .to_owned(),
        "/stock/performance/ten-years?industryName=%E9%93%B6%E8%A1%8C&year=2023&sortColumn=PARENT_NETPROFIT"
            .to_owned(),
    ] {
        let r = env.get(&target).await;
        assert_eq!(r.status(), 200, "{target}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["success"], true, "{target}: {v}");
    }
    let forwarded = env.sim.raw_requests().join("\n");
    for part in [
        "/stock/kline?code=600519&period=day&fqt=after&from=2024-01-02&to=2024-03-29",
        "/fund/kline?code=510300&period=day&fqt=after",
        "type=top10Float&page=2&pageSize=20&holdNumChange=",
        "sortColumn=PARENT_NETPROFIT",
    ] {
        assert!(forwarded.contains(part), "{part} not in\n{forwarded}");
    }

    let (status, code, param) = error_of(
        env.get("/stock/kline?code=600519&from=2024-03-29&to=2024-01-02")
            .await,
    )
    .await;
    assert_eq!(
        (status, code.as_str(), param.as_deref()),
        (400, "invalid_parameter", Some("to"))
    );
}

// ---------------------------------------------------------------------------------
// 8. Pass-through.
// ---------------------------------------------------------------------------------

/// Off (the default), the contract stays strict: 404 for a path the catalogue does
/// not know, 400 for a parameter it does not know.
#[tokio::test]
async fn passthrough_off_keeps_the_contract_strict() {
    let env = support::start().await;
    let (status, code, _) = error_of(env.get("/market/sector-flow/history").await).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let (status, code, param) = error_of(env.get("/stock/list?codes=600519&fields=f2").await).await;
    assert_eq!(
        (status, code.as_str(), param.as_deref()),
        (400, "unknown_parameter", Some("fields"))
    );
    assert_eq!(env.sim.raw_count(), 0, "nothing reached the upstream");
}

/// On, unknown paths and unknown parameters are authenticated, forwarded once,
/// cached under the configured class with a canonical key (sorted, credentials
/// removed), and counted as `passthrough`, never by raw path.
#[tokio::test]
async fn passthrough_on_forwards_caches_and_counts_under_one_label() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.passthrough.enabled = true;
            c.admin.listen = "127.0.0.1:0".into();
        },
        Some(support::saturday()),
    )
    .await;
    // A route the upstream added after its docs, and a parameter it added to a
    // documented one.
    env.sim.serve_undocumented("/market/board-heat");
    env.sim.serve_undocumented("/stock/list");
    env.sim.clear_raw_requests();
    let target = "/market/board-heat?dimension=region";
    let first = env.get(target).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-cache"), "MISS");
    let body = first.bytes().await.unwrap();
    assert_eq!(body, from_sim(&env, target).await.1);
    let again = get_as(
        &env,
        &format!("/market/board-heat?_=17&x-api-key={TOKEN}&dimension=region"),
        &[],
    )
    .await;
    assert_eq!(header(&again, "x-cache"), "HIT", "one canonical key");
    assert_eq!(again.bytes().await.unwrap(), body);

    let extra = env.get("/stock/list?fields=f2&codes=600519").await;
    assert_eq!(extra.status(), 200);
    let forwarded = env.sim.raw_requests();
    assert_eq!(
        forwarded,
        [
            "/api/v1/market/board-heat?dimension=region",
            "/api/v1/market/board-heat?dimension=region",
            "/api/v1/stock/list?codes=600519&fields=f2",
        ],
        "one request each (the second one is this test's own, to the simulator)"
    );

    // Unauthenticated, too long, a path that could leave /api/v1, another method.
    let (status, ..) = error_of(get_as(&env, target, &[]).await).await;
    assert_eq!(status, 401);
    let long = format!("/market/x?q={}", "a".repeat(3_000));
    let (status, code, _) = error_of(env.get(&long).await).await;
    assert_eq!((status, code.as_str()), (414, "uri_too_long"));
    let escaped = env.raw("GET", "/market/%2e%2e/%2e%2e/admin", &[]).await;
    assert_eq!(escaped.status, 404);
    let post = env
        .client
        .post(env.url(target))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
    // The stream is never passed through.
    let (status, ..) = error_of(
        env.get("/stock/indicator/realtime/sse?codes=600519&fields=f2")
            .await,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        env.sim.raw_requests().len(),
        3,
        "none of those reached the upstream"
    );

    let stats = env.proxy.state().requests();
    let id = catalog().passthrough().id;
    assert_eq!(stats.served_count(id, CacheStatus::Miss), 2);
    assert_eq!(stats.served_count(id, CacheStatus::Hit), 1);
    let admin = env.proxy.admin_addr.unwrap();
    let metrics = env.text(&format!("http://{admin}/metrics")).await;
    assert!(
        metrics.contains(r#"mdproxy_responses_total{endpoint="passthrough",cache_status="HIT"} 1"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains("board-heat"),
        "never a raw path in metrics"
    );
}
