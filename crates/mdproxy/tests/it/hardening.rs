//! Hardening (issue 9) against broken upstreams and hostile input: no cache
//! poisoning through redirects or lossy decoding.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;

use mdproxy_config::Secret;
use mdproxy_market::Clock;
use support::{Scripted, error_of, header, response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A proxy in front of `upstream` on a clock standing at Saturday 20:00 China time.
async fn proxy_for(
    upstream: SocketAddr,
) -> (mdproxy_core::app::App, Arc<mdproxy_market::ManualClock>) {
    proxy_with(upstream, |_| {}).await
}

/// [`proxy_for`] with `change` applied to the config.
async fn proxy_with(
    upstream: SocketAddr,
    change: impl FnOnce(&mut mdproxy_config::Config),
) -> (mdproxy_core::app::App, Arc<mdproxy_market::ManualClock>) {
    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let mut config = mdproxy_config::Config::default();
    config.server.listen = "127.0.0.1:0".into();
    config.auth.tokens = vec![Secret::new(support::TOKEN)];
    config.upstream.base_url = format!("http://{upstream}/api/v1");
    config.upstream.timeout_ms = 2_000;
    config.scheduler.enabled = false;
    config.limits.upstream_rps = 0;
    // The scripted upstreams answer only what each test scripts.
    config.upstream.probe_target = String::new();
    change(&mut config);
    let app = mdproxy_core::app::start(&config, clock.clone())
        .await
        .unwrap();
    (app, clock)
}

async fn get(app: &mdproxy_core::app::App, target: &str) -> reqwest::Response {
    support::client()
        .get(format!("{}{target}", app.base_url()))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .unwrap()
}

/// An upstream 302 is an upstream failure: never followed (the other host sees
/// nothing), never cached, and a good stale answer is served in its place.
#[tokio::test]
async fn an_upstream_redirect_is_never_followed_nor_cached() {
    let upstream = Scripted::start().await;
    let elsewhere = Scripted::start().await;
    let (app, clock) = proxy_for(upstream.addr).await;
    let good = r#"{"success":true,"data":{"marketDegree":"34"}}"#;
    upstream.then(response("200 OK", &[], good));
    assert_eq!(
        get(&app, "/news/overview").await.text().await.unwrap(),
        good
    );

    // Past fresh and stale (900 s for `news` when closed), inside stale-if-error.
    clock.set(clock.now() + chrono::Duration::seconds(1_000));
    let location = format!("http://{}/api/v1/news/overview", elsewhere.addr);
    let evil = r#"{"success":true,"data":"another host's answer"}"#;
    for _ in 0..2 {
        upstream.then(response("302 Found", &[("Location", &location)], evil));
    }
    let r = get(&app, "/news/overview").await;
    assert_eq!(header(&r, "x-cache"), "STALE");
    assert_eq!(r.text().await.unwrap(), good);

    // Nothing cached: 502, and still nothing followed or stored.
    let r = get(&app, "/news/mainline").await;
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (502, "upstream_error"));
    assert_eq!(elsewhere.received(), 0, "the redirect was followed");
    assert_eq!(upstream.received(), 3);
    app.shutdown().await;
}

/// Query values that are not UTF-8 (GBK-encoded keywords) are refused, naming the
/// parameter, and never reach the upstream: replacing them by U+FFFD would give two
/// different words one cache key.
#[tokio::test]
async fn query_values_that_are_not_utf8_are_refused_not_replaced() {
    let env = support::start_with(
        |_| {},
        |c| c.passthrough.enabled = true,
        Some(support::saturday()),
    )
    .await;
    for target in [
        "/news/headlines?keyword=%D0%C2%CE%C5",
        "/news/headlines?keyword=%C1%AA%B2%A5",
        "/stock/search?keyword=%C6%BD%B0%B2",
        "/news/search?keyword=%D0%C2%CE%C5",
    ] {
        let (status, code, param) = error_of(env.get(target).await).await;
        assert_eq!(
            (status, code.as_str(), param.as_deref()),
            (400, "invalid_parameter", Some("keyword")),
            "{target}"
        );
    }
    // The same words in UTF-8 are two different keys.
    let a = env.get("/news/headlines?keyword=%E6%96%B0%E9%97%BB").await;
    let b = env.get("/news/headlines?keyword=%E8%81%94%E6%92%AD").await;
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    assert_ne!(header(&a, "etag"), header(&b, "etag"));
    assert_eq!(env.sim.hits("/news/headlines"), 2);
}

