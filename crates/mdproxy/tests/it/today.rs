//! mdproxy as a drop-in for the real upstream as its documentation stands today
//! (docs/upstream-endpoints.json): every documented endpoint answered through `demo`
//! and through `serve`, the catalogue checked against the documented list, minute
//! K-lines, HK and typed codes, the documented defaults and required parameters,
//! per-endpoint upstream timeouts, the upstream-compatible error mode, pass-through
//! keys apart from the catalogue's, settled history, the refused download.

use crate::support;

use std::time::Duration;

use mdproxy_api::catalog::{INTEGER_BOUNDS, KeyRole, ParamKind, REFUSED, catalog};
use mdproxy_config::ErrorMode;
use serde_json::Value;
use support::{TOKEN, error_of, header};

/// The documented list, as the simulator also reads it.
const DOCS: &str = include_str!("../../../../docs/upstream-endpoints.json");

fn documented() -> Vec<Value> {
    serde_json::from_str(DOCS).expect("the documented list is JSON")
}

/// The target (relative to `/api/v1`) a client of the docs sends for `entry`: its
/// documented sample request, else the catalogue's example.
fn sample_target(entry: &Value) -> String {
    match entry["sample_request"].as_str() {
        Some(line) => line
            .strip_prefix("GET /api/v1")
            .expect("sample requests are GETs under /api/v1")
            .to_owned(),
        None => catalog()
            .by_path(entry["path"].as_str().unwrap())
            .expect("a documented GET endpoint")
            .example_target(),
    }
}

/// Percent-encodes what a sample request carries raw (Chinese text).
fn encoded(target: &str) -> String {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if query.is_empty() {
        return path.to_owned();
    }
    let pairs = form_urlencoded::parse(query.as_bytes());
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    format!("{path}?{query}")
}

// ---------------------------------------------------------------------------------
// The catalogue against the documented list.
// ---------------------------------------------------------------------------------

/// Documented values the catalogue refuses on purpose: the docs say the upstream
/// answers them 400.
const REFUSED_VALUES: &[(&str, &str, &str)] = &[
    ("/market/trading-calendar", "market", "HK"),
    ("/market/trading-calendar", "market", "US"),
];

/// Every documented GET endpoint is in the catalogue with the documented parameters
/// (names, places, required flags, defaults, enums, ranges), the one documented POST
/// is refused with a reason, and the catalogue has nothing the docs do not list.
#[test]
fn the_catalogue_is_the_documented_list() {
    let docs = documented();
    let mut seen = Vec::new();
    for entry in &docs {
        let path = entry["path"].as_str().unwrap();
        if entry["method"] == "POST" {
            assert!(
                REFUSED.iter().any(|(p, _)| *p == path),
                "{path}: a documented POST is refused with a reason"
            );
            continue;
        }
        let endpoint = catalog()
            .by_path(path)
            .unwrap_or_else(|| panic!("{path} is documented but not in the catalogue"));
        seen.push(path);
        for p in entry["params"].as_array().unwrap() {
            let name = p["name"].as_str().unwrap();
            if p["in"] == "path" {
                assert!(
                    endpoint.path_params.iter().any(|q| q.name == name),
                    "{path}: path parameter {name}"
                );
                continue;
            }
            let ours = endpoint
                .query_param(name)
                .unwrap_or_else(|| panic!("{path}: documented parameter {name} is missing"));
            assert_eq!(
                ours.required,
                p["required"].as_bool().unwrap(),
                "{path}: {name}'s required flag"
            );
            assert_eq!(
                ours.default,
                p["default"].as_str(),
                "{path}: {name}'s default"
            );
            if let Some(values) = p["enum"].as_array() {
                let ParamKind::Choice(accepted) = ours.kind else {
                    panic!("{path}: {name} is an enum in the docs");
                };
                for value in values.iter().map(|v| v.as_str().unwrap()) {
                    let refused = REFUSED_VALUES.contains(&(path, name, value));
                    assert_eq!(
                        accepted.contains(&value),
                        !refused,
                        "{path}: {name}={value}"
                    );
                }
                for value in accepted {
                    let documented = values.iter().any(|v| v == value);
                    let synonym = ours.synonyms.iter().any(|(s, _)| s == value);
                    assert!(
                        documented || synonym,
                        "{path}: {name}={value} is undocumented"
                    );
                }
            }
            if let Some(range) = p["range"].as_array() {
                let ParamKind::Int { min, max } = ours.kind else {
                    panic!("{path}: {name} has a documented range");
                };
                assert_eq!(
                    (min, max),
                    (range[0].as_i64().unwrap(), range[1].as_i64().unwrap()),
                    "{path}: {name}'s range"
                );
            }
            if let Err(why) = restricts_only_as_documented(ours, p) {
                panic!("{path}: {name}: {why}");
            }
        }
        for ours in endpoint.query {
            // The stream's `access_token` is an auth form EventSource needs, never
            // forwarded.
            if ours.role == KeyRole::Dropped && endpoint.streaming {
                continue;
            }
            assert!(
                entry["params"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["name"] == ours.name),
                "{path}: {} is not documented",
                ours.name
            );
        }
    }
    assert_eq!(
        seen.len(),
        catalog().len(),
        "nothing beyond the documented list"
    );
}

