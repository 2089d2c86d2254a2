//! The simulated upstream's own contract: its three key forms, its error envelopes,
//! determinism, realistic sizes, the documented parameters, the newer routes, its
//! counters over HTTP, fault switches (500s, failing paths, invalid JSON bodies), and
//! its quote stream. The shapes themselves are `shapes.rs`'s.

use std::time::Duration;

use mdproxy_sim::SimHandle;
use mdproxy_testkit::sse::SseReader;

/// The key every simulator here requires.
const UPSTREAM_TOKEN: &str = "upstream-secret-4f9a";

/// What the tests share: testkit's helpers and the simulator's test set-up.
mod support {
    pub use mdproxy_testkit::clock::saturday;
    pub use mdproxy_testkit::http::{client, header, json};

    /// A simulator config on an ephemeral port with the test key, quotes every 100 ms.
    pub fn sim_config() -> mdproxy_sim::SimConfig {
        mdproxy_sim::SimConfig {
            listen: "127.0.0.1:0".into(),
            token: super::UPSTREAM_TOKEN.into(),
            stream_interval_ms: 100,
            ..mdproxy_sim::SimConfig::default()
        }
    }
}

/// GET `target` (relative to `/api/v1`) from `sim` with its key: the status and the
/// JSON body.
async fn sim_json(
    sim: &SimHandle,
    client: &reqwest::Client,
    target: &str,
) -> (u16, serde_json::Value) {
    mdproxy_testkit::http::get_json(
        client,
        &format!("{}{target}", sim.base_url()),
        UPSTREAM_TOKEN,
    )
    .await
}

/// A simulator on a Saturday clock: its data never depends on the real date.
async fn sim() -> (mdproxy_sim::SimHandle, reqwest::Client) {
    let sim = mdproxy_sim::start(&support::sim_config(), support::saturday())
        .await
        .unwrap();
    (sim, support::client())
}

/// GET `target` from the simulator with its token.
fn get(
    sim: &mdproxy_sim::SimHandle,
    client: &reqwest::Client,
    target: &str,
) -> impl Future<Output = reqwest::Result<reqwest::Response>> + use<> {
    client
        .get(format!("{}{target}", sim.base_url()))
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
}

/// The simulator takes its key in the three documented forms; without it, 401 in the
/// upstream's envelope.
#[tokio::test]
async fn simulator_takes_its_key_in_three_forms() {
    let (sim, client) = sim().await;
    let url = format!("{}/market/indices", sim.base_url());
    let refused = client.get(&url).bearer_auth("nope").send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({ "success": false, "data": null, "message": "Unauthorized" })
    );
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let forms = [
        client.get(&url).bearer_auth(UPSTREAM_TOKEN),
        client.get(&url).header("x-api-key", UPSTREAM_TOKEN),
        client.get(format!("{url}?x-api-key={UPSTREAM_TOKEN}")),
    ];
    for form in forms {
        assert_eq!(form.send().await.unwrap().status(), 200);
    }
    // An empty configured key accepts every request.
    let open = mdproxy_sim::start(
        &mdproxy_sim::SimConfig {
            token: String::new(),
            ..support::sim_config()
        },
        support::saturday(),
    )
    .await
    .unwrap();
    let url = format!("{}/market/indices", open.base_url());
    assert_eq!(client.get(url).send().await.unwrap().status(), 200);
}

