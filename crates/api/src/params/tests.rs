//! Validation and keys: canonical order, defaults, codes, classes, settling, venues,
//! empty values, the order of pairs, the retired flows, errors naming parameters.

use super::*;
use crate::catalog::catalog;

fn ep(path: &str) -> &'static Endpoint {
    catalog().by_path(path).unwrap()
}

fn check(path: &str, params: &[&str], query: &str) -> Result<Valid, Error> {
    validate(ep(path), params, (!query.is_empty()).then_some(query))
}

#[test]
fn key_is_canonical_order_with_defaults() {
    let a = check("/stock/kline", &[], "fqt=pre&code=600519&period=day").unwrap();
    let b = check(
        "/stock/kline",
        &[],
        "period=day&code=600519.SH&fqt=pre&_=123",
    )
    .unwrap();
    assert_eq!(a.target, "/stock/kline?code=600519&period=day&fqt=pre");
    assert_eq!(a, b);
    let h1 = check("/news/headlines", &[], "").unwrap();
    let h2 = check(
        "/news/headlines",
        &[],
        "keyword=%E6%96%B0%E9%97%BB%E8%81%94%E6%92%AD%E8%A6%81%E9%97%BB",
    )
    .unwrap();
    assert_eq!(h1.target, h2.target);
    assert_eq!(h1.query_value("keyword").unwrap(), "新闻联播要闻");
    let p = check("/stock/detail/{code}", &["600519"], "").unwrap();
    assert_eq!(p.target, "/stock/detail/600519");
    let n = check("/macro/pmi", &[], "page=001&pageSize=20").unwrap();
    assert_eq!(n.target, "/macro/pmi?page=1&pageSize=20");
}

/// Codes as people type them are one key, forwarded in the documented form.
#[test]
fn typed_codes_are_one_key() {
    let forms = ["600519", "600519.SH", "sh600519", "SH.600519", "1.600519"];
    for form in forms {
        let v = check("/stock/detail/{code}", &[form], "").unwrap();
        assert_eq!(v.target, "/stock/detail/600519", "{form}");
        let v = check("/stock/kline", &[], &format!("code={form}")).unwrap();
        assert_eq!(v.target, "/stock/kline?code=600519&period=day", "{form}");
    }
    let hk = check("/stock/kline", &[], "code=0700.HK&period=5m").unwrap();
    assert_eq!(hk.target, "/stock/kline?code=00700&period=5m");
    let list = check("/stock/list", &[], "codes=SH600519,sz000001").unwrap();
    assert_eq!(list.target, "/stock/list?codes=600519%2C000001");
    let fund = check("/fund/kline", &[], "code=SZ159915").unwrap();
    assert_eq!(fund.target, "/fund/kline?code=159915&period=day&fqt=pre");
}

/// Documented defaults are applied: an absent parameter and its default are one key.
#[test]
fn documented_defaults_make_one_key() {
    for (path, bare, spelled) in [
        (
            "/fund/kline",
            "code=510300",
            "code=510300&period=day&fqt=pre",
        ),
        ("/news/headlines", "", "page=0&pageSize=10"),
        ("/stock/selection", "", "page=1&pageSize=50"),
        ("/stock/kline", "code=600519", "code=600519&period=day"),
        (
            "/market/sector-flow/list",
            "",
            "dimension=industry&page=1&pageSize=50",
        ),
        (
            "/stock/screener/universe",
            "",
            "market=CN_A&page=1&pageSize=100",
        ),
    ] {
        let a = check(path, &[], bare).unwrap();
        let b = check(path, &[], spelled).unwrap();
        assert_eq!(a.target, b.target, "{path}");
    }
}

