//! mdproxy as a drop-in for the real upstream as its documentation stands today
//! (docs/upstream-endpoints.json): every documented endpoint answered through `demo`
//! and through `serve`, the catalogue checked against the documented list, minute
//! K-lines, HK and typed codes, the documented defaults and required parameters,
//! per-endpoint upstream timeouts, the upstream-compatible error mode, pass-through
//! keys apart from the catalogue's, settled history, the refused download.

mod support;

use std::time::Duration;

use mdproxy::api::catalog::{KeyRole, ParamKind, REFUSED, catalog};
use mdproxy::config::ErrorMode;
use serde_json::Value;
use support::{TOKEN, error_of, header};

/// The documented list, as the simulator also reads it.
const DOCS: &str = include_str!("../docs/upstream-endpoints.json");

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
/// `text/event-stream`); the documented POST gets the clear refusal.
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
        assert_eq!(r.status(), 200, "{target}");
        if path == mdproxy::api::catalog::STREAM_PATH {
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
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mdproxy"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "",
            "--log",
            "warn",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let base = line_after(&mut lines, "mdproxy demo: proxy ").await;
    walk(&base, "demo-token").await;
    child.kill().await.unwrap();
}

/// `mdproxy serve` in front of the simulator answers every documented endpoint's
/// documented sample request.
#[tokio::test]
async fn every_documented_endpoint_answers_through_serve() {
    use tokio::io::AsyncBufReadExt;
    let sim = support::sim_with_token("walk-upstream").await;
    let dir = std::env::temp_dir().join(format!("mdproxy-walk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("serve.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nreload_poll_ms = 0\n[auth]\ntokens = [\"walk-client\"]\n\
             [upstream]\nbase_url = \"{}\"\ntoken = \"walk-upstream\"\n[scheduler]\nenabled = false\n\
             [hub]\nsource = \"/stock/list\"\n",
            sim.base_url()
        ),
    )
    .unwrap();
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
            c.passthrough.class = mdproxy::api::catalog::FreshnessClass::Immutable;
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
    // A parameter the catalogue does not know passes through under its own key
    // (the upstream refuses it, and the refusal is relayed), and the catalogue's
    // entry is untouched.
    let unknown = env.get("/market/indices?fields=f2").await;
    assert_eq!(unknown.status(), 400);
    let after = env.get("/market/indices").await;
    assert_eq!(header(&after, "x-cache"), "HIT");
    let keys = env.proxy.state().cache().store().keys();
    assert!(keys.iter().all(|k| k.starts_with('/')), "{keys:?}");
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

/// `POST /stock/report/download` makes the upstream download a file: refused with
/// `501 not_implemented` and a reason, never forwarded.
#[tokio::test]
async fn the_report_download_is_refused_with_a_reason() {
    let env = support::start().await;
    let r = env
        .client
        .post(env.url("/stock/report/download"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "url": "https://static.cninfo.com.cn/a.PDF" }))
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(r).await;
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
}