/// Unknown paths, wrong methods, missing parameters and unknown codes answer in the
/// envelope `{success: false, data: null, message}` with NestJS's texts.
#[tokio::test]
async fn simulator_refuses_in_its_envelope() {
    let (sim, client) = sim().await;
    let envelope =
        |message: &str| serde_json::json!({ "success": false, "data": null, "message": message });
    let cases = [
        ("/nope?x=1", 404, "Cannot GET /api/v1/nope?x=1"),
        ("/stock/kline?period=day", 400, "Bad Request Exception"),
        (
            "/stock/kline?code=000001&fqt=qfq",
            400,
            "Bad Request Exception",
        ),
        (
            "/stock/shareholder/research/000001",
            400,
            "Bad Request Exception",
        ),
        ("/stock/detail/605999", 404, "Stock 605999 not found"),
        ("/fund/kline?code=599999", 404, "Fund 599999 not found"),
    ];
    for (target, status, message) in cases {
        assert_eq!(
            sim_json(&sim, &client, target).await,
            (status, envelope(message)),
            "{target}"
        );
    }
    let post = client
        .post(format!("{}/news/overview", sim.base_url()))
        .bearer_auth(UPSTREAM_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(support::header(&post, "allow"), "GET, HEAD");
    // Codes come with their suffix in any case; a parameter the docs do not list,
    // a documented one missing, a value outside its enum, a code form the docs do
    // not list are refused, as the upstream refuses them.
    let (status, v) = sim_json(&sim, &client, "/stock/detail/600519.sh").await;
    assert_eq!((status, v["data"]["code"].as_str()), (200, Some("600519")));
    assert_eq!(v["data"]["marketId"], 1);
    for refused in [
        "/stock/detail/600519?foo=bar",
        "/stock/list",
        "/stock/kline?code=600519&period=2m",
        "/stock/detail/SH600519",
        "/stock/kline?code=sh.600519",
        "/market/trading-calendar?market=HK&from=2024-01-01&to=2024-12-31",
        "/news/topic-subject?pageSize=5",
    ] {
        let (status, v) = sim_json(&sim, &client, refused).await;
        assert_eq!(
            (status, v["message"].as_str()),
            (400, Some("Bad Request Exception")),
            "{refused}"
        );
    }
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
    assert_eq!(v["data"]["dktotal"], rows.len());
    assert!(a.len() > 500_000, "{} bytes", a.len());
    let json = |t: &'static str| async move {
        get(t)
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    };
    assert!(
        json("/market/hotmap").await["data"]["data"]
            .as_array()
            .unwrap()
            .len()
            > 5_000
    );
    let etfs = json("/fund/all-etf-list").await;
    assert!(etfs["data"]["total"].as_u64().unwrap() >= 1_000);
    assert_eq!(
        etfs["data"]["diff"].as_array().unwrap().len(),
        etfs["data"]["total"]
    );
    let market = json("/stock/screener/universe?pageSize=500").await;
    assert!(
        market["data"]["total"].as_u64().unwrap() > 5_000,
        "the whole market"
    );
    assert_eq!(market["data"]["items"].as_array().unwrap().len(), 500);
    let page1 = json("/macro/cpi?page=1&pageSize=20").await;
    let page2 = json("/macro/cpi?page=2&pageSize=20").await;
    assert_ne!(
        page1["data"]["data"][0], page2["data"]["data"][0],
        "paged tables page"
    );
    let count = page1["data"]["count"].as_u64().unwrap();
    assert!(count > 200, "monthly since 2008: {count}");
    assert_eq!(page1["data"]["pages"], count.div_ceil(20));
    let head = json("/news/feed").await;
    let cursor = head["data"]["nextCursor"].as_str().unwrap().to_owned();
    let older: serde_json::Value = get(&format!("/news/feed?cursor={cursor}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(
        head["data"]["items"][0]["id"], older["data"]["items"][0]["id"],
        "the cursor moves"
    );
}

/// K-lines take `fqt` and (the stock's) a `from`/`to` range, and minute periods; the
/// fund's K-line has no range in the docs and answers its whole history.
#[tokio::test]
async fn kline_takes_adjustment_and_a_date_range() {
    let (sim, client) = sim().await;
    let klines = |target: &'static str| {
        let (sim, client) = (&sim, &client);
        async move {
            let (status, v) = sim_json(sim, client, target).await;
            assert_eq!(status, 200, "{target}");
            v["data"]["klines"].as_array().unwrap().clone()
        }
    };
    let range = klines("/stock/kline?code=600519&from=2024-01-01&to=2024-01-31").await;
    assert!((18..=23).contains(&range.len()), "{}", range.len());
    assert!(
        range
            .iter()
            .all(|r| r.as_str().unwrap().starts_with("2024-01-"))
    );
    let after = klines("/stock/kline?code=600519&fqt=after&to=2024-01-31").await;
    let again = klines("/stock/kline?code=600519&fqt=after&to=2024-01-31").await;
    let pre = klines("/stock/kline?code=600519&fqt=pre&to=2024-01-31").await;
    assert_eq!(after, again);
    assert_ne!(after, pre);
    // Five-minute bars of one trading day: 24 in the morning, 24 in the afternoon.
    let bars = klines("/stock/kline?code=600519&period=5m&from=2026-03-02&to=2026-03-02").await;
    assert_eq!(bars.len(), 48);
    assert!(bars[0].as_str().unwrap().starts_with("2026-03-02 09:35,"));
    assert!(bars[47].as_str().unwrap().starts_with("2026-03-02 15:00,"));
    // Minute bars are kept for about a quarter: a day two years back has none.
    let gone = klines("/stock/kline?code=600519&period=5m&from=2024-01-02&to=2024-01-02").await;
    assert!(gone.is_empty(), "{}", gone.len());
    let hk = klines("/stock/kline?code=00700&period=week&from=2025-01-01&to=2025-12-31").await;
    assert!((50..=53).contains(&hk.len()), "{}", hk.len());
    let weeks = klines("/fund/kline?code=159915&period=week").await;
    assert!(weeks.len() > 200, "{}", weeks.len());
    let open = weeks[0].as_str().unwrap().split(',').nth(1).unwrap();
    assert_eq!(
        open.split('.').nth(1).unwrap().len(),
        3,
        "funds price to 0.001"
    );
}