/// Whether the docs state `format` for a parameter (in its description or note).
fn states(p: &Value, format: &str) -> bool {
    ["description_zh", "note"]
        .iter()
        .any(|k| p[*k].as_str().is_some_and(|t| t.contains(format)))
}

/// `Ok` when the catalogue refuses no value of a query parameter that its
/// documentation allows, beyond the deliberate bounds the catalogue names: an enum
/// only where the docs give one (or a boolean), an integer range only where the docs
/// give one or one of [`INTEGER_BOUNDS`] where they give none, a date or period only
/// where the docs state its format, text (bounded in length) for every other string.
fn restricts_only_as_documented(
    ours: &mdproxy_api::catalog::Param,
    p: &Value,
) -> Result<(), String> {
    let documented = p["type"].as_str();
    let has_enum = p["enum"].is_array();
    match ours.kind {
        ParamKind::Choice(values) => {
            let boolean = documented == Some("boolean") && values == ["true", "false"];
            (has_enum || boolean)
                .then_some(())
                .ok_or_else(|| format!("an enum {values:?} the docs do not give"))
        }
        ParamKind::Int { min, max } => {
            let general = INTEGER_BOUNDS
                .iter()
                .any(|(lo, hi, _)| (*lo, *hi) == (min, max));
            let number = matches!(documented, Some("number") | None);
            if p["range"].is_array() || (number && general) {
                Ok(())
            } else if !number {
                Err(format!("an integer where the docs say {documented:?}"))
            } else {
                Err(format!("a range {min}..={max} the docs do not give"))
            }
        }
        ParamKind::Date => states(p, "YYYY-MM-DD")
            .then_some(())
            .ok_or_else(|| "a date format the docs do not state".to_owned()),
        ParamKind::Period => (states(p, "YYYYMM") && states(p, "YYYY-MM-DD"))
            .then_some(())
            .ok_or_else(|| "a period format the docs do not state".to_owned()),
        ParamKind::Code(_) | ParamKind::Codes(_) => (ours.name.starts_with("code")
            && documented == Some("string"))
        .then_some(())
        .ok_or_else(|| "a code rule on what the docs do not call a code".to_owned()),
        ParamKind::Text { .. } => Ok(()),
        other => Err(format!("{other:?} restricts what the docs leave open")),
    }
}

// ---------------------------------------------------------------------------------
// Every documented endpoint through demo and through serve.
// ---------------------------------------------------------------------------------

