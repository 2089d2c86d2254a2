//! Serving a cache hit in-process: the whole handler (auth, route, validation, key,
//! cache lookup, response headers) for a warm key, without sockets. Compared with a
//! handler that returns a prebuilt `Bytes` body, the floor of any hyper server.
//! Before measuring, each benchmarked request is checked to be answered as a HIT; at
//! the end the mean time of each hit is printed as a ratio to the floor's.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::Request;
use mdproxy_config::Secret;
use mdproxy_market::SystemClock;
use mdproxy_sim::SimConfig;

fn cache_hit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (sim, proxy) = rt.block_on(async {
        let clock = Arc::new(SystemClock);
        let sim_config = SimConfig {
            listen: "127.0.0.1:0".into(),
            ..SimConfig::default()
        };
        let sim = mdproxy_sim::start(&sim_config, clock.clone())
            .await
            .expect("sim starts");
        let mut config = mdproxy::demo::config_for(&sim, "127.0.0.1:0", Secret::new("bench"));
        // Every entry stays fresh for the whole run: we measure hits, not refreshes.
        for ttl in config.freshness.classes.values_mut() {
            ttl.session_fresh_secs = 3_600;
            ttl.closed_fresh_secs = 3_600;
            ttl.until_open = false;
        }
        config.freshness.endpoints.clear();
        config.scheduler.enabled = false;
        config.limits.upstream_rps = 0;
        let proxy = mdproxy_core::app::start(&config, clock)
            .await
            .expect("proxy starts");
        (sim, proxy)
    });
    let edge = std::sync::Arc::clone(proxy.edge());
    let connection = std::sync::Arc::new(mdproxy_core::edge::Connection {
        peer: "127.0.0.1:40000".parse().unwrap(),
        close: Default::default(),
        outlet: None,
    });
    let request = |uri: &str| {
        Request::get(uri)
            .header("host", "127.0.0.1")
            .header("authorization", "Bearer bench")
            .body(())
            .expect("request")
    };
    let targets = [
        ("indices_2k", "/api/v1/market/indices"),
        ("detail_1k", "/api/v1/stock/detail/600519"),
        (
            "watchlist_3k",
            "/api/v1/stock/list?codes=600519,000001,600036,000858,601318,600000,300750",
        ),
        (
            "kline_600k",
            "/api/v1/stock/kline?code=000001&period=day&fqt=post",
        ),
    ];
    // Warm every key, then check that what is measured is a cache hit: a MISS or
    // STALE here would benchmark the upstream or a refresh instead.
    rt.block_on(async {
        // The first round fills, the second must be served from the cache.
        for round in ["fill", "hit"] {
            for (_, uri) in targets {
                let r = edge
                    .handle(request(uri), connection.clone())
                    .await
                    .expect("infallible");
                assert_eq!(r.status(), 200, "{uri}");
                if round == "hit" {
                    assert_eq!(
                        r.headers().get("x-cache").map(|v| v.to_str().unwrap_or("")),
                        Some("HIT"),
                        "{uri}: the benchmarked request must be a cache hit"
                    );
                }
            }
        }
    });
    let upstream_before = sim.total();
    let mut group = c.benchmark_group("cache_hit");
    group.throughput(Throughput::Elements(1));
    for (name, uri) in targets {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let (edge, connection) = (std::sync::Arc::clone(&edge), connection.clone());
                let req = request(uri);
                async move {
                    let r = edge.handle(req, connection).await.expect("infallible");
                    black_box(r.status())
                }
            })
        });
    }
    // The floor: building a response around a prebuilt body.
    let prebuilt = Bytes::from(vec![b'x'; 2048]);
    group.bench_function("prebuilt_bytes_floor", |b| {
        b.to_async(&rt).iter(|| {
            let body = prebuilt.clone();
            async move {
                let req = request("/api/v1/market/indices");
                black_box(&req);
                black_box(http::Response::new(mdproxy_core::edge::body::full(body)).status())
            }
        })
    });
    group.finish();
    assert_eq!(
        sim.total(),
        upstream_before,
        "the measured requests never reached the upstream"
    );

    // Hit / floor ratio: the mean of a fixed number of calls of each, measured the
    // same way (criterion's own estimates are in its report).
    const CALLS: u32 = 2_000;
    let mean = |f: &dyn Fn() -> Duration| f() / CALLS;
    let floor = mean(&|| {
        rt.block_on(async {
            let started = Instant::now();
            for _ in 0..CALLS {
                let req = request("/api/v1/market/indices");
                black_box(&req);
                black_box(
                    http::Response::new(mdproxy_core::edge::body::full(prebuilt.clone())).status(),
                );
            }
            started.elapsed()
        })
    });
    println!("cache_hit: prebuilt_bytes_floor {floor:?} per call");
    for (name, uri) in targets {
        let hit = mean(&|| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..CALLS {
                    let r = edge
                        .handle(request(uri), connection.clone())
                        .await
                        .expect("infallible");
                    black_box(r.status());
                }
                started.elapsed()
            })
        });
        let ratio = hit.as_secs_f64() / floor.as_secs_f64().max(1e-12);
        println!("cache_hit: {name} {hit:?} per call, hit/floor ratio {ratio:.1}");
    }
    rt.block_on(async {
        proxy.shutdown().await;
        sim.shutdown().await;
    });
}

criterion_group!(benches, cache_hit);
criterion_main!(benches);