/// `/stock/shareholder/list` pages the whole market without parameters and filters
/// by holder code, change type and report date.
#[tokio::test]
async fn shareholder_list_pages_the_whole_market() {
    let (sim, client) = sim().await;
    let (_, all) = sim_json(&sim, &client, "/stock/shareholder/list").await;
    let stocks = mdproxy_sim::universe::universe().stocks.len() as u64;
    assert_eq!(all["data"]["total"].as_u64(), Some(stocks * 10));
    assert_eq!(
        (
            all["data"]["page"].as_u64(),
            all["data"]["pageSize"].as_u64()
        ),
        (Some(1), Some(50))
    );
    assert_eq!(all["data"]["data"].as_array().unwrap().len(), 50);
    let (_, second) = sim_json(&sim, &client, "/stock/shareholder/list?page=2&pageSize=50").await;
    assert_ne!(all["data"]["data"][0], second["data"]["data"][0]);
    let (_, one) = sim_json(
        &sim,
        &client,
        "/stock/shareholder/list?code=80010000&holdNumChange=%E5%A2%9E%E5%8A%A0&endDate=2024-06-30&pageSize=1000",
    )
    .await;
    let rows = one["data"]["data"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|r| r["holderName"] == "香港中央结算有限公司"
                && r["changeType"] == "增加"
                && r["endDate"] == "2024-06-30 00:00:00")
    );
    assert_eq!(one["data"]["total"].as_u64(), Some(rows.len() as u64));
}

/// Ten-year performance filters by industry and sorts by `sortColumn`, descending,
/// `PARENT_NI_3Q` by default.
#[tokio::test]
async fn ten_years_sorts_by_its_sort_column() {
    let (sim, client) = sim().await;
    for (query, column) in [("", "PARENT_NI_3Q"), ("&sortColumn=TOI_3Q", "TOI_3Q")] {
        let target = format!(
            "/stock/performance/ten-years?industryName=%E9%93%B6%E8%A1%8C&year=2023{query}"
        );
        let (status, v) = sim_json(&sim, &client, &target).await;
        assert_eq!(status, 200, "{target}");
        let rows = v["data"]["data"].as_array().unwrap();
        assert!(!rows.is_empty());
        assert!(
            rows.iter()
                .all(|r| r["INDUSTRY_NAME"] == "银行" && r["REPORT_YEAR"] == "2023")
        );
        let values: Vec<f64> = rows
            .iter()
            .map(|r| r[column].as_f64().unwrap_or(f64::NEG_INFINITY))
            .collect();
        assert!(
            values.windows(2).all(|w| w[0] >= w[1]),
            "{column} descending"
        );
    }
}