/// Minute periods have their own class; a range that ended settles unless it is
/// forward-adjusted.
#[test]
fn minute_klines_and_settled_ranges() {
    let minute = check("/stock/kline", &[], "code=600519&period=1m").unwrap();
    assert_eq!(minute.class, FreshnessClass::Minute);
    let day = check("/stock/kline", &[], "code=600519").unwrap();
    assert_eq!(day.class, FreshnessClass::Intraday);
    let ended = check("/stock/kline", &[], "code=600519&fqt=none&to=2024-12-31").unwrap();
    assert_eq!(ended.settles, NaiveDate::from_ymd_opt(2025, 1, 1));
    let pre = check("/stock/kline", &[], "code=600519&fqt=pre&to=2024-12-31").unwrap();
    assert_eq!(pre.settles, None, "forward adjustment never settles");
    let absent = check("/stock/kline", &[], "code=600519&to=2024-12-31").unwrap();
    assert_eq!(absent.settles, None, "an absent fqt is the upstream's pre");
    let fund = check("/fund/kline", &[], "code=510300&fqt=after").unwrap();
    assert_eq!(fund.settles, None, "no range, nothing final");
    let snapshot = check(
        "/stock/financial/snapshot/{code}",
        &["000001"],
        "reportDate=2024-12-31",
    )
    .unwrap();
    assert_eq!(snapshot.settles, NaiveDate::from_ymd_opt(2026, 5, 1));
    // A text bound that only looks like a date to chrono settles nothing.
    for loose in ["2024-1-5", "1-1-1"] {
        let actions = check(
            "/stock/corporate-actions",
            &[],
            &format!("code=600519&to={loose}"),
        );
        assert_eq!(actions.unwrap().settles, None, "{loose}");
    }
}

/// A bad known parameter is reported whatever unknown ones come with it, in any
/// order; an unknown one only when everything known is right.
#[test]
fn the_error_does_not_depend_on_the_order_of_the_pairs() {
    for query in [
        "code=600519&foo=1&period=2m",
        "foo=1&code=600519&period=2m",
        "period=2m&code=600519&foo=1",
    ] {
        let e = check("/stock/kline", &[], query).unwrap_err();
        assert_eq!(
            (e.code(), e.param()),
            ("invalid_parameter", Some("period")),
            "{query}"
        );
    }
    for query in ["foo=1", "foo=1&period=day"] {
        let e = check("/stock/kline", &[], query).unwrap_err();
        assert_eq!(
            (e.code(), e.param()),
            ("missing_parameter", Some("code")),
            "{query}"
        );
    }
    let e = check("/stock/kline", &[], "bar=2&code=600519&foo=1").unwrap_err();
    assert_eq!((e.code(), e.param()), ("unknown_parameter", Some("bar")));
}

/// An empty date is absent, an empty text a value, an empty number or choice a
/// refusal.
#[test]
fn empty_values_are_read_by_kind() {
    let absent = check("/stock/kline", &[], "code=600519&from=&to=").unwrap();
    assert_eq!(absent.target, "/stock/kline?code=600519&period=day");
    let text = check("/news/headlines", &[], "keyword=").unwrap();
    assert_eq!(text.target, "/news/headlines?page=0&pageSize=10&keyword=");
    for (path, query, param) in [
        ("/news/headlines", "page=", "page"),
        ("/stock/kline", "code=600519&fqt=", "fqt"),
        ("/stock/governance/events/{code}", "dedupe=", "dedupe"),
    ] {
        let params: &[&str] = if path.contains('{') { &["600519"] } else { &[] };
        let e = check(path, params, query).unwrap_err();
        assert_eq!(
            (e.code(), e.param()),
            ("invalid_parameter", Some(param)),
            "{query}"
        );
    }
    let e = check("/stock/kline", &[], "code=").unwrap_err();
    assert_eq!(e.code(), "missing_parameter");
}

/// The retired flows are their successors' requests: key, class, endpoint.
#[test]
fn retired_flows_are_their_successors() {
    for (old, query, new) in [
        (
            "/market/flow",
            "type=1",
            "/market/sector-flow/summary?dimension=region",
        ),
        (
            "/market/flow",
            "",
            "/market/sector-flow/summary?dimension=industry",
        ),
        (
            "/market/flow/list",
            "type=3",
            "/market/sector-flow/list?dimension=concept&page=1&pageSize=50",
        ),
    ] {
        let v = check(old, &[], query).unwrap();
        assert_eq!(v.target, new, "{old}?{query}");
        assert_eq!(v.endpoint.path, new.split('?').next().unwrap());
        assert_eq!(v.class, FreshnessClass::Live);
    }
}