/// Reads lines of a child's stdout until one starts with `prefix`; the rest of it.
async fn line_after(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> String {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix(prefix) {
                return Some(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
        None
    })
    .await;
    found
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no line {prefix:?}"))
}

/// GETs every documented GET endpoint with its documented sample request from the
/// proxy at `base` and expects 200 with `success: true` (the stream: 200 and
/// `text/event-stream`), or the refusal the docs show for that very request (the
/// parameterless earnings forecast); the documented POST gets the clear refusal.
async fn walk(base: &str, token: &str) {
    let client = support::client();
    for entry in documented() {
        let path = entry["path"].as_str().unwrap();
        if entry["method"] == "POST" {
            let r = client
                .post(format!("{base}{path}"))
                .bearer_auth(token)
                .json(&serde_json::json!({ "url": "https://static.cninfo.com.cn/a.PDF" }))
                .send()
                .await
                .unwrap();
            let (status, code, _) = error_of(r).await;
            assert_eq!((status, code.as_str()), (501, "not_implemented"), "{path}");
            continue;
        }
        let target = encoded(&sample_target(&entry));
        let r = client
            .get(format!("{base}{target}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        if entry["example_response"]["message"] == "Bad Request Exception" {
            // The docs show the upstream refusing this very request: relayed.
            let body: Value = r.json().await.unwrap();
            assert_eq!(body["message"], "Bad Request Exception", "{target}: {body}");
            continue;
        }
        assert_eq!(r.status(), 200, "{target}");
        if path == mdproxy_api::catalog::STREAM_PATH {
            assert_eq!(header(&r, "content-type"), "text/event-stream", "{target}");
            continue;
        }
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["success"], true, "{target}: {body}");
    }
}

/// `mdproxy demo` answers every documented endpoint's documented sample request.
#[tokio::test]
async fn every_documented_endpoint_answers_through_demo() {
    let mut demo = support::DemoProcess::start(&[]).await;
    walk(&demo.base, "demo-token").await;
    demo.process.stop().await;
}

/// `mdproxy serve` in front of the simulator answers every documented endpoint's
/// documented sample request.
#[tokio::test]
async fn every_documented_endpoint_answers_through_serve() {
    use tokio::io::AsyncBufReadExt;
    let sim = support::sim_with_token("walk-upstream").await;
    let (dir, path) = support::serve_toml(
        "mdproxy-walk",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 0\n[auth]\ntokens = [\"walk-client\"]\n\
             [upstream]\nbase_url = \"{}\"\ntoken = \"walk-upstream\"\n[scheduler]\nenabled = false\n\
             [hub]\nsource = \"/stock/list\"\n",
            sim.base_url()
        ),
    );
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MDPROXY_") {
            child.env_remove(name);
        }
    }
    let mut child = child
        .args(["serve", "--log", "warn", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let base = line_after(&mut lines, "mdproxy serving ").await;
    walk(&base, "walk-client").await;
    child.kill().await.unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------
// K-lines and codes as the docs define them.
// ---------------------------------------------------------------------------------

/// Minute periods are answered; codes as people type them (`SH600519`, `600519.SH`,
/// `sh.600519`, `1.600519`) are one cache entry, forwarded as the docs write them
/// (the simulator refuses the prefix forms, as the docs do not list them); HK codes
/// go through as five digits.
#[tokio::test]
async fn minute_klines_hk_and_typed_codes() {
    let env = support::start().await;
    env.sim.clear_raw_requests();
    let first = env.get("/stock/kline?code=SH600519&period=5m").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-cache"), "MISS");
    let bars: Value = first.json().await.unwrap();
    let bar = bars["data"]["klines"][0].as_str().expect("minute bars");
    assert_eq!(
        bar.as_bytes()[13],
        b':',
        "a minute bar carries its time: {bar}"
    );
    for typed in ["600519.SH", "sh.600519", "1.600519", "600519"] {
        let r = env
            .get(&format!("/stock/kline?period=5m&code={typed}"))
            .await;
        assert_eq!(header(&r, "x-cache"), "HIT", "{typed}");
    }
    for typed in ["SZ000001", "sz000001", "000001.SZ", "0.000001"] {
        let r = env.get(&format!("/stock/detail/{typed}")).await;
        assert_eq!(r.status(), 200, "{typed}");
    }
    let hk = env.get("/stock/kline?code=0700.HK&period=day").await;
    assert_eq!(hk.status(), 200);
    let again = env.get("/stock/kline?code=HK00700").await;
    assert_eq!(header(&again, "x-cache"), "HIT");
    assert_eq!(
        env.sim.raw_requests(),
        [
            "/api/v1/stock/kline?code=600519&period=5m",
            "/api/v1/stock/detail/000001",
            "/api/v1/stock/kline?code=00700&period=day",
        ],
        "one request per key, in the documented forms"
    );
    // A code no rule accepts never reaches the upstream.
    let (status, code, param) = error_of(env.get("/stock/detail/00700").await).await;
    assert_eq!(
        (status, code.as_str(), param.as_deref()),
        (400, "invalid_parameter", Some("code"))
    );
    assert_eq!(env.sim.raw_requests().len(), 3);
}

/// An absent parameter and its documented default are one key; a documented
/// required parameter is enforced before anything reaches the upstream.
#[tokio::test]
async fn documented_defaults_and_required_parameters() {
    let env = support::start().await;
    env.sim.clear_raw_requests();
    for (bare, spelled) in [
        (
            "/fund/kline?code=510300",
            "/fund/kline?code=510300&period=day&fqt=pre",
        ),
        ("/news/headlines", "/news/headlines?page=0&pageSize=10"),
        ("/stock/selection", "/stock/selection?pageSize=50&page=1"),
        (
            "/stock/screener/universe",
            "/stock/screener/universe?market=CN_A",
        ),
    ] {
        let r = env.get(bare).await;
        assert_eq!(r.status(), 200, "{bare}");
        let r = env.get(spelled).await;
        assert_eq!(header(&r, "x-cache"), "HIT", "{spelled}");
    }
    assert_eq!(env.sim.raw_count(), 4);
    for (target, param) in [
        ("/stock/list", "codes"),
        ("/stock/search", "keyword"),
        ("/stock/news", "code"),
        ("/stock/performance/ten-years?year=2023", "industryName"),
        ("/market/trading-calendar?market=CN_A&to=2024-12-31", "from"),
        ("/stock/financial/snapshot/000001", "reportDate"),
        ("/news/topic-subject", "subjectKey or subjectId"),
    ] {
        let (status, code, got) = error_of(env.get(target).await).await;
        assert_eq!(
            (status, code.as_str(), got.as_deref()),
            (400, "missing_parameter", Some(param)),
            "{target}"
        );
    }
    let (status, _, param) = error_of(
        env.get("/market/trading-calendar?market=HK&from=2024-01-01&to=2024-12-31")
            .await,
    )
    .await;
    assert_eq!((status, param.as_deref()), (400, Some("market")));
    assert_eq!(
        env.sim.raw_count(),
        4,
        "no refused request reached the upstream"
    );
}

// ---------------------------------------------------------------------------------
// Per-endpoint upstream timeouts.
// ---------------------------------------------------------------------------------

/// With an upstream that takes 1.5 s: an endpoint of the standard timeout (0.5 s
/// here) answers 504, a K-line (long timeout, 5 s here) waits for its answer, and
/// coalesced K-line waiters wait with the one fill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn klines_wait_longer_than_the_rest() {
    let env = support::start_with(
        |s| s.latency_ms = 1_500,
        |c| {
            c.upstream.timeout_ms = 500;
            c.upstream.long_timeout_ms = 5_000;
        },
        Some(support::saturday()),
    )
    .await;
    let (status, code, _) = error_of(env.get("/stock/detail/600519").await).await;
    assert_eq!((status, code.as_str()), (504, "upstream_timeout"));
    let waiters = (0..3).map(|_| env.get("/stock/kline?code=600519&period=week"));
    let answers = futures_util::future::join_all(waiters).await;
    for r in answers {
        assert_eq!(r.status(), 200);
    }
    assert_eq!(env.sim.hits("/stock/kline"), 1, "one fill for the three");
    // An operator's per-endpoint timeout wins over the class of timeout.
    let mut config = env.proxy.state().snapshot().config.as_ref().clone();
    config
        .upstream
        .endpoint_timeouts_ms
        .insert("/stock/detail/{code}".into(), 5_000);
    env.proxy.reload(config).unwrap();
    assert_eq!(env.get("/stock/detail/000001").await.status(), 200);
}

// ---------------------------------------------------------------------------------
// The upstream-compatible error mode.
// ---------------------------------------------------------------------------------

/// `server.error_mode = "upstream"`: what mdproxy answers on the upstream's behalf
/// (timeout, failure) is HTTP 200 with `success: false` and the upstream's own
/// message for the endpoint, never cached; a client's own errors keep their status.
#[tokio::test]
async fn the_upstream_error_mode_answers_as_the_upstream_does() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.error_mode = ErrorMode::Upstream;
            c.upstream.timeout_ms = 300;
            c.upstream.long_timeout_ms = 300;
        },
        Some(support::saturday()),
    )
    .await;
    env.sim.set_hang(true);
    for (target, message, code) in [
        (
            "/stock/kline?code=600519",
            "Failed to fetch kline",
            "upstream_timeout",
        ),
        ("/stock/detail/600519", "socket hang up", "upstream_timeout"),
    ] {
        let r = env.get(target).await;
        assert_eq!(r.status(), 200, "{target}");
        assert_eq!(header(&r, "cache-control"), "no-store");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["success"], false);
        assert!(v["data"].is_null());
        assert_eq!(v["message"], message, "{target}");
        assert_eq!(v["error"]["code"], code, "{target}");
    }
    env.sim.set_hang(false);
    env.sim.fail_next(1);
    let r = env.get("/market/indices").await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["success"].clone(), v["error"]["code"].clone()),
        (false.into(), "upstream_error".into())
    );
    // The client's own errors keep their statuses.
    let unauthorized = env
        .client
        .get(env.url("/market/indices"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let (status, ..) = error_of(env.get("/stock/kline?code=600519&period=hour").await).await;
    assert_eq!(status, 400);
    // The upstream is back: answers are cached as usual (another key: the ones that
    // failed are held back for their backoff, see tests/protection.rs).
    let r = env.get("/stock/detail/000001").await;
    assert_eq!(header(&r, "x-cache"), "MISS");
    assert_eq!(r.json::<Value>().await.unwrap()["success"], true);
}

// ---------------------------------------------------------------------------------
// Pass-through keys never meet the catalogue's.
// ---------------------------------------------------------------------------------

/// With pass-through on and its class a week long: `/market/indices?access_token=1`
/// is the catalogue's request once the credential is gone (a live answer, one key
/// with `/market/indices`), and a forward-adjusted K-line keeps its expiry at the
/// open; a request that really passes through is kept under its own namespace.
#[tokio::test]
async fn passthrough_never_shares_a_key_with_the_catalogue() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.passthrough.enabled = true;
            c.passthrough.class = mdproxy_api::catalog::FreshnessClass::Immutable;
        },
        Some(support::saturday()),
    )
    .await;
    let with_credential = env.get("/market/indices?access_token=1").await;
    assert_eq!(with_credential.status(), 200);
    let live_max_age = header(&with_credential, "cache-control");
    let plain = env.get("/market/indices").await;
    assert_eq!(header(&plain, "x-cache"), "HIT", "one catalogue key");
    assert_eq!(header(&plain, "cache-control"), live_max_age);
    // Saturday noon: a live answer is fresh until Monday's open (plus the grace),
    // 45 h 16 min; the pass-through class would have said a week.
    assert_eq!(live_max_age, format!("max-age={}", 45 * 3_600 + 16 * 60));
    let kline = env
        .get("/stock/kline?code=600519&access_token=1&fqt=pre")
        .await;
    assert_eq!(kline.status(), 200);
    assert_eq!(
        header(&kline, "cache-control"),
        live_max_age,
        "fqt=pre still expires at the open"
    );
    // A parameter the catalogue does not know passes through (here the upstream
    // has come to serve it) and is cached for a week under its own key, in its own
    // namespace; the catalogue's entry is untouched and keeps its lifetime.
    let cached = plain.bytes().await.unwrap();
    env.sim.serve_undocumented("/market/indices");
    let unknown = env.get("/market/indices?fields=f2").await;
    assert_eq!(unknown.status(), 200);
    assert_eq!(header(&unknown, "cache-control"), "max-age=604800");
    let after = env.get("/market/indices").await;
    assert_eq!(header(&after, "x-cache"), "HIT");
    assert_eq!(header(&after, "cache-control"), live_max_age);
    assert_eq!(
        after.bytes().await.unwrap(),
        cached,
        "the catalogue's answer"
    );
    let again = env.get("/market/indices?fields=f2").await;
    assert_eq!(header(&again, "x-cache"), "HIT");
    let mut keys = env.proxy.state().cache().store().keys();
    keys.sort();
    assert!(
        keys.contains(&"/market/indices".to_owned())
            && keys.contains(&"passthrough:/market/indices?fields=f2".to_owned()),
        "{keys:?}"
    );
}

