//! The catalogue against what it must hold: every documented endpoint, the docs'
//! rules as data, example targets, classes, the retired endpoints' successors.

use super::*;

/// The catalogue holds the 91 documented GET endpoints and the two retired flows,
/// each path once.
#[test]
fn catalogue_has_every_documented_get_endpoint() {
    let c = catalog();
    assert_eq!(c.len(), 93);
    let mut paths: Vec<&str> = c.endpoints().iter().map(|e| e.path.as_str()).collect();
    paths.sort_unstable();
    paths.dedup();
    assert_eq!(paths.len(), 93);
    assert_eq!(c.endpoints().iter().filter(|e| e.streaming).count(), 1);
    let per_group = |g: Group| c.endpoints().iter().filter(|e| e.group == g).count();
    assert_eq!(per_group(Group::News), 9);
    assert_eq!(per_group(Group::Stock), 42);
    assert_eq!(per_group(Group::Macro), 22);
    assert_eq!(per_group(Group::Fund), 10);
    assert_eq!(per_group(Group::Market), 6 + 4);
}

/// The docs' rules are in the data: required parameters, defaults, one-of.
#[test]
fn documented_rules_are_data() {
    let c = catalog();
    let research = c.by_path("/stock/shareholder/research/{code}").unwrap();
    assert!(research.query_param("endDate").unwrap().required);
    let sse = c.by_path(STREAM_PATH).unwrap();
    assert!(sse.query_param("codes").unwrap().required);
    assert_eq!(sse.query_param("pz").unwrap().default, Some("20"));
    let headlines = c.by_path("/news/headlines").unwrap();
    assert_eq!(
        headlines.query_param("keyword").unwrap().default,
        Some("新闻联播要闻")
    );
    assert_eq!(
        headlines.query_param("pageSize").unwrap().default,
        Some("10")
    );
    assert!(
        c.by_path("/news/feed")
            .unwrap()
            .query_param("cursor")
            .unwrap()
            .empty_is_absent
    );
    assert!(
        c.by_path("/stock/list")
            .unwrap()
            .query_param("codes")
            .unwrap()
            .required
    );
    let topic = c.by_path("/news/topic-subject").unwrap();
    assert_eq!(topic.one_of, ["subjectKey", "subjectId"]);
    let fund = c.by_path("/fund/kline").unwrap();
    assert_eq!(fund.query_param("fqt").unwrap().default, Some("pre"));
    assert_eq!(fund.patience, Patience::Long);
}

#[test]
fn example_targets_fill_path_and_required_params() {
    let c = catalog();
    assert_eq!(
        c.by_path("/stock/detail/{code}").unwrap().example_target(),
        "/stock/detail/600519"
    );
    assert_eq!(
        c.by_path("/stock/kline").unwrap().example_target(),
        "/stock/kline?code=600519"
    );
    assert_eq!(
        c.by_path("/news/topic-subject").unwrap().example_target(),
        "/news/topic-subject?subjectKey=morning_brief"
    );
}

/// A retired endpoint's successor is in the catalogue, with the class the
/// retired one states, and takes the renamed parameter with every mapped value.
#[test]
fn retired_endpoints_name_their_successors() {
    let retired: Vec<&Endpoint> = catalog()
        .endpoints()
        .iter()
        .filter(|e| e.successor.is_some())
        .collect();
    assert_eq!(retired.len(), 2);
    for e in retired {
        let successor = e.successor.unwrap();
        let next = catalog().by_path(successor.path).unwrap();
        assert_eq!(e.class, next.class, "{}", e.path);
        let (old, new, map) = successor.renamed;
        let ParamKind::Choice(values) = e.query_param(old).unwrap().kind else {
            panic!("{}: {old} is a choice", e.path);
        };
        let ParamKind::Choice(to) = next.query_param(new).unwrap().kind else {
            panic!("{}: {new} is a choice", successor.path);
        };
        for value in values {
            let mapped = map.iter().find(|(from, _)| from == value).unwrap().1;
            assert!(to.contains(&mapped), "{}: {value}", e.path);
        }
    }
}

#[test]
fn classes_of_an_endpoint_include_its_rules_and_settling() {
    let kline = catalog().by_path("/stock/kline").unwrap();
    assert_eq!(
        kline.classes(),
        [
            FreshnessClass::Intraday,
            FreshnessClass::Minute,
            FreshnessClass::Immutable
        ]
    );
    let detail = catalog().by_path("/stock/detail/{code}").unwrap();
    assert_eq!(detail.classes(), [FreshnessClass::Live]);
}

/// The byte scan cuts paths as `str::split('/')` after the leading `/` does, empty
/// segments included.
#[test]
fn segments_are_split_as_str_split_cuts_them() {
    for path in [
        "/stock/detail/{code}",
        "/",
        "/a//b/",
        "/新闻/搜索",
        "a/b",
        "",
    ] {
        let by_split: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
        assert_eq!(segments(path).collect::<Vec<_>>(), by_split, "{path:?}");
    }
    assert_eq!(split_slash("a/b/c"), ("a", Some("b/c")));
    assert_eq!(split_slash("abc"), ("abc", None));
    for endpoint in catalog().endpoints() {
        let by_split: Vec<&str> = endpoint.path.split('/').skip(1).collect();
        assert_eq!(segments(&endpoint.path).collect::<Vec<_>>(), by_split);
    }
}