/// HK codes and the HK lists follow Hong Kong's sessions, US secids New York's.
#[test]
fn answers_name_their_venue() {
    for (path, query, venue) in [
        ("/stock/kline", "code=0700.HK", Venue::HongKong),
        ("/stock/kline", "code=116.00700&period=1m", Venue::HongKong),
        ("/stock/kline", "code=105.AAPL", Venue::NewYork),
        ("/stock/kline", "code=600519", Venue::China),
        ("/stock/kline", "code=110059.SH", Venue::China),
        (
            "/market/stocks/realtime-list",
            "market=hk_gem",
            Venue::HongKong,
        ),
        ("/market/stocks/realtime-list", "market=cyb", Venue::China),
        ("/stock/screener/universe", "market=HK", Venue::HongKong),
        ("/stock/screener/universe", "", Venue::China),
        ("/stock/detail/{code}", "", Venue::China),
    ] {
        let params: &[&str] = if path.contains('{') { &["600519"] } else { &[] };
        assert_eq!(
            check(path, params, query).unwrap().venue,
            venue,
            "{path}?{query}"
        );
    }
}

#[test]
fn feed_cursor_changes_class_and_empty_cursor_is_head() {
    let head = check("/news/feed", &[], "cursor=").unwrap();
    assert_eq!(head.target, "/news/feed");
    assert_eq!(head.class, FreshnessClass::News);
    let page = check("/news/feed", &[], "cursor=abc123").unwrap();
    assert_eq!(page.target, "/news/feed?cursor=abc123");
    assert_eq!(page.class, FreshnessClass::Immutable);
}

#[test]
fn forward_adjusted_klines_expire_at_the_open() {
    assert!(
        check("/stock/kline", &[], "code=600519&fqt=pre")
            .unwrap()
            .until_open
    );
    assert!(
        check("/stock/kline", &[], "code=600519")
            .unwrap()
            .until_open
    );
    assert!(
        !check("/stock/kline", &[], "code=600519&fqt=post")
            .unwrap()
            .until_open
    );
    assert!(!check("/market/indices", &[], "").unwrap().until_open);
}

#[test]
fn hotmap_hash_is_validated_but_not_keyed() {
    // Its form is undocumented: any short text, never keyed nor forwarded.
    for hash in ["abcdef0123", "xyz", "a+b/c="] {
        let a = check("/market/hotmap", &[], &format!("quotedata_hash={hash}")).unwrap();
        assert_eq!(a.target, "/market/hotmap", "{hash}");
    }
    assert!(check("/market/hotmap", &[], "quotedata_hash=%01").is_err());
    assert!(
        check(
            "/market/hotmap",
            &[],
            &format!("quotedata_hash={}", "a".repeat(129))
        )
        .is_err()
    );
}