// ---------------------------------------------------------------------------------
// History that is final.
// ---------------------------------------------------------------------------------

/// A K-line range that ended before today, not forward-adjusted, lives for days;
/// the same range forward-adjusted expires at the next open.
#[tokio::test]
async fn a_settled_kline_range_is_kept_for_days() {
    let env = support::start().await;
    let settled = env
        .get("/stock/kline?code=600519&fqt=none&from=2026-01-05&to=2026-03-06")
        .await;
    assert_eq!(settled.status(), 200);
    assert_eq!(header(&settled, "cache-control"), "max-age=604800");
    let pre = env
        .get("/stock/kline?code=600519&fqt=pre&from=2026-01-05&to=2026-03-06")
        .await;
    assert_eq!(
        header(&pre, "cache-control"),
        format!("max-age={}", 45 * 3_600 + 16 * 60)
    );
    // A range that ends today is not final.
    let today = env
        .get("/stock/kline?code=600519&fqt=none&to=2026-03-07")
        .await;
    assert_eq!(
        header(&today, "cache-control"),
        format!("max-age={}", 45 * 3_600 + 16 * 60)
    );
}

/// `POST /stock/report/download` with the test token and a documented body.
async fn download(env: &support::Env) -> reqwest::Response {
    env.client
        .post(env.url("/stock/report/download"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "url": "https://static.cninfo.com.cn/a.PDF" }))
        .send()
        .await
        .unwrap()
}

