//! The simulated upstream's own contract: its token, determinism, realistic sizes,
//! its counters over HTTP, fault switches, and its quote stream.

mod support;

use std::time::Duration;

use support::{SseReader, UPSTREAM_TOKEN};

/// A simulator on a Saturday clock: its data never depends on the real date.
async fn sim() -> (mdproxy::sim::SimHandle, reqwest::Client) {
    let sim = mdproxy::sim::start(&support::sim_config(), support::saturday())
        .await
        .unwrap();
    (sim, support::client())
}

/// GET `target` from the simulator with its token.
fn get(
    sim: &mdproxy::sim::SimHandle,
    client: &reqwest::Client,
    target: &str,
) -> impl Future<Output = reqwest::Result<reqwest::Response>> + use<> {
    client
        .get(format!("{}{target}", sim.base_url()))
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
}

/// The simulator checks its own bearer token like the real upstream.
#[tokio::test]
async fn simulator_requires_its_token() {
    let (sim, client) = sim().await;
    let url = format!("{}/market/indices", sim.base_url());
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    assert_eq!(
        client
            .get(&url)
            .bearer_auth("nope")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        client
            .get(&url)
            .bearer_auth(UPSTREAM_TOKEN)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

/// Same request, same day, same answer; the big data sets have realistic sizes.
#[tokio::test]
async fn simulator_is_deterministic_and_realistic() {
    let (sim, client) = sim().await;
    let get = |t: &str| get(&sim, &client, t);
    let a = get("/stock/kline?code=000001.SZ")
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let b = get("/stock/kline?code=000001.SZ")
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(a, b);
    let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
    let rows = v["data"]["klines"].as_array().unwrap();
    assert!(rows.len() > 8_000, "daily bars since 1991: {}", rows.len());
    assert!(a.len() > 500_000, "{} bytes", a.len());
    let hotmap: serde_json::Value = get("/market/hotmap").await.unwrap().json().await.unwrap();
    assert!(hotmap["data"]["data"].as_array().unwrap().len() > 5_000);
    let etfs: serde_json::Value = get("/fund/all-etf-list")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(etfs["data"]["total"].as_u64().unwrap() >= 1_000);
    let page1: serde_json::Value = get("/macro/cpi?page=1&pageSize=20")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let page2: serde_json::Value = get("/macro/cpi?page=2&pageSize=20")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(
        page1["data"]["list"][0], page2["data"]["list"][0],
        "paged tables page"
    );
    assert!(
        page1["data"]["total"].as_u64().unwrap() > 240,
        "monthly since 2005"
    );
    let head: serde_json::Value = get("/news/feed").await.unwrap().json().await.unwrap();
    let cursor = head["data"]["nextCursor"].as_str().unwrap().to_owned();
    let older: serde_json::Value = get(&format!("/news/feed?cursor={cursor}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(
        head["data"]["list"][0]["id"], older["data"]["list"][0]["id"],
        "the cursor moves"
    );
}

/// Counters per endpoint over HTTP outside /api/v1, and the fault switches.
#[tokio::test]
async fn simulator_counts_and_fails_on_demand() {
    let (sim, client) = sim().await;
    let get = |t: &str| get(&sim, &client, t);
    get("/market/indices").await.unwrap();
    get("/market/indices").await.unwrap();
    sim.fail_next(1);
    assert_eq!(get("/news/overview").await.unwrap().status(), 500);
    assert_eq!(get("/news/overview").await.unwrap().status(), 200);
    let stats: serde_json::Value = client
        .get(format!("http://{}/_sim/stats", sim.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["endpoints"]["/market/indices"], 2);
    assert_eq!(stats["endpoints"]["/news/overview"], 2);
    assert_eq!(stats["total"], 4);
    assert_eq!(sim.hits("/market/indices"), 2);
    sim.set_latency(Duration::from_millis(300));
    let started = std::time::Instant::now();
    get("/news/mainline").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// The raw recorder sees every request before any check (no token, unknown path,
/// bad parameter, wrong method, stats), keeps the URI as sent, keeps only the latest
/// 1,000, and clears.
#[tokio::test]
async fn simulator_records_raw_requests_before_its_checks() {
    let (sim, client) = sim().await;
    let base = sim.base_url();
    assert_eq!(sim.raw_count(), 0);
    client
        .get(format!("{base}/market/indices"))
        .send()
        .await
        .unwrap(); // no token: 401
    get(&sim, &client, "/nope?x=1").await.unwrap(); // 404
    get(&sim, &client, "/stock/kline?code=600519&period=year")
        .await
        .unwrap(); // 400
    client
        .post(format!("{base}/news/overview"))
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
        .await
        .unwrap(); // 405
    get(&sim, &client, "/stock/detail/600519.sh").await.unwrap(); // 200
    client
        .get(format!("http://{}/_sim/stats", sim.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(
        sim.total(),
        1,
        "only the valid request is counted as served"
    );
    assert_eq!(sim.raw_count(), 6);
    assert_eq!(
        sim.raw_requests(),
        [
            "/api/v1/market/indices",
            "/api/v1/nope?x=1",
            "/api/v1/stock/kline?code=600519&period=year",
            "/api/v1/news/overview",
            "/api/v1/stock/detail/600519.sh",
            "/_sim/stats",
        ]
    );
    sim.clear_raw_requests();
    assert_eq!(sim.raw_count(), 0);
    assert!(sim.raw_requests().is_empty());
    for i in 0..1_005 {
        get(&sim, &client, &format!("/nope/{i}")).await.unwrap();
    }
    assert_eq!(sim.raw_count(), 1_005);
    let kept = sim.raw_requests();
    assert_eq!(kept.len(), mdproxy::sim::MAX_RAW);
    assert_eq!(kept[0], "/api/v1/nope/5", "the oldest are dropped");
    assert_eq!(kept[999], "/api/v1/nope/1004");
}

/// The simulator's own stream pushes its codes, pz per event.
#[tokio::test]
async fn simulator_streams_quotes_pz_per_event() {
    let (sim, client) = sim().await;
    let r = client
        .get(format!(
            "{}/stock/indicator/realtime/sse?codes=600519,000001,300750&pz=2",
            sim.base_url()
        ))
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(support::header(&r, "content-type"), "text/event-stream");
    let mut r = SseReader::new(r);
    let first = r.next_quote(Duration::from_secs(5)).await.unwrap();
    let second = r.next_quote(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.quotes().len(), 2);
    assert_eq!(second.quotes().len(), 1);
    assert_eq!(first.id, second.id, "one push, split by pz");
}

/// Any feed cursor the contract accepts gets a page, also one older than the first
/// item or below zero (the schema-driven fuzzer found a cursor of zeros panicking).
#[tokio::test]
async fn simulator_answers_every_feed_cursor() {
    let (sim, client) = sim().await;
    for cursor in [
        "0",
        "5",
        "-7",
        "-9223372036854775808",
        "9223372036854775807",
    ] {
        let r = get(&sim, &client, &format!("/news/feed?cursor={cursor}"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "cursor {cursor}");
    }
}