/// While the upstream hangs, the breaker opens after `breaker_failures` timeouts:
/// from then on stale answers are served without asking the upstream (no request
/// waits for a timeout) and uncached requests fail fast with 502 naming the
/// breaker; when the interval is over one probe goes through, and its success
/// closes the breaker. The breaker runs on an injected clock.
#[tokio::test]
async fn stale_answers_are_served_at_once_while_the_breaker_is_open() {
    use governor::clock::FakeRelativeClock;
    use mdproxy_core::upstream::UpstreamOutcome;
    use mdproxy_core::upstream::budget::RateClock;

    let clock = support::clock_at("2026-11-21T20:00:00+08:00");
    let sim = mdproxy_sim::start(&support::sim_config(), clock.clone())
        .await
        .unwrap();
    let mut config = support::proxy_config(&sim);
    config.upstream.breaker_failures = 2;
    config.upstream.breaker_open_ms = 5_000;
    // Each request asks the upstream until the breaker opens (no key held back
    // after a failure: tests/protection.rs).
    config.limits.failure_backoff_ms = 0;
    let fake = FakeRelativeClock::default();
    let proxy =
        mdproxy_core::app::start_with(&config, clock.clone(), RateClock::Fake(fake.clone()))
            .await
            .unwrap();
    let env = support::Env {
        sim,
        proxy,
        client: support::client(),
        clock: Some(clock.clone()),
    };
    let first = env.get("/news/overview").await;
    assert_eq!(first.status(), 200);
    let good = first.bytes().await.unwrap();
    // A short upstream timeout only now (a first fill may outlast it under load).
    config.upstream.timeout_ms = 300;
    env.proxy.reload(config.clone()).unwrap();
    // Past fresh and stale, inside stale-if-error.
    clock.set(clock.now() + chrono::Duration::seconds(1_000));
    env.sim.set_hang(true);
    for _ in 0..2 {
        let r = env.get("/news/overview").await;
        assert_eq!(header(&r, "x-cache"), "STALE", "after a timeout");
    }
    let asked = env.sim.raw_count();
    assert_eq!(
        env.proxy
            .state()
            .upstream()
            .counters()
            .outcome_count(UpstreamOutcome::Timeout),
        2
    );

    for _ in 0..20 {
        let r = env.get("/news/overview").await;
        assert_eq!(header(&r, "x-cache"), "STALE");
        assert!(header(&r, "cache-status").ends_with("detail=stale-if-error"));
        assert_eq!(r.bytes().await.unwrap(), good);
    }
    let r = env.get("/news/mainline").await;
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_error");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("circuit breaker open"),
        "{body}"
    );
    assert_eq!(
        env.sim.raw_count(),
        asked,
        "nothing reached the hanging upstream"
    );
    let upstream = env.proxy.state().upstream();
    assert_eq!(
        upstream
            .counters()
            .outcome_count(UpstreamOutcome::CircuitOpen),
        21
    );

    // The interval passes and the upstream is back: one probe closes the breaker.
    env.sim.set_hang(false);
    // The probe gets the usual timeout (a loaded machine may take more than 300 ms);
    // the breaker, whose settings did not change, stays open across the reload.
    config.upstream.timeout_ms = 2_000;
    env.proxy.reload(config).unwrap();
    fake.advance(std::time::Duration::from_millis(5_000));
    let r = env.get("/news/overview").await;
    assert_eq!(header(&r, "x-cache"), "MISS", "the probe refetched it");
    assert_eq!(env.get("/news/mainline").await.status(), 200);
    assert_eq!(env.sim.raw_count(), asked + 2);
}

/// A body past `upstream.max_body_bytes` (announced or chunked) is an upstream
/// error, never buffered past the limit; one past an eighth of `cache.max_bytes` is
/// served but not cached.
#[tokio::test]
async fn oversized_upstream_bodies_are_refused_or_served_uncached() {
    let upstream = Scripted::start().await;
    let (app, _) = proxy_with(upstream.addr, |c| {
        c.upstream.max_body_bytes = 64 * 1024;
        c.cache.max_bytes = 1024 * 1024;
    })
    .await;
    let huge = format!(r#"{{"success":true,"data":"{}"}}"#, "x".repeat(100 * 1024));
    upstream.then(response("200 OK", &[], &huge));
    let chunk = format!("{:x}\r\n{huge}\r\n0\r\n\r\n", huge.len());
    upstream.then(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunk}"
    ));
    for target in ["/news/overview", "/news/mainline"] {
        let body: serde_json::Value = get(&app, target).await.json().await.unwrap();
        assert_eq!(body["error"]["code"], "upstream_error", "{target}");
        assert!(
            body["message"].as_str().unwrap().contains("too large"),
            "{body}"
        );
    }
    app.shutdown().await;

    // Under the body limit but over an eighth of the cache: served, never cached.
    let upstream = Scripted::start().await;
    let (app, _) = proxy_with(upstream.addr, |c| c.cache.max_bytes = 1024 * 1024).await;
    let big = format!(r#"{{"success":true,"data":"{}"}}"#, "y".repeat(200 * 1024));
    for _ in 0..2 {
        upstream.then(response("200 OK", &[], &big));
        let r = get(&app, "/news/overview").await;
        assert_eq!(header(&r, "x-cache"), "MISS");
        assert_eq!(r.text().await.unwrap(), big);
    }
    assert_eq!(upstream.received(), 2);
    app.shutdown().await;
}