/// `POST /stock/report/download` makes the upstream download a file: refused with
/// `501 not_implemented` and a reason, never forwarded.
#[tokio::test]
async fn the_report_download_is_refused_with_a_reason() {
    let env = support::start().await;
    let (status, code, _) = error_of(download(&env).await).await;
    assert_eq!((status, code.as_str()), (501, "not_implemented"));
    assert_eq!(env.sim.raw_count(), 0);
    let unauthenticated = env
        .client
        .post(env.url("/stock/report/download"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        unauthenticated.status(),
        401,
        "who may ask is checked first"
    );
    // The OpenAPI document and the endpoint table (docs/endpoints.md) say so.
    let doc = mdproxy_api::openapi::document();
    let download = &doc["paths"]["/stock/report/download"];
    assert!(download["get"].is_null(), "{download}");
    let refused = &download["post"]["responses"]["501"];
    assert!(refused.is_object(), "{download}");
    assert!(
        download["post"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("side effect")),
        "{download}"
    );
    assert!(
        catalog()
            .markdown_table()
            .lines()
            .any(|l| l.starts_with("| `POST /stock/report/download`") && l.contains("501")),
        "docs/endpoints.md lists the download"
    );
}

// ---------------------------------------------------------------------------------
// HK and US answers on their own markets' clocks.
// ---------------------------------------------------------------------------------

/// `max-age=N`.
fn max_age(secs: i64) -> String {
    format!("max-age={secs}")
}

/// Monday 2 March 2026, 15:30 China time: the A-share session is over, Hong Kong
/// trades until 16:00 (and its closing auction), New York opens at 22:30 China time
/// (09:30 EST). An A-share K-line is held until Tuesday's open; an HK K-line, an HK
/// minute K-line and the HK realtime list keep their in-session lifetimes; a US
/// K-line is held until New York's open (plus the grace), not the A-share one.
#[tokio::test]
async fn hk_and_us_answers_follow_their_own_sessions() {
    let env = support::start_with(
        |_| {},
        |_| {},
        Some(support::clock_at("2026-03-02T15:30:00+08:00")),
    )
    .await;
    let a_share = env.get("/stock/kline?code=600519").await;
    assert_eq!(a_share.status(), 200);
    assert_eq!(
        header(&a_share, "cache-control"),
        max_age(17 * 3_600 + 46 * 60),
        "until Tuesday 09:15 plus the grace"
    );
    for (target, fresh) in [
        ("/stock/kline?code=00700", 15),
        ("/stock/kline?code=0700.HK&period=5m", 10),
        ("/market/stocks/realtime-list?market=hk", 3),
        ("/market/stocks/realtime-list?market=hk_gem", 3),
    ] {
        let r = env.get(target).await;
        assert_eq!(r.status(), 200, "{target}");
        assert_eq!(header(&r, "cache-control"), max_age(fresh), "{target}");
    }
    let us = env.get("/stock/kline?code=105.AAPL").await;
    assert_eq!(us.status(), 200);
    assert_eq!(
        header(&us, "cache-control"),
        max_age(7 * 3_600 + 60),
        "until New York's open, 22:30 China time, plus the grace"
    );
}

/// A US K-line range settles on the New York date: at 00:30 China time on Tuesday
/// (11:30 on Monday in New York) a range ending on Monday is still trading; at 18:00
/// China time on Tuesday (05:00 in New York) it is final.
#[tokio::test]
async fn a_us_range_settles_on_the_new_york_date() {
    let clock = support::clock_at("2026-03-03T00:30:00+08:00");
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let trading = env
        .get("/stock/kline?code=105.AAPL&fqt=none&to=2026-03-02")
        .await;
    assert_eq!(trading.status(), 200);
    assert_eq!(
        header(&trading, "cache-control"),
        max_age(15),
        "Monday's session is under way in New York"
    );
    clock.set("2026-03-03T10:00:00Z".parse().unwrap());
    let settled = env
        .get("/stock/kline?code=105.MSFT&fqt=none&to=2026-03-02")
        .await;
    assert_eq!(header(&settled, "cache-control"), max_age(7 * 86_400));
}

// ---------------------------------------------------------------------------------
// The retired flows answer as their successors.
// ---------------------------------------------------------------------------------

/// `/market/flow?type=` and `/market/flow/list?type=` are their successors'
/// requests (`type` 1/2/3 = `dimension` region/industry/concept, absent = the
/// default industry): forwarded as the documented paths, one cache entry with them,
/// and the successors' `live` class (3 s in session).
#[tokio::test]
async fn the_retired_flows_are_their_successors() {
    let env = support::start_with(
        |_| {},
        |_| {},
        Some(support::clock_at("2026-03-02T10:00:00+08:00")),
    )
    .await;
    env.sim.clear_raw_requests();
    for (old, new) in [
        (
            "/market/flow?type=1",
            "/market/sector-flow/summary?dimension=region",
        ),
        ("/market/flow", "/market/sector-flow/summary"),
        (
            "/market/flow/list?type=3",
            "/market/sector-flow/list?dimension=concept",
        ),
    ] {
        let r = env.get(old).await;
        assert_eq!(r.status(), 200, "{old}");
        assert_eq!(header(&r, "cache-control"), max_age(3), "{old}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["success"], true, "{old}: {body}");
        let successor = env.get(new).await;
        assert_eq!(header(&successor, "x-cache"), "HIT", "{new}");
    }
    assert_eq!(
        env.sim.raw_requests(),
        [
            "/api/v1/market/sector-flow/summary?dimension=region",
            "/api/v1/market/sector-flow/summary?dimension=industry",
            "/api/v1/market/sector-flow/list?dimension=concept&page=1&pageSize=50",
        ],
        "only the documented paths reach the upstream"
    );
}

// ---------------------------------------------------------------------------------
// Pass-through: order of parameters.
// ---------------------------------------------------------------------------------

/// A routed request with a bad value of a known parameter gets the catalogue's 400
/// whatever else it carries and in whatever order: pass-through is for what the
/// catalogue does not know, never a way around its validation.
#[tokio::test]
async fn a_bad_known_parameter_is_refused_whatever_else_comes_with_it() {
    let env = support::start_with(
        |_| {},
        |c| c.passthrough.enabled = true,
        Some(support::saturday()),
    )
    .await;
    env.sim.clear_raw_requests();
    for target in [
        "/stock/kline?code=600519&period=2m&foo=1",
        "/stock/kline?foo=1&code=600519&period=2m",
        "/stock/kline?access_token=1&code=600519&period=2m",
        "/stock/kline?foo=1&period=2m",
    ] {
        let r = env.get(target).await;
        assert_eq!(r.status(), 400, "{target}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_parameter", "{target}: {v}");
        assert_eq!(v["error"]["param"], "period", "{target}: {v}");
    }
    let (status, code, param) = error_of(env.get("/stock/kline?foo=1").await).await;
    assert_eq!(
        (status, code.as_str(), param.as_deref()),
        (400, "missing_parameter", Some("code"))
    );
    assert_eq!(env.sim.raw_count(), 0, "nothing was forwarded");
}

// ---------------------------------------------------------------------------------
// Empty values.
// ---------------------------------------------------------------------------------

/// An empty value is what the upstream's NestJS validation makes of it, on both
/// sides of the wire: an empty optional date (`from=&to=`, which clients of the docs
/// send on every K-line) is absent, an empty text is a value, an empty number or
/// choice is refused.
#[tokio::test]
async fn empty_values_are_read_alike_by_mdproxy_and_the_simulator() {
    let env = support::start().await;
    env.sim.clear_raw_requests();
    let empty_range = env.get("/stock/kline?code=600519&from=&to=").await;
    assert_eq!(empty_range.status(), 200);
    let absent = env.get("/stock/kline?code=600519").await;
    assert_eq!(
        header(&absent, "x-cache"),
        "HIT",
        "one key with the absent range"
    );
    let keyword = env.get("/news/headlines?keyword=").await;
    assert_eq!(keyword.status(), 200);
    assert_eq!(
        env.sim.raw_requests(),
        [
            "/api/v1/stock/kline?code=600519&period=day",
            "/api/v1/news/headlines?page=0&pageSize=10&keyword=",
        ]
    );
    for (target, param) in [
        ("/news/headlines?page=", "page"),
        ("/stock/kline?code=600519&fqt=", "fqt"),
        ("/stock/kline?code=600519&period=", "period"),
        ("/stock/news?code=600519&pageSize=", "pageSize"),
    ] {
        let (status, code, got) = error_of(env.get(target).await).await;
        assert_eq!(
            (status, code.as_str(), got.as_deref()),
            (400, "invalid_parameter", Some(param)),
            "{target}"
        );
    }
    assert_eq!(env.sim.raw_count(), 2, "no refused request reached it");
    // The simulator reads them the same way.
    let client = support::client();
    for (target, status) in [
        ("/stock/kline?code=600519&from=&to=", 200),
        ("/news/headlines?keyword=", 200),
        ("/news/headlines?page=", 400),
        ("/stock/kline?code=600519&fqt=", 400),
        ("/stock/kline?code=600519&period=", 400),
        ("/stock/news?code=600519&pageSize=", 400),
    ] {
        let (got, body) = support::sim_json(&env.sim, &client, target).await;
        assert_eq!(got, status, "{target}: {body}");
    }
}

// ---------------------------------------------------------------------------------
// Typed codes: one key per listing.
// ---------------------------------------------------------------------------------

/// A prefix that says the exchange makes the suffix redundant (Shenzhen indices
/// 399xxx, Shanghai ETFs 51xxxx): every spelling is one key, forwarded as six
/// digits. Only 000xxx keeps a suffix (the Shenzhen stock or, with `.SH`, the
/// Shanghai index). A suffix that contradicts the prefix is a 400 naming the
/// parameter.
#[tokio::test]
async fn typed_codes_make_one_key_per_listing() {
    let env = support::start().await;
    env.sim.clear_raw_requests();
    for spellings in [
        ["399001", "399001.SZ", "sz399001", "0.399001"],
        ["510300", "SH510300", "510300.sh", "1.510300"],
        ["159915", "159915.SZ", "SZ159915", "0.159915"],
    ] {
        let first = env
            .get(&format!("/stock/kline?code={}", spellings[0]))
            .await;
        assert_eq!(first.status(), 200, "{}", spellings[0]);
        for typed in &spellings[1..] {
            let r = env.get(&format!("/stock/kline?code={typed}")).await;
            assert_eq!(header(&r, "x-cache"), "HIT", "{typed}");
        }
    }
    assert_eq!(env.get("/stock/kline?code=000001.SH").await.status(), 200);
    assert_eq!(env.get("/stock/kline?code=000001").await.status(), 200);
    assert_eq!(
        env.sim.raw_requests(),
        [
            "/api/v1/stock/kline?code=399001&period=day",
            "/api/v1/stock/kline?code=510300&period=day",
            "/api/v1/stock/kline?code=159915&period=day",
            "/api/v1/stock/kline?code=000001.SH&period=day",
            "/api/v1/stock/kline?code=000001&period=day",
        ]
    );
    for target in [
        "/stock/kline?code=600519.SZ",
        "/stock/kline?code=0.600519",
        "/stock/kline?code=399001.SH",
        "/stock/detail/SZ600519",
        "/stock/list?codes=600519,000001.BJ",
        "/fund/kline?code=159915.SH",
    ] {
        let (status, code, param) = error_of(env.get(target).await).await;
        assert_eq!(
            (status, code.as_str()),
            (400, "invalid_parameter"),
            "{target}"
        );
        assert!(param.is_some_and(|p| p.starts_with("code")), "{target}");
    }
    assert_eq!(env.sim.raw_count(), 5, "no contradiction was forwarded");
}

// ---------------------------------------------------------------------------------
// Minute and settled freshness in session.
// ---------------------------------------------------------------------------------

/// Monday 2 March 2026 in session: a minute K-line is fresh for the `minute`
/// class's 10 s, stale (refreshed in the background) for 20 s more; fetched after
/// the close it is held until Tuesday's open.
#[tokio::test]
async fn minute_klines_are_short_lived_in_session_and_held_after_the_close() {
    let clock = support::clock_at("2026-03-02T10:00:00+08:00");
    let env = support::start_with(|_| {}, |_| {}, Some(clock.clone())).await;
    let target = "/stock/kline?code=600519&period=1m";
    let first = env.get(target).await;
    assert_eq!(
        (header(&first, "x-cache"), header(&first, "cache-control")),
        ("MISS".to_owned(), max_age(10))
    );
    clock.advance(Duration::from_secs(9));
    assert_eq!(header(&env.get(target).await, "x-cache"), "HIT");
    clock.advance(Duration::from_secs(2));
    let stale = env.get(target).await;
    assert_eq!(header(&stale, "x-cache"), "STALE", "past 10 s");
    // One background refresh, fetched at this instant, fresh for 10 s again (waited
    // for, so that it is not fetched after the clock moves below).
    let mut refreshed = None;
    for _ in 0..250 {
        let r = env.get(target).await;
        if header(&r, "x-cache") == "HIT" {
            refreshed = Some(header(&r, "cache-control"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refreshed, Some(max_age(10)), "the refresh");
    assert_eq!(env.sim.hits("/stock/kline"), 2);
    // After the close: fetched again, then held until Tuesday 09:15 plus the grace.
    clock.set("2026-03-02T07:05:00Z".parse().unwrap());
    let closed = env.get(target).await;
    assert_eq!(header(&closed, "x-cache"), "MISS");
    assert_eq!(
        header(&closed, "cache-control"),
        max_age(18 * 3_600 + 11 * 60)
    );
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(header(&env.get(target).await, "x-cache"), "HIT");
}

/// In session on Monday 2 March 2026: a range that ended yesterday (`fqt=none` or
/// `after`) is final and kept for a week; the same range forward-adjusted (`fqt=pre`
/// or no `fqt`) never settles and keeps the session's 15 s; a range that ends
/// today keeps them too.
#[tokio::test]
async fn ranges_settle_in_session_unless_forward_adjusted() {
    let env = support::start_with(
        |_| {},
        |_| {},
        Some(support::clock_at("2026-03-02T10:00:00+08:00")),
    )
    .await;
    for (query, fresh) in [
        ("fqt=none&to=2026-03-01", 7 * 86_400),
        ("fqt=after&to=2026-02-27", 7 * 86_400),
        ("fqt=post&from=2026-01-05&to=2026-02-27", 7 * 86_400),
        ("fqt=pre&to=2026-03-01", 15),
        ("to=2026-02-27", 15),
        ("fqt=none&to=2026-03-02", 15),
    ] {
        let r = env.get(&format!("/stock/kline?code=600519&{query}")).await;
        assert_eq!(r.status(), 200, "{query}");
        assert_eq!(header(&r, "cache-control"), max_age(fresh), "{query}");
    }
}

// ---------------------------------------------------------------------------------
// The error mode: every error made on the upstream's behalf.
// ---------------------------------------------------------------------------------

/// Asserts an upstream-style failure: HTTP 200, `success: false`, `data: null`, the
/// endpoint's documented message, mdproxy's code under `error`; returns the body.
async fn upstream_style(r: reqwest::Response, message: &str, code: &str) -> Value {
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "cache-control"), "no-store");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["success"], false, "{v}");
    assert!(v["data"].is_null(), "{v}");
    assert_eq!(v["message"], message, "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    v
}

/// The upstream budget exhausted (`overloaded`) is answered as the upstream's own
/// failure in the upstream error mode.
#[tokio::test]
async fn the_error_mode_answers_an_exhausted_budget() {
    use governor::clock::FakeRelativeClock;
    use mdproxy_core::upstream::budget::RateClock;
    let clock = support::saturday();
    let sim = mdproxy_sim::start(&support::sim_config(), clock.clone())
        .await
        .unwrap();
    let mut config = support::proxy_config(&sim);
    config.server.error_mode = ErrorMode::Upstream;
    config.limits.upstream_rps = 1;
    config.limits.upstream_burst = 1;
    config.limits.client_wait_ms = 20;
    let proxy = mdproxy_core::app::start_with(
        &config,
        clock.clone(),
        RateClock::Fake(FakeRelativeClock::default()),
    )
    .await
    .unwrap();
    let env = support::Env {
        sim,
        proxy,
        client: support::client(),
        clock: Some(clock),
    };
    assert_eq!(env.get("/stock/detail/600519").await.status(), 200);
    upstream_style(
        env.get("/stock/kline?code=000001").await,
        "Failed to fetch kline",
        "overloaded",
    )
    .await;
    upstream_style(
        env.get("/stock/detail/000001").await,
        "socket hang up",
        "overloaded",
    )
    .await;
}

/// An open circuit breaker is answered as the upstream's own failure.
#[tokio::test]
async fn the_error_mode_answers_an_open_breaker() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.error_mode = ErrorMode::Upstream;
            c.upstream.breaker_failures = 1;
            c.upstream.breaker_open_ms = 60_000;
            c.limits.failure_backoff_ms = 0;
        },
        Some(support::saturday()),
    )
    .await;
    env.sim.fail_next(1);
    upstream_style(
        env.get("/news/overview").await,
        "socket hang up",
        "upstream_error",
    )
    .await;
    let asked = env.sim.raw_count();
    let v = upstream_style(
        env.get("/news/overview").await,
        "socket hang up",
        "upstream_error",
    )
    .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("circuit breaker open"),
        "{v}"
    );
    assert_eq!(env.sim.raw_count(), asked, "the breaker held it back");
}

