//! The admin listener: metrics, health, status and purge, on their own address.

mod support;

use support::header;

async fn admin_env() -> (support::Env, String) {
    let env = support::start_with(
        |_| {},
        |c| {
            c.admin.listen = "127.0.0.1:0".into();
            c.admin.token = mdproxy::config::Secret::new("admin-secret");
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
async fn metrics_count_hits_misses_and_upstream_outcomes() {
    let (env, admin) = admin_env().await;
    env.get("/market/indices").await;
    env.get("/market/indices").await;
    env.get("/stock/detail/605999").await; // unknown: negative answer
    let r = env
        .client
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap();
    assert!(header(&r, "content-type").starts_with("text/plain"));
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
}

/// Health, readiness and the status page answer; the client listener has none of it.
#[tokio::test]
async fn health_and_status_pages() {
    let (env, admin) = admin_env().await;
    env.get("/macro/cpi/series").await;
    env.get("/macro/cpi/series").await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            env.client
                .get(format!("{admin}{path}"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }
    let status: serde_json::Value = env
        .client
        .get(format!("{admin}/status"))
        .send()
        .await
        .unwrap()
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
    assert_eq!(v["purged"], "/stock/detail/600519");
    assert_eq!(
        header(&env.get("/stock/detail/600519").await, "x-cache"),
        "MISS"
    );
}