/// The newer routes outside the catalogue answer and are counted.
#[tokio::test]
async fn newer_routes_are_served_and_counted() {
    let (sim, client) = sim().await;
    let targets = [
        "/market/sector-flow/summary?dimension=region",
        "/market/sector-flow/list?dimension=concept&page=2&pageSize=10",
        "/market/stocks/realtime-list?market=cyb&page=1&pageSize=5",
        "/news/search?keyword=%E7%A7%91%E6%8A%80&page=0&pageSize=3",
        "/market/trading-calendar?market=CN_A&from=2026-03-01&to=2026-03-31",
    ];
    for target in targets {
        let (status, v) = sim_json(&sim, &client, target).await;
        assert_eq!(
            (status, &v["success"]),
            (200, &serde_json::json!(true)),
            "{target}: {v}"
        );
        assert_eq!(sim.hits_for(target), 1, "{target}");
    }
    assert_eq!(sim.hits("/market/sector-flow/list"), 1);
    let (_, list) = sim_json(&sim, &client, targets[1]).await;
    assert_eq!(list["data"]["diff"].as_array().unwrap().len(), 10);
    let (_, cyb) = sim_json(&sim, &client, targets[2]).await;
    assert!(
        cyb["data"]["diff"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["code"].as_str().unwrap().starts_with("30"))
    );
    let (_, days) = sim_json(&sim, &client, targets[4]).await;
    assert_eq!(days["data"].as_array().unwrap().len(), 31);
    assert_eq!(
        sim_json(
            &sim,
            &client,
            "/market/trading-calendar?market=US&from=2026-03-01&to=2026-03-31"
        )
        .await
        .0,
        400
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
    let stats = support::json(&format!("http://{}/_sim/stats", sim.addr)).await;
    assert_eq!(stats["endpoints"]["/market/indices"], 2);
    assert_eq!(stats["endpoints"]["/news/overview"], 2);
    assert_eq!(stats["total"], 4);
    assert_eq!(sim.hits("/market/indices"), 2);
    sim.set_latency(Duration::from_millis(300));
    let started = std::time::Instant::now();
    get("/news/mainline").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// A failing path answers the upstream's own way, HTTP 200 with `success: false`,
/// counts as served, and heals.
#[tokio::test]
async fn failing_paths_answer_200_with_success_false() {
    let (sim, client) = sim().await;
    sim.fail_path("/stock/kline", "Failed to fetch kline");
    sim.fail_path("/fund/detail/159915", "socket hang up");
    let failed = |message: &str| {
        (
            200,
            serde_json::json!({ "success": false, "data": null, "message": message }),
        )
    };
    let kline = "/stock/kline?code=000001&period=day&fqt=pre";
    assert_eq!(
        sim_json(&sim, &client, kline).await,
        failed("Failed to fetch kline")
    );
    assert_eq!(
        sim_json(&sim, &client, "/fund/detail/159915").await,
        failed("socket hang up")
    );
    let (status, v) = sim_json(&sim, &client, "/fund/detail/510300").await;
    assert_eq!(
        (status, &v["success"]),
        (200, &serde_json::json!(true)),
        "other paths answer"
    );
    assert_eq!(sim.hits("/stock/kline"), 1, "a failure still counts");
    assert_eq!(sim.hits_for(kline), 1);
    sim.heal_path("/stock/kline");
    assert_eq!(sim_json(&sim, &client, kline).await.1["success"], true);
    assert_eq!(
        sim_json(&sim, &client, "/fund/detail/159915").await.1["success"],
        false
    );
    sim.heal_all();
    assert_eq!(
        sim_json(&sim, &client, "/fund/detail/159915").await.1["success"],
        true
    );
}

/// With dirty bodies on, the three endpoints whose samples the docs could not parse
/// answer raw control characters inside strings: not strict JSON, still the success
/// envelope; every other endpoint stays clean.
#[tokio::test]
async fn dirty_bodies_are_not_strict_json() {
    let (sim, client) = sim().await;
    let body = |target: &'static str| {
        let (sim, client) = (&sim, &client);
        async move {
            get(sim, client, target)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
        }
    };
    for path in mdproxy_sim::DIRTY_PATHS {
        assert!(
            serde_json::from_slice::<serde_json::Value>(&body(path).await).is_ok(),
            "{path}"
        );
    }
    sim.set_dirty_bodies(true);
    for path in mdproxy_sim::DIRTY_PATHS {
        let dirty = body(path).await;
        assert!(
            serde_json::from_slice::<serde_json::Value>(&dirty).is_err(),
            "{path}"
        );
        assert!(dirty.contains(&b'\n') && dirty.contains(&1u8), "{path}");
        assert!(dirty.starts_with(b"{\"success\":true,\"data\":"), "{path}");
        assert!(dirty.ends_with(b"}"), "{path}");
    }
    assert!(serde_json::from_slice::<serde_json::Value>(&body("/stock/list").await).is_ok());
    sim.set_dirty_bodies(false);
    assert!(serde_json::from_slice::<serde_json::Value>(&body("/market/hotmap").await).is_ok());
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
    assert_eq!(kept.len(), mdproxy_sim::MAX_RAW);
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
    // Rows in the shape of `/stock/list`'s `diff`.
    assert_eq!(first.quotes()[0]["code"], "600519");
    assert_eq!(first.quotes()[0]["marketId"], 1);
    assert!(first.quotes()[0]["newPrice"].is_i64());
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

/// The simulated exchange keeps the real calendar and the markets their own hours:
/// the docs' own calendar row (2024-01-01 closed) and the 2026 Spring Festival are
/// holidays; the HK realtime lists and the HK screener hold HK listings; HK minute
/// bars follow Hong Kong's sessions (to 12:00, from 13:00 to 16:00) and US ones New
/// York's (09:30 to 16:00 there); the HK secid `116.00700` is the documented form of
/// `00700`; the parameterless earnings forecast is refused, as its documented sample
/// shows.
#[tokio::test]
async fn the_simulator_keeps_calendars_and_foreign_markets() {
    let (sim, client) = sim().await;
    let data = |target: &'static str| {
        let (sim, client) = (&sim, &client);
        async move {
            let (status, v) = sim_json(sim, client, target).await;
            assert_eq!(status, 200, "{target}: {v}");
            v["data"].clone()
        }
    };
    let days = data("/market/trading-calendar?market=CN_A&from=2024-01-01&to=2024-01-02").await;
    assert_eq!(
        days,
        serde_json::json!([
            { "market": "CN_A", "date": "2024-01-01", "isTradingDay": false, "sessionType": "closed" },
            { "market": "CN_A", "date": "2024-01-02", "isTradingDay": true, "sessionType": "full" },
        ])
    );
    let festival = data("/market/trading-calendar?market=CN_A&from=2026-02-16&to=2026-02-24").await;
    let open: Vec<bool> = festival
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["isTradingDay"].as_bool().unwrap())
        .collect();
    assert_eq!(
        open,
        [false, false, false, false, false, false, false, false, true]
    );
    // No bar on a holiday either.
    let bars = data("/stock/kline?code=600519&from=2026-02-13&to=2026-02-24").await;
    let dates: Vec<&str> = bars["klines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r.as_str().unwrap()[..10])
        .collect();
    assert!(
        !dates
            .iter()
            .any(|d| ("2026-02-16".."2026-02-24").contains(d)),
        "{dates:?}"
    );

    for (market, prefix) in [("hk", ""), ("hk_main", "0"), ("hk_gem", "08")] {
        let target = format!("/market/stocks/realtime-list?market={market}&pageSize=5");
        let (status, v) = sim_json(&sim, &client, &target).await;
        assert_eq!(status, 200, "{target}");
        let rows = v["data"]["diff"].as_array().unwrap();
        assert_eq!(rows.len(), 5, "{target}: {v}");
        for row in rows {
            let code = row["code"].as_str().unwrap();
            assert!(
                code.len() == 5 && code.starts_with(prefix),
                "{market}: {code}"
            );
            assert_eq!(row["marketId"], 116, "{market}");
        }
    }
    let hk = data("/stock/screener/universe?market=HK&pageSize=3").await;
    assert!(hk["total"].as_u64().unwrap() > 100, "{hk}");
    assert_eq!(hk["items"].as_array().unwrap().len(), 3);
    assert_eq!(hk["items"][0]["market"], "HK");

    let times = |rows: &serde_json::Value| -> Vec<String> {
        rows["klines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap()[11..16].to_owned())
            .collect()
    };
    let hk_bars =
        data("/stock/kline?code=116.00700&period=30m&from=2026-03-02&to=2026-03-02").await;
    assert_eq!(hk_bars["code"], "00700");
    let hk_times = times(&hk_bars);
    assert_eq!(hk_times.first().map(String::as_str), Some("10:00"));
    assert!(hk_times.contains(&"12:00".to_owned()), "{hk_times:?}");
    assert!(!hk_times.contains(&"12:30".to_owned()), "{hk_times:?}");
    assert_eq!(hk_times.last().map(String::as_str), Some("16:00"));
    let us_bars = data("/stock/kline?code=105.AAPL&period=30m&from=2026-03-02&to=2026-03-02").await;
    let us_times = times(&us_bars);
    assert_eq!(us_times.first().map(String::as_str), Some("10:00"));
    assert_eq!(us_times.last().map(String::as_str), Some("16:00"));
    assert_eq!(us_times.len(), 13, "{us_times:?}");

    let (status, v) = sim_json(&sim, &client, "/stock/earnings-forecast").await;
    assert_eq!(
        (status, v["message"].as_str()),
        (400, Some("Bad Request Exception"))
    );
    let (status, _) = sim_json(
        &sim,
        &client,
        "/stock/earnings-forecast?reportDate=2024-12-31",
    )
    .await;
    assert_eq!(status, 200);
}

/// The retired flow paths are not served: the docs removed them, so the simulator
/// answers them as the upstream answers any path it does not know.
#[tokio::test]
async fn the_retired_flow_paths_are_not_served() {
    let (sim, client) = sim().await;
    for target in ["/market/flow?type=1", "/market/flow/list?type=2"] {
        let (status, v) = sim_json(&sim, &client, target).await;
        assert_eq!(status, 404, "{target}: {v}");
    }
}

/// The simulator's trading calendar covers every year the published list does,
/// 2027 included, and agrees with the proxy's calendar day by day (both read
/// `mdproxy_market::holidays`): New Year's Day 2027 is closed.
#[tokio::test]
async fn the_calendar_runs_through_2027_as_the_proxys_does() {
    let (sim, client) = sim().await;
    let proxy = mdproxy_market::Calendar::builtin();
    for year in mdproxy_market::holidays::YEARS {
        let (status, days) = sim_json(
            &sim,
            &client,
            &format!("/market/trading-calendar?market=CN_A&from={year}-01-01&to={year}-12-31"),
        )
        .await;
        assert_eq!(status, 200, "{days}");
        let days = days["data"].as_array().expect("a list of days");
        assert!(days.len() >= 365, "{year}: {}", days.len());
        for day in days {
            let date: chrono::NaiveDate = day["date"].as_str().unwrap().parse().unwrap();
            assert_eq!(
                day["isTradingDay"].as_bool(),
                Some(proxy.is_trading_day(date)),
                "{date}"
            );
        }
    }
    let (_, new_year) = sim_json(
        &sim,
        &client,
        "/market/trading-calendar?market=CN_A&from=2027-01-01&to=2027-01-01",
    )
    .await;
    assert_eq!(new_year["data"][0]["isTradingDay"], false, "{new_year}");
}
