//! The admin listener: metrics, health, status and purge, on their own address.

use crate::support;

use support::header;

async fn admin_env() -> (support::Env, String) {
    admin_env_with(|_| {}).await
}

async fn admin_env_with(
    change: impl FnOnce(&mut mdproxy_config::Config),
) -> (support::Env, String) {
    let env = support::start_with(
        |_| {},
        |c| {
            c.admin.listen = "127.0.0.1:0".into();
            c.admin.token = mdproxy_config::Secret::new("admin-secret");
            change(c);
        },
        // The HIT counts below need answers that stay fresh: a Saturday, not the
        // real date (a live answer is fresh for only 3 s in session).
        Some(support::saturday()),
    )
    .await;
    let admin = format!("http://{}", env.proxy.admin_addr.unwrap());
    (env, admin)
}

/// `/metrics` counts answers by endpoint and X-Cache, and upstream outcomes.
#[tokio::test]
#[ignore = "needs the Python tools: scripts/test installs them and runs the ignored tests"]
async fn metrics_count_hits_misses_and_upstream_outcomes() {
    let (env, admin) = admin_env().await;
    env.get("/market/indices").await;
    env.get("/market/indices").await;
    env.get("/stock/detail/605999").await; // unknown: negative answer
    let r = env.fetch(&format!("{admin}/metrics")).await;
    assert_eq!(
        header(&r, "content-type"),
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = r.text().await.unwrap();
    assert!(
        text.contains(
            r#"mdproxy_responses_total{endpoint="/market/indices",cache_status="MISS"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"mdproxy_responses_total{endpoint="/market/indices",cache_status="HIT"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"mdproxy_upstream_requests_total{outcome="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"mdproxy_upstream_requests_total{outcome="not_found"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("mdproxy_upstream_budget_dropped_total 0"),
        "{text}"
    );
    assert!(text.contains("mdproxy_market_open"), "{text}");
    for line in [
        r#"mdproxy_request_duration_seconds_count{endpoint="/market/indices",cache="HIT"} 1"#,
        r#"mdproxy_http_responses_total{status_class="2xx",code="none"} 2"#,
        r#"mdproxy_http_responses_total{status_class="4xx",code="upstream"} 1"#,
        "mdproxy_ready 1",
        r#"mdproxy_build_info{version=""#,
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "mdproxy_cache_evictions_total 0",
        "mdproxy_cache_negatives_relayed_total 0",
        r#"mdproxy_config_reloads_total{result="refused"} 0"#,
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// A standard parser reads the exposition: the reference Python client's strict
/// OpenMetrics parser (installed pinned by scripts/python-tools) takes the whole
/// text and finds each family with its type, and the histograms' buckets add up.
#[tokio::test]
#[ignore = "needs the Python tools: scripts/test installs them and runs the ignored tests"]
async fn metrics_parse_with_the_reference_openmetrics_parser() {
    let (env, admin) = admin_env().await;
    env.get("/market/indices").await;
    env.get("/market/indices").await;
    env.get("/stock/detail/60051").await; // 400
    env.client
        .get(format!("{}/market/indices", env.proxy.base_url()))
        .send()
        .await
        .unwrap(); // 401: no token
    let text = env.text(&format!("{admin}/metrics")).await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("metrics-parse");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("metrics-{}.txt", std::process::id()));
    std::fs::write(&file, &text).unwrap();
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    samples = [[s.name, s.labels, s.value] for s in family.samples]
    out[family.name] = {"type": family.type, "samples": samples}
print(json.dumps(out))
"#;
    let bin = support::python_tools();
    let stdout = support::stdout_of(
        std::process::Command::new(bin.join("python3"))
            .args(["-c", script])
            .arg(&file),
    );
    let families: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    for (name, kind) in [
        ("mdproxy_request_duration_seconds", "histogram"),
        ("mdproxy_upstream_duration_seconds", "histogram"),
        ("mdproxy_http_responses", "counter"),
        ("mdproxy_responses", "counter"),
        ("mdproxy_upstream_requests", "counter"),
        ("mdproxy_config_reloads", "counter"),
        ("mdproxy_build", "info"),
        ("mdproxy_cache_bytes", "gauge"),
        ("mdproxy_hub_subscribers", "gauge"),
        ("process_cpu_seconds", "counter"),
        ("process_resident_memory_bytes", "gauge"),
    ] {
        assert_eq!(families[name]["type"], kind, "{name} in {families}");
    }
    let samples = |name: &str| families[name]["samples"].as_array().unwrap().clone();
    let count = |labels: serde_json::Value| {
        samples("mdproxy_http_responses")
            .iter()
            .find(|s| s[1] == labels)
            .map(|s| s[2].as_f64().unwrap())
    };
    assert_eq!(
        count(serde_json::json!({"status_class": "2xx", "code": "none"})),
        Some(2.0)
    );
    assert_eq!(
        count(serde_json::json!({"status_class": "4xx", "code": "invalid_parameter"})),
        Some(1.0)
    );
    assert_eq!(
        count(serde_json::json!({"status_class": "4xx", "code": "unauthorized"})),
        Some(1.0)
    );
    // The +Inf bucket of the indices' HIT series holds its one observation.
    let inf = samples("mdproxy_request_duration_seconds")
        .into_iter()
        .find(|s| {
            s[0] == "mdproxy_request_duration_seconds_bucket"
                && s[1]["endpoint"] == "/market/indices"
                && s[1]["cache"] == "HIT"
                && s[1]["le"] == "+Inf"
        })
        .expect("a +Inf bucket");
    assert_eq!(inf[2], 1.0);
    let info = &samples("mdproxy_build")[0];
    assert_eq!(info[1]["version"], env!("CARGO_PKG_VERSION"));
    std::fs::remove_file(&file).ok();
}

/// Readiness waits for the upstream: 503 with the reason while it has never
/// answered and the cache is empty, 200 once it has.
#[tokio::test]
async fn readiness_waits_for_the_upstream() {
    let (env, admin) =
        admin_env_with(|c| c.upstream.base_url = "http://127.0.0.1:9/api/v1".into()).await;
    let r = env.fetch(&format!("{admin}/readyz")).await;
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["ready"], false);
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("no upstream request has succeeded"),
        "{v}"
    );
    drop(env);
    let (env, admin) = admin_env().await;
    env.get("/market/indices").await;
    let r = env.fetch(&format!("{admin}/readyz")).await;
    assert_eq!(r.status(), 200);
}

/// Health, readiness and the status page answer; the client listener has none of it.
#[tokio::test]
async fn health_and_status_pages() {
    let (env, admin) = admin_env().await;
    env.get("/macro/cpi/series").await;
    env.get("/macro/cpi/series").await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(env.fetch(&format!("{admin}{path}")).await.status(), 200);
    }
    let status: serde_json::Value = env
        .fetch(&format!("{admin}/status.json"))
        .await
        .json()
        .await
        .unwrap();
    let cpi = status["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == "/macro/cpi/series")
        .unwrap();
    assert_eq!(cpi["hit"], 1);
    assert_eq!(cpi["hit_ratio"], 0.5);
    assert!(status["market"]["phase"].is_string());
    let outside = env
        .client
        .get(format!("http://{}/metrics", env.proxy.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), 404);
}

/// Purge needs the admin token, canonicalises the target and drops the entry.
#[tokio::test]
async fn purge_drops_one_key_with_the_admin_token() {
    let (env, admin) = admin_env().await;
    env.get("/stock/detail/600519").await;
    assert_eq!(
        header(&env.get("/stock/detail/600519").await, "x-cache"),
        "HIT"
    );
    let purge = |target: &str, token: &str| {
        env.client
            .post(format!("{admin}/purge?target={target}"))
            .bearer_auth(token)
            .send()
    };
    let denied = purge("/stock/detail/600519", support::TOKEN).await.unwrap();
    assert_eq!(denied.status(), 401);
    let bad = purge("/nope", "admin-secret").await.unwrap();
    let (status, code, param) = support::error_of(bad).await;
    assert_eq!((status, code.as_str()), (400, "invalid_parameter"));
    assert_eq!(param.as_deref(), Some("target"));
    // Defect: the parameter's name was lost on the way (the error became a string).
    let bad = purge(
        "/stock/kline%3Fcode%3D600519%26period%3Dyear",
        "admin-secret",
    )
    .await
    .unwrap();
    let (status, code, param) = support::error_of(bad).await;
    assert_eq!((status, code.as_str()), (400, "invalid_parameter"));
    assert_eq!(param.as_deref(), Some("period"));
    let ok = purge("/stock/detail/600519", "admin-secret").await.unwrap();
    assert_eq!(ok.status(), 200);
    let v: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(v["target"], "/stock/detail/600519");
    assert_eq!(v["purged"], 1);
    assert_eq!(
        header(&env.get("/stock/detail/600519").await, "x-cache"),
        "MISS"
    );
    // Purging what is not cached says so.
    let again: serde_json::Value = purge("/stock/detail/000001", "admin-secret")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["purged"], 0);
}