/// The upstream's 429 (`upstream_throttled`) and the pause it asks for are answered
/// as the upstream's own failures.
#[tokio::test]
async fn the_error_mode_answers_throttling_and_its_pause() {
    let env = support::start_with(
        |_| {},
        |c| c.server.error_mode = ErrorMode::Upstream,
        Some(support::saturday()),
    )
    .await;
    env.sim.set_throttling(Some(mdproxy_sim::Throttling {
        limit: 0,
        window: Duration::from_secs(60),
        mode: mdproxy_sim::ThrottleMode::TooManyRequests,
    }));
    upstream_style(
        env.get("/stock/kline?code=600519").await,
        "Failed to fetch kline",
        "upstream_throttled",
    )
    .await;
    let asked = env.sim.raw_count();
    upstream_style(
        env.get("/stock/detail/600519").await,
        "socket hang up",
        "upstream_throttled",
    )
    .await;
    assert_eq!(env.sim.raw_count(), asked, "paused: not asked again");
}

/// mdproxy's own refusals keep their statuses in the upstream error mode: they are
/// about the client's request, not the upstream's health (the client's rate limit
/// 429, a pass-through target too long 414, the refused download 501).
#[tokio::test]
async fn the_error_mode_keeps_mdproxys_own_refusals() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.error_mode = ErrorMode::Upstream;
            c.limits.client_rps = 1;
            c.limits.client_burst = 2;
            c.passthrough.enabled = true;
            c.passthrough.max_target_bytes = 64;
        },
        Some(support::saturday()),
    )
    .await;
    let long = format!("/market/newer?q={}", "x".repeat(100));
    let (status, code, _) = error_of(env.get(&long).await).await;
    assert_eq!((status, code.as_str()), (414, "uri_too_long"));
    let (status, code, _) = error_of(download(&env).await).await;
    assert_eq!((status, code.as_str()), (501, "not_implemented"));
    let (status, code, _) = error_of(env.get("/market/indices").await).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
}
