//! Parameter validation and the canonical cache key. A request that passes becomes a
//! [`Valid`] whose `target` (path and canonical query) is both the cache key and the
//! request sent upstream; anything else becomes an [`Error`] naming the parameter.

use std::borrow::Cow;

use chrono::{Months, NaiveDate};

use crate::api::catalog::{ClassRule, Endpoint, FreshnessClass, KeyRole};
use crate::api::value::canonical;
use crate::error::Error;

/// The browser cache-buster (`?_=1700000000000`): accepted, never part of a key.
pub const CACHE_BUSTER: &str = "_";

/// The client's API key as a query parameter (`?x-api-key=`, the real API's third
/// auth form): checked by the edge, never part of a key, never forwarded.
pub const API_KEY: &str = "x-api-key";

/// Query parameters every endpoint accepts and no key or upstream request carries.
pub fn is_ignored(name: &str) -> bool {
    name == CACHE_BUSTER || name == API_KEY
}

/// Most query parameters any endpoint takes (the regulatory events take ten).
const MAX_QUERY: usize = 12;

/// The start of every pass-through cache key. No catalogue key (a path) starts with
/// it, so a pass-through answer can never stand in for a catalogue one.
pub const PASSTHROUGH_KEY: &str = "passthrough:";

/// A request that passed validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Valid {
    pub endpoint: &'static Endpoint,
    /// The cache key: the path and canonical query relative to `/api/v1`, e.g.
    /// `/stock/kline?code=600519&period=day`, which is also what is sent upstream;
    /// for a pass-through request the same behind [`PASSTHROUGH_KEY`].
    pub target: String,
    /// The freshness class of this particular request.
    pub class: FreshnessClass,
    /// This answer expires at the next open whatever its class says.
    pub until_open: bool,
    /// The first China date on which an answer fetched is final ([`FreshnessClass::Immutable`]):
    /// the catalogue's `settles` rule applied to this request's date.
    pub settles: Option<NaiveDate>,
}

impl Valid {
    /// What is sent upstream: the key without the pass-through namespace.
    pub fn upstream_target(&self) -> &str {
        self.target
            .strip_prefix(PASSTHROUGH_KEY)
            .unwrap_or(&self.target)
    }