/// Purge by endpoint template and by key prefix, like Varnish bans, reporting
/// how many entries went; `GET /purge` names the method to use.
#[tokio::test]
async fn purge_by_endpoint_and_prefix_counts_what_it_drops() {
    let (env, admin) = admin_env().await;
    for path in [
        "/stock/detail/600519",
        "/stock/detail/000001",
        "/market/indices",
    ] {
        env.get(path).await;
    }
    let post = |query: &str| {
        env.client
            .post(format!("{admin}/purge?{query}"))
            .bearer_auth("admin-secret")
            .send()
    };
    let v: serde_json::Value = post("endpoint=/stock/detail/{code}")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["purged"], 2, "{v}");
    assert_eq!(v["endpoint"], "/stock/detail/{code}");
    assert_eq!(header(&env.get("/market/indices").await, "x-cache"), "HIT");
    assert_eq!(
        header(&env.get("/stock/detail/000001").await, "x-cache"),
        "MISS"
    );
    let v: serde_json::Value = post("prefix=/market/").await.unwrap().json().await.unwrap();
    assert_eq!(v["purged"], 1, "{v}");
    assert_eq!(header(&env.get("/market/indices").await, "x-cache"), "MISS");
    let (status, code, param) = support::error_of(post("endpoint=/nope/{x}").await.unwrap()).await;
    assert_eq!(
        (status, code.as_str(), param.as_deref()),
        (400, "invalid_parameter", Some("endpoint"))
    );
    let (status, code, _) =
        support::error_of(post("target=/market/indices&prefix=/").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (400, "bad_request"));
    let get = env.fetch(&format!("{admin}/purge")).await;
    assert_eq!(get.status(), 405);
    assert_eq!(header(&get, "allow"), "POST");
    let (_, _, _) = support::error_of(get).await;
}