/// An HTTP/1.1 request without `Host` is answered 400 in the envelope (RFC 9112
/// §3.2), even with a valid token; HTTP/1.0 needs none.
#[tokio::test]
async fn an_http11_request_without_host_is_refused() {
    let env = support::start().await;
    let ask = |version: &'static str| {
        let addr = env.proxy.addr;
        async move {
            let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
            let request = format!(
                "GET /api/v1/market/indices {version}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
                support::TOKEN
            );
            socket.write_all(request.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                socket.read_to_end(&mut answer),
            )
            .await
            .expect("the connection is closed")
            .unwrap();
            String::from_utf8_lossy(&answer).into_owned()
        }
    };
    let answer = ask("HTTP/1.1").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains(r#""code":"bad_request""#), "{answer}");
    assert_eq!(env.sim.raw_count(), 0);
    let answer = ask("HTTP/1.0").await;
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
}

/// `server.max_headers` bounds a request's header fields, at its default (hyper's
/// own limit, which mdproxy leaves to hyper) and at any other value: one field
/// more than allowed is refused with 431.
#[tokio::test]
async fn requests_past_max_headers_are_refused() {
    // Host, Connection and Authorization come with every raw request.
    async fn status_with(env: &support::Env, fields: usize) -> u16 {
        let names: Vec<String> = (3..fields).map(|i| format!("X-Field-{i}")).collect();
        let extra: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
        env.raw("GET", "/market/indices", &extra).await.status
    }
    let env = support::start().await;
    assert_eq!(status_with(&env, 100).await, 200);
    assert_eq!(status_with(&env, 101).await, 431);
    let env = support::start_with(|_| {}, |c| c.server.max_headers = 20, None).await;
    assert_eq!(status_with(&env, 20).await, 200);
    assert_eq!(status_with(&env, 21).await, 431);
}

/// Connects from `ip` (any 127/8 address works on loopback) to `to`.
async fn connect_from(ip: &str, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// What the server sends before closing (bounded wait).
async fn read_all(mut socket: tokio::net::TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        socket.read_to_end(&mut answer),
    )
    .await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// A GET of `/market/indices` with the test token from `ip`, bounded.
async fn answer_from(ip: &str, env: &support::Env) -> u16 {
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .timeout(std::time::Duration::from_secs(3))
        .build()
        .unwrap();
    client
        .get(env.url("/market/indices"))
        .bearer_auth(support::TOKEN)
        .send()
        .await
        .expect("an answer while the flood holds its connections")
        .status()
        .as_u16()
}

/// Slow-loris and idle connections from one address take at most its share of
/// `max_connections`; the excess is answered `503 overloaded` as soon as it asks,
/// and a client from another address is served meanwhile.
#[tokio::test]
async fn a_flood_from_one_address_cannot_take_every_connection() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.max_connections = 40;
            c.server.max_connections_per_client_percent = 25;
        },
        Some(support::saturday()),
    )
    .await;
    let addr = env.proxy.addr;
    let mut held = Vec::new();
    for i in 0..30 {
        let mut socket = connect_from("127.0.0.1", addr).await;
        if i % 2 == 0 {
            // Slow loris: a request line and half a header, the rest never comes.
            socket
                .write_all(b"GET /api/v1/market/indices HTTP/1.1\r\nHost: x\r\nX-Slow: a")
                .await
                .unwrap();
        }
        held.push(socket);
    }
    // The first ten hold slots; the other twenty are answered 503 as soon as their
    // request is complete, and closed.
    let mut refused = 0;
    for (i, mut socket) in held.drain(10..).enumerate() {
        let rest: &[u8] = if (i + 10) % 2 == 0 {
            b"\r\n\r\n"
        } else {
            b"GET /api/v1/market/indices HTTP/1.1\r\nHost: x\r\n\r\n"
        };
        socket.write_all(rest).await.unwrap();
        let answer = read_all(socket).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains(r#""code":"overloaded""#), "{answer}");
        refused += 1;
    }
    assert_eq!(refused, 20);
    assert_eq!(answer_from("127.0.0.2", &env).await, 200);
    drop(held);
}

