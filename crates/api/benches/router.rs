//! Router + validation + canonical key building: the per-request work before the
//! cache lookup.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mdproxy_api::catalog::catalog;
use mdproxy_api::params;
use mdproxy_api::router::Router;

fn route_and_key(c: &mut Criterion) {
    let router = Router::new(catalog());
    let cases = [
        ("static", "/market/indices", None),
        ("path_param", "/stock/detail/600519", None),
        (
            "kline_query",
            "/stock/kline",
            Some("code=000001&period=day&fqt=pre"),
        ),
        (
            "default_keyword",
            "/news/headlines",
            Some("page=0&pageSize=10"),
        ),
        (
            "macro_table",
            "/macro/currency-supply",
            Some("page=1&pageSize=20"),
        ),
    ];
    let mut group = c.benchmark_group("route_validate_key");
    for (name, path, query) in cases {
        group.bench_function(name, |b| {
            b.iter(|| {
                let route = router.route(black_box(path)).expect("routes");
                let valid = params::validate(route.endpoint, route.params(), black_box(query))
                    .expect("valid");
                black_box(valid.target.len())
            })
        });
    }
    group.bench_function("not_found", |b| {
        b.iter(|| black_box(router.route(black_box("/stock/nothing/here"))).is_none())
    });
    group.finish();
}

criterion_group!(benches, route_and_key);
criterion_main!(benches);