/// A purge made while its key's fill waits on the upstream: the client that
/// asked is answered, but that answer (perhaps from before the purge) is not
/// kept, and the next request asks the upstream again. By key, then by prefix.
#[tokio::test]
async fn a_purge_during_a_fill_keeps_nothing_from_before_it() {
    let (env, admin) = admin_env().await;
    for (code, purge) in [
        ("600519", "target=/stock/detail/600519"),
        ("000001", "prefix=/stock/detail/"),
    ] {
        let target = format!("/stock/detail/{code}");
        env.sim.set_hang(true);
        let asking = tokio::spawn({
            let request = env.client.get(env.url(&target)).bearer_auth(support::TOKEN);
            async move { request.send().await.unwrap() }
        });
        let upstream_asked = || env.sim.raw_requests().iter().any(|uri| uri.contains(code));
        let limit = std::time::Duration::from_secs(10);
        assert!(support::eventually(limit, upstream_asked).await);
        let purged = env
            .client
            .post(format!("{admin}/purge?{purge}"))
            .bearer_auth("admin-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(purged.status(), 200);
        env.sim.set_hang(false);
        let asked = asking.await.unwrap();
        assert_eq!(asked.status(), 200);
        assert_eq!(header(&asked, "x-cache"), "MISS");
        let next = env.get(&target).await;
        assert_eq!(header(&next, "x-cache"), "MISS", "after a purge by {purge}");
        assert_eq!(env.sim.hits_for(&target), 2, "{target}");
        assert_eq!(header(&env.get(&target).await, "x-cache"), "HIT");
    }
}

/// The admin listener's 401 names the one form it takes (the admin token as a
/// bearer token), not the API's `x-api-key` forms, which it refuses.
#[tokio::test]
async fn the_admin_401_names_only_the_bearer_form() {
    let (env, admin) = admin_env().await;
    let by_header = env
        .client
        .post(format!("{admin}/purge?prefix=/"))
        .header("x-api-key", "admin-secret")
        .send()
        .await
        .unwrap();
    let by_query = env
        .client
        .post(format!("{admin}/purge?prefix=/&x-api-key=admin-secret"))
        .send()
        .await
        .unwrap();
    for refused in [by_header, by_query] {
        assert_eq!(refused.status(), 401);
        assert_eq!(
            header(&refused, "www-authenticate"),
            "Bearer realm=\"mdproxy\""
        );
        let v: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");
        let message = v["message"].as_str().unwrap();
        assert!(message.contains("Authorization: Bearer"), "{message}");
        assert!(!message.contains("x-api-key"), "{message}");
    }
    // The API's 401 still lists its three forms.
    let api = env
        .client
        .get(env.url("/market/indices"))
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = api.json().await.unwrap();
    assert!(v["message"].as_str().unwrap().contains("x-api-key"), "{v}");
}

/// A purge target sent with its own query unencoded
/// (`target=/stock/kline?code=000001&period=week&fqt=pre`) is refused with 400
/// naming `target`, not read as `/stock/kline?code=000001` and answered `purged: 0`;
/// any other parameter the purge does not take is refused by name; the encoded
/// target purges the key.
#[tokio::test]
async fn an_ambiguous_purge_target_is_refused() {
    let (env, admin) = admin_env().await;
    let kline = "/stock/kline?code=000001&period=week&fqt=pre";
    env.get(kline).await;
    assert_eq!(header(&env.get(kline).await, "x-cache"), "HIT");
    let post = |query: &str| {
        env.client
            .post(format!("{admin}/purge?{query}"))
            .bearer_auth("admin-secret")
            .send()
    };
    let raw = post(&format!("target={kline}")).await.unwrap();
    assert_eq!(raw.status(), 400);
    let v: serde_json::Value = raw.json().await.unwrap();
    assert_eq!(
        (&v["error"]["code"], &v["error"]["param"]),
        (&"invalid_parameter".into(), &"target".into()),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("%26"), "{v}");
    assert_eq!(
        header(&env.get(kline).await, "x-cache"),
        "HIT",
        "nothing purged"
    );
    let (status, code, param) =
        support::error_of(post("prefix=/stock/&limit=3").await.unwrap()).await;
    assert_eq!(
        (status, code.as_str(), param.as_deref()),
        (400, "unknown_parameter", Some("limit"))
    );
    let encoded: String = form_urlencoded::byte_serialize(kline.as_bytes()).collect();
    let ok = post(&format!("target={encoded}")).await.unwrap();
    assert_eq!(ok.status(), 200);
    let v: serde_json::Value = ok.json().await.unwrap();
    assert_eq!(v["purged"], 1, "{v}");
    assert_eq!(header(&env.get(kline).await, "x-cache"), "MISS");
}

/// The metric names README and the manual (`docs/` pages named in lower case)
/// mention (`mdproxy_*`, `process_*`), anywhere in them.
fn readme_metric_names() -> Vec<String> {
    let readme: String = crate::support::manual()
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    let mut names = Vec::new();
    for prefix in ["mdproxy_", "process_"] {
        for (at, _) in readme.match_indices(prefix) {
            let before = readme[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = readme[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // A crate's path (`mdproxy_core::build`) is no metric.
            if readme[at + name.len()..].starts_with("::") {
                continue;
            }
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// Every metric name README or the manual mentions is one `/metrics` exports (a family or a
/// sample's name), the cluster's and the disk tier's included (a node whose Redis
/// is away still reports it; the disk tier's only exist where one is set).
/// README once named the refused reloads' counter wrongly.
#[tokio::test]
async fn every_metric_readme_names_is_exported() {
    let disk = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-metric-names");
    let _ = std::fs::remove_dir_all(&disk);
    let (env, admin) = admin_env_with(|c| {
        c.cache.disk_path = disk.display().to_string();
        c.cache.disk_bytes = 16 << 20;
        // A closed port: the node works alone, and says so in its metrics.
        c.cluster.redis_url = mdproxy_config::Secret::new("redis://127.0.0.1:1/0");
        c.cluster.timeout_ms = 50;
        c.mcp.enabled = true;
    })
    .await;
    env.get("/market/indices").await;
    let text = env.text(&format!("{admin}/metrics")).await;
    let mut exported: Vec<&str> = Vec::new();
    for line in text.lines() {
        let name = match line.strip_prefix("# TYPE ") {
            Some(rest) => rest.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        };
        exported.extend(name);
    }
    let names = readme_metric_names();
    assert!(names.len() > 30, "{names:?}");
    // A name ending in `_` is a prefix (`mdproxy_heap_*`): some metric starts so.
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| match n.ends_with('_') {
            true => !exported.iter().any(|e| e.starts_with(n.as_str())),
            false => !exported.contains(&n.as_str()),
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the manual names {missing:?}, /metrics has:\n{text}"
    );
}

/// The start-up probe: against an upstream that takes our token, the proxy is
/// ready before any client asked; against one that refuses it, `/readyz` says so
/// and the refusal is its own outcome, not a generic failure.
#[tokio::test]
async fn the_start_up_probe_decides_readiness_and_names_a_refused_token() {
    let (env, admin) = admin_env_with(|c| c.upstream.probe_target = "/market/indices".into()).await;
    let ready = support::eventually(std::time::Duration::from_secs(10), || {
        env.proxy.state().upstream().health().is_seen()
    })
    .await;
    assert!(ready, "the probe reached the upstream");
    let r = env.fetch(&format!("{admin}/readyz")).await;
    assert_eq!(r.status(), 200);
    drop(env);

    let (env, admin) = admin_env_with(|c| {
        c.upstream.probe_target = "/market/indices".into();
        c.upstream.token = mdproxy_config::Secret::new("not-the-upstream-token");
    })
    .await;
    let upstream = env.proxy.state().upstream().clone();
    let refused = support::eventually(std::time::Duration::from_secs(10), || {
        upstream
            .counters()
            .outcome_count(mdproxy_core::upstream::UpstreamOutcome::TokenRefused)
            > 0
    })
    .await;
    assert!(refused, "the probe's 401 is counted as token_refused");
    let r = env.fetch(&format!("{admin}/readyz")).await;
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("token_refused") && reason.contains("refused our token"),
        "{reason}"
    );
    assert!(!reason.contains("not-the-upstream-token"));
    let metrics = env.text(&format!("{admin}/metrics")).await;
    assert!(
        metrics.contains(r#"mdproxy_upstream_requests_total{outcome="token_refused"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"mdproxy_upstream_requests_total{outcome="failed"} 0"#));
    // A client's miss meanwhile is a 502 naming the cause, not the client's fault.
    let (status, code, _) = support::error_of(env.get("/stock/detail/600519").await).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
}