/// Past `max_connections` in all, a new connection's request gets an immediate 503
/// instead of waiting in the backlog. (The header timeout is long: no connection
/// here may time out while the others connect, however slow the machine.)
#[tokio::test]
async fn past_the_limit_new_connections_get_503() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.max_connections = 8;
            c.server.max_connections_per_client_percent = 50;
            c.server.header_read_timeout_ms = 60_000;
        },
        Some(support::saturday()),
    )
    .await;
    let addr = env.proxy.addr;
    let mut idle = Vec::new();
    for ip in ["127.0.0.10", "127.0.0.11"] {
        for _ in 0..4 {
            idle.push(connect_from(ip, addr).await);
        }
    }
    let mut extra = connect_from("127.0.0.12", addr).await;
    extra
        .write_all(b"GET /api/v1/market/indices HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let extra = read_all(extra).await;
    assert!(extra.starts_with("HTTP/1.1 503"), "{extra}");
    // Closing the idle ones frees their slots for new clients.
    drop(idle);
    let served = async {
        loop {
            if answer_from("127.0.0.12", &env).await == 200 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), served)
        .await
        .expect("a freed slot serves a new client");
}

/// An idle connection is closed after `header_read_timeout_ms` without an answer,
/// which frees its slot.
#[tokio::test]
async fn idle_connections_time_out() {
    let env = support::start_with(
        |_| {},
        |c| c.server.header_read_timeout_ms = 300,
        Some(support::saturday()),
    )
    .await;
    let idle = connect_from("127.0.0.13", env.proxy.addr).await;
    assert_eq!(read_all(idle).await, "", "closed without an answer");
}

/// Idle connections to the admin listener cannot keep a probe out: one address
/// holds at most a quarter of its slots, and a probe from another gets `/healthz`.
#[tokio::test]
async fn the_admin_listener_stays_reachable_during_a_flood() {
    let env = support::start_with(
        |_| {},
        |c| c.admin.listen = "127.0.0.1:0".into(),
        Some(support::saturday()),
    )
    .await;
    let admin = env.proxy.admin_addr.unwrap();
    let mut idle = Vec::new();
    for _ in 0..70 {
        idle.push(connect_from("127.0.0.1", admin).await);
    }
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address("127.0.0.3".parse::<std::net::IpAddr>().unwrap())
        .timeout(std::time::Duration::from_secs(3))
        .build()
        .unwrap();
    let r = client
        .get(format!("http://{admin}/healthz"))
        .send()
        .await
        .expect("healthz answers during the flood");
    assert_eq!(r.status(), 200);
    drop(idle);
}

/// Defect: a client that pipelined requests and stopped reading held its
/// connection, and its slot, for ever: hyper's write waited without a timer (a
/// few addresses doing so filled the listener). A write that makes no progress for
/// `server.send_timeout_ms` now closes the connection, as nginx's `send_timeout`.
#[tokio::test]
async fn a_client_that_stops_reading_is_closed_after_the_send_timeout() {
    let env = support::start_with(
        |_| {},
        |c| {
            c.server.send_timeout_ms = 300;
            // The idle keep-alive's close must not be what ends the connection.
            c.server.header_read_timeout_ms = 60_000;
        },
        Some(support::saturday()),
    )
    .await;
    const TARGET: &str = "/api/v1/openapi.json";
    let size = env
        .client
        .get(format!("{}{TARGET}", env.proxy.base_url()))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .len();
    // More answers than the kernel's buffers hold (its send buffer grows to 4
    // MiB at most here), to a client that reads nothing for a while.
    let pipelined = (16 << 20) / size + 1;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket.connect(env.proxy.addr).await.unwrap();
    let request = format!("GET {TARGET} HTTP/1.1\r\nHost: mdproxy\r\n\r\n");
    tcp.write_all(request.repeat(pipelined).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let mut read = 0;
    let read_all = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), read_all).await;
    assert!(closed.is_ok(), "closed, not left open");
    assert!(
        read < pipelined * size,
        "closed before every answer was written ({read} bytes of {})",
        pipelined * size
    );
}