#[test]
fn failures_name_the_parameter() {
    let cases: &[(&str, &[&str], &str, &str, &str)] = &[
        (
            "/stock/kline",
            &[],
            "code=600519&period=year",
            "invalid_parameter",
            "period",
        ),
        (
            "/stock/kline",
            &[],
            "code=600519&fqt=qfq",
            "invalid_parameter",
            "fqt",
        ),
        (
            "/stock/kline",
            &[],
            "period=day",
            "missing_parameter",
            "code",
        ),
        (
            "/stock/kline",
            &[],
            "code=1234",
            "invalid_parameter",
            "code",
        ),
        (
            "/stock/detail/{code}",
            &["00700"],
            "",
            "invalid_parameter",
            "code",
        ),
        ("/stock/list", &[], "", "missing_parameter", "codes"),
        ("/stock/search", &[], "", "missing_parameter", "keyword"),
        (
            "/stock/news",
            &[],
            "pageSize=5",
            "missing_parameter",
            "code",
        ),
        (
            "/stock/performance/ten-years",
            &[],
            "industryName=%E9%93%B6%E8%A1%8C",
            "missing_parameter",
            "year",
        ),
        (
            "/market/trading-calendar",
            &[],
            "market=HK&from=2024-01-01&to=2024-12-31",
            "invalid_parameter",
            "market",
        ),
        (
            "/market/trading-calendar",
            &[],
            "market=CN_A&from=2024-01-01",
            "missing_parameter",
            "to",
        ),
        (
            "/stock/financial/snapshot/{code}",
            &["000001"],
            "",
            "missing_parameter",
            "reportDate",
        ),
        (
            "/news/topic-subject",
            &[],
            "pageSize=5",
            "missing_parameter",
            "subjectKey or subjectId",
        ),
        (
            "/stock/governance/events/{code}",
            &["000001"],
            "startDate=2024-05-01&endDate=2024-04-01",
            "invalid_parameter",
            "endDate",
        ),
        (
            "/stock/screener/universe",
            &[],
            "pageSize=501",
            "invalid_parameter",
            "pageSize",
        ),
        (
            "/stock/topic/operations-insight/{code}",
            &["000001"],
            "reportDate=202413",
            "invalid_parameter",
            "reportDate",
        ),
        ("/market/flow", &[], "type=4", "invalid_parameter", "type"),
        (
            "/stock/indicator/realtime/sse",
            &[],
            "codes=600519&pz=0",
            "invalid_parameter",
            "pz",
        ),
        (
            "/stock/indicator/realtime/sse",
            &[],
            "codes=600519&pz=101",
            "invalid_parameter",
            "pz",
        ),
        (
            "/stock/indicator/realtime/sse",
            &[],
            "pz=10",
            "missing_parameter",
            "codes",
        ),
        (
            "/stock/indicator/realtime/sse",
            &[],
            "codes=600519,abc",
            "invalid_parameter",
            "codes",
        ),
        (
            "/stock/shareholder/research/{code}",
            &["600519"],
            "",
            "missing_parameter",
            "endDate",
        ),
        (
            "/stock/shareholder/research/{code}",
            &["600519"],
            "endDate=2024-02-30",
            "invalid_parameter",
            "endDate",
        ),
        (
            "/stock/shareholder/research/{code}",
            &["600519"],
            "endDate=2024-6-30",
            "invalid_parameter",
            "endDate",
        ),
        ("/macro/pmi", &[], "page=x", "invalid_parameter", "page"),
        (
            "/macro/pmi",
            &[],
            "pageSize=0",
            "invalid_parameter",
            "pageSize",
        ),
        ("/macro/pmi", &[], "page=-1", "invalid_parameter", "page"),
        ("/macro/pmi", &[], "foo=1", "unknown_parameter", "foo"),
        (
            "/macro/pmi",
            &[],
            "page=1&page=2",
            "invalid_parameter",
            "page",
        ),
        (
            "/stock/detail/{code}",
            &["abc"],
            "",
            "invalid_parameter",
            "code",
        ),
        (
            "/fund/kline",
            &[],
            "code=510300&period=hour",
            "invalid_parameter",
            "period",
        ),
        // A pair without a name whose value is not UTF-8 (proptest found it).
        (
            "/macro/gdp/series",
            &[],
            "code=&=%a0",
            "invalid_parameter",
            "query",
        ),
    ];
    for (path, params, query, code, param) in cases {
        let err = check(path, params, query).expect_err(query);
        assert_eq!(err.code(), *code, "{path}?{query}");
        assert_eq!(err.param(), Some(*param), "{path}?{query}");
    }
}

#[test]
fn every_example_target_validates() {
    for e in catalog().endpoints() {
        let target = e.example_target();
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
            None => (target.clone(), None),
        };
        let params: Vec<&str> = path
            .split('/')
            .zip(e.path.split('/'))
            .filter(|(_, t)| t.starts_with('{'))
            .map(|(v, _)| v)
            .collect();
        validate(e, &params, query.as_deref()).unwrap_or_else(|err| panic!("{target}: {err}"));
    }
}