    /// The canonical value of a query parameter (after defaults), if present.
    pub fn query_value(&self, name: &str) -> Option<Cow<'_, str>> {
        let (_, query) = self.target.split_once('?')?;
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// Validates the path parameters (raw, still percent-encoded, in template order) and
/// the raw query string of a request for `endpoint`.
///
/// ```
/// use mdproxy::api::catalog::catalog;
/// let kline = catalog().by_path("/stock/kline").unwrap();
/// let valid = mdproxy::api::params::validate(kline, &[], Some("fqt=pre&code=000001&_=17")).unwrap();
/// // Canonical order and code; the cache-buster is not part of the key.
/// assert_eq!(valid.target, "/stock/kline?code=000001&period=day&fqt=pre");
/// let err = mdproxy::api::params::validate(kline, &[], Some("code=000001&period=hour")).unwrap_err();
/// assert_eq!((err.code(), err.param()), ("invalid_parameter", Some("period")));
/// ```
///
/// # Errors
/// `MissingParameter`, `InvalidParameter` or `UnknownParameter`, naming the parameter.
pub fn validate(
    endpoint: &'static Endpoint,
    raw_path_params: &[&str],
    raw_query: Option<&str>,
) -> Result<Valid, Error> {
    let mut values: [Option<Cow<'_, str>>; MAX_QUERY] = Default::default();
    debug_assert!(endpoint.query.len() <= MAX_QUERY);

    for pair in query_pairs(raw_query.unwrap_or("")) {
        let (name, value) = pair?;
        let Some(index) = endpoint.query.iter().position(|p| p.name == name) else {
            if is_ignored(&name) {
                continue;
            }
            return Err(Error::UnknownParameter {
                param: truncate(&name, 64),
            });
        };
        let param = &endpoint.query[index];
        if values[index].is_some() {
            return Err(Error::invalid(
                param.name,
                format!("{} is given more than once", param.name),
            ));
        }
        if value.is_empty() && param.empty_is_absent {
            continue;
        }
        if value.is_empty() && param.required {
            // The upstream refuses a required parameter given empty as missing.
            return Err(Error::MissingParameter {
                param: param.name.to_owned(),
            });
        }
        values[index] = Some(canonical(param, value)?);
    }

    check_ranges(endpoint, &values)?;
    if !endpoint.one_of.is_empty()
        && !endpoint.one_of.iter().any(|name| {
            let index = endpoint.query.iter().position(|p| p.name == *name);
            index.is_some_and(|i| values[i].is_some())
        })
    {
        return Err(Error::MissingParameter {
            param: endpoint.one_of.join(" or "),
        });
    }

    let mut class = endpoint.class;
    // Absent counts as the value: the upstream's default adjustment is forward.
    let mut until_open = endpoint.until_open_when.is_some();
    let mut settles = None;
    let mut target = String::with_capacity(endpoint.path.len() + 48);
    let mut path_params = raw_path_params.iter();
    let mut path_specs = endpoint.path_params.iter();
    for segment in endpoint.path.split('/').skip(1) {
        target.push('/');
        if crate::api::catalog::param_name(segment).is_none() {
            target.push_str(segment);
            continue;
        }
        let (Some(param), Some(raw)) = (path_specs.next(), path_params.next()) else {
            return Err(Error::NotFound);
        };
        let decoded = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| {
                Error::invalid(param.name, format!("{} is not valid UTF-8", param.name))
            })?;
        // Path values are restricted to [0-9A-Za-z._-] by every path kind, so they
        // need no escaping in the target.
        target.push_str(&canonical(param, decoded)?);
    }

    // Pairs follow a `?`; the `?` goes again when no pair was written.
    target.push('?');
    let query_start = target.len();
    let mut query = form_urlencoded::Serializer::for_suffix(target, query_start);
    for (param, value) in endpoint.query.iter().zip(values.iter_mut()) {
        let value = match value.take() {
            Some(v) => v,
            None if param.required => {
                return Err(Error::MissingParameter {
                    param: param.name.to_owned(),
                });
            }
            None => match param.default {
                Some(d) => Cow::Borrowed(d),
                None => continue,
            },
        };
        for rule in endpoint.class_rules {
            match *rule {
                ClassRule::Present(name, other) if name == param.name => class = other,
                ClassRule::OneOf(name, values, other)
                    if name == param.name && values.contains(&value.as_ref()) =>
                {
                    class = other;
                }
                _ => {}
            }
        }
        if let Some((name, when)) = endpoint.until_open_when
            && name == param.name
        {
            until_open = value == when;
        }
        if let Some(rule) = endpoint.settles
            && rule.param == param.name
        {
            settles = settled_from(&value, rule.months);
        }
        if param.role == KeyRole::Key {
            query.append_pair(param.name, &value);
        }
    }
    let mut target = query.finish();
    if target.len() == query_start {
        target.pop();
    }
    Ok(Valid {
        endpoint,
        target,
        class,
        until_open,
        // Forward adjustment rewrites history at every ex-dividend date: never final.
        settles: settles.filter(|_| !until_open),
    })
}

/// The first day on which data bounded by the date `value` is final, `months` after
/// it (the next day for 0). `None` for a value that is not a `YYYY-MM-DD` date.
fn settled_from(value: &str, months: u32) -> Option<NaiveDate> {
    let date = NaiveDate::parse_from_str(value, "%Y-%m-%d").ok()?;
    date.checked_add_months(Months::new(months))?.succ_opt()
}

/// A query's name/value pairs (`application/x-www-form-urlencoded`: `+` is a
/// space), percent-decoded strictly. A name or value whose bytes are not UTF-8 (a
/// GBK-encoded keyword) is refused naming the parameter, never replaced by U+FFFD:
/// two different byte strings must never become one cache key.
///
/// ```
/// let pairs: Vec<_> = mdproxy::api::params::query_pairs("a=%E9%93%B6+x&b").map(Result::unwrap).collect();
/// assert_eq!(pairs, [("a".into(), "银 x".into()), ("b".into(), "".into())]);
/// let gbk = mdproxy::api::params::query_pairs("keyword=%D0%C2%CE%C5").next().unwrap();
/// assert_eq!(gbk.unwrap_err().param(), Some("keyword"));
/// ```
pub fn query_pairs(raw: &str) -> impl Iterator<Item = Result<(Cow<'_, str>, Cow<'_, str>), Error>> {
    raw.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = form_decode(name).ok_or_else(|| {
            Error::invalid(
                "query",
                "a parameter name is not UTF-8 once percent-decoded",
            )
        })?;
        let value = form_decode(value).ok_or_else(|| {
            Error::invalid(
                &truncate(&name, 64),
                format!("{} is not UTF-8 once percent-decoded", truncate(&name, 64)),
            )
        })?;
        Ok((name, value))
    })
}

/// Percent-decodes one form component, `+` as a space; `None` unless UTF-8.
fn form_decode(s: &str) -> Option<Cow<'_, str>> {
    if s.contains('+') {
        let spaced = s.replace('+', " ");
        let decoded = percent_encoding::percent_decode_str(&spaced)
            .decode_utf8()
            .ok()?;
        Some(Cow::Owned(decoded.into_owned()))
    } else {
        percent_encoding::percent_decode_str(s).decode_utf8().ok()
    }
}

/// Date ranges whose end must not come before their start (both are `YYYY-MM-DD`,
/// so the text order is the date order).
const RANGES: [(&str, &str); 2] = [("from", "to"), ("startDate", "endDate")];

/// A range must not end before it starts.
fn check_ranges(endpoint: &Endpoint, values: &[Option<Cow<'_, str>>]) -> Result<(), Error> {
    let value = |name: &str| {
        let index = endpoint.query.iter().position(|p| p.name == name)?;
        values[index].as_deref()
    };
    for (start, end) in RANGES {
        if let (Some(from), Some(to)) = (value(start), value(end))
            && from > to
        {
            return Err(Error::invalid(
                end,
                format!("{end} ({to}) must not be before {start} ({from})"),
            ));
        }
    }
    Ok(())
}

fn truncate(s: &str, max_chars: usize) -> String {
    s.chars().take(max_chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::catalog::catalog;

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
        let a = check("/market/hotmap", &[], "quotedata_hash=abcdef0123").unwrap();
        assert_eq!(a.target, "/market/hotmap");
        assert!(check("/market/hotmap", &[], "quotedata_hash=xyz").is_err());
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
}