/// Found by the fuzz test: a pair without a name (`_=&=`) was refused as an unknown
/// parameter named "" ("unknown parameter "). It is a bad request naming what is
/// wrong, wherever it stands among the pairs.
#[test]
fn a_pair_without_a_name_is_a_bad_request() {
    for query in [
        "code=600519&_=&=",
        "=x&code=600519",
        "code=600519&=1",
        "=&code=600519",
    ] {
        let e = check("/stock/kline", &[], query).unwrap_err();
        assert_eq!(e.code(), "bad_request", "{query}");
        assert!(e.to_string().contains("no name"), "{query}: {e}");
    }
}

/// Query validation, fuzzed: for every endpoint, any query (known and unknown
/// names, values valid and not, percent-encoded bytes, repeats) is refused with an
/// error that names a parameter, or made a key that validates to itself again;
/// nothing panics. `PROPTEST_CASES` sets how many; scripts/test runs many.
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use crate::parse_target;

    /// A value of `param`'s kind as a client might type it, or not.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "[0-9]{1,8}",
            "[0-9]{6}(\\.(SH|SZ|BJ|sh|HK))?",
            "(19|20)[0-9]{2}-[01][0-9]-[0-3][0-9]",
            "20[0-9]{4}",
            "(day|week|month|pre|post|none|true|false|1|2|3)",
            "[ -~]{0,16}",
            "(%[0-9A-Fa-f]{2}){1,6}",
            "[\u{4e00}-\u{4e40}]{1,6}",
        ]
    }

    /// Pairs whose names are mostly the endpoint's own.
    fn query(endpoint: &'static Endpoint) -> impl Strategy<Value = String> {
        let known: Vec<&'static str> = endpoint.query.iter().map(|p| p.name).collect();
        let known = if known.is_empty() {
            vec!["code"]
        } else {
            known
        };
        let name = prop_oneof![
            3 => proptest::sample::select(known).prop_map(str::to_owned),
            1 => "[a-z_]{1,8}",
            1 => Just("_".to_owned()),
        ];
        let pair = (name, value()).prop_map(|(n, v)| format!("{n}={v}"));
        proptest::collection::vec(pair, 0..6).prop_map(|pairs| pairs.join("&"))
    }

    fn endpoint() -> impl Strategy<Value = &'static Endpoint> {
        let all: Vec<&'static Endpoint> = catalog()
            .endpoints()
            .iter()
            .filter(|e| !e.streaming)
            .collect();
        proptest::sample::select(all)
    }

    proptest! {
        #[test]
        fn any_query_is_refused_by_name_or_keyed_stably(
            (endpoint, query, path_value) in endpoint().prop_flat_map(|e| (Just(e), query(e), value()))
        ) {
            let path_values: Vec<&str> = e_path_values(endpoint, &path_value);
            match validate(endpoint, &path_values, Some(&query)) {
                Ok(valid) => {
                    let again = parse_target(&valid.target)
                        .unwrap_or_else(|e| panic!("{} does not validate again: {e}", valid.target));
                    prop_assert_eq!(again.target, valid.target);
                }
                Err(e) => {
                    let named = matches!(
                        e.code(),
                        "missing_parameter" | "invalid_parameter" | "unknown_parameter"
                    );
                    prop_assert!(
                        !named || e.param().is_some_and(|p| !p.is_empty()),
                        "{} names no parameter", e.code()
                    );
                    prop_assert!(!e.to_string().is_empty());
                }
            }
        }

        /// Raw bytes as a query: refused or keyed, never a panic.
        #[test]
        fn any_bytes_as_a_query_are_refused_or_keyed(
            endpoint in endpoint(),
            bytes in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let query = String::from_utf8_lossy(&bytes);
            let _ = validate(endpoint, &[], Some(&query));
        }
    }

    /// The same value (raw, percent-encoded as a path segment) for each path
    /// parameter of `endpoint`.
    fn e_path_values<'a>(endpoint: &Endpoint, value: &'a str) -> Vec<&'a str> {
        endpoint.path_params.iter().map(|_| value).collect()
    }
}
