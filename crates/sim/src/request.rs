//! How the simulated upstream reads a request, leniently as a NestJS service would:
//! the route (from the documented list, `docs`), the raw query, codes with or
//! without suffix. It shares no validation with the proxy, so the two sides can
//! disagree.

use chrono::NaiveDate;
use percent_encoding::percent_decode_str;

use super::docs;

pub use super::refusal::Refusal;

/// What a handler gives back: the `data` payload, or why not.
pub type Answer = Result<serde_json::Value, Refusal>;

/// One routed request: which route, its decoded path parameters and its query.
#[derive(Debug)]
pub struct Call {
    /// The documented template (`/stock/detail/{code}`).
    pub template: &'static str,
    /// Position in the documented list.
    pub route_id: usize,
    /// Path parameter values, percent-decoded, in template order.
    pub params: Vec<String>,
    pub query: Query,
}

impl Call {
    /// The first path parameter (`{code}`, `{themeId}`), or "".
    pub fn id(&self) -> &str {
        self.params.first().map_or("", String::as_str)
    }

    /// A call of `template` with `query` and no path parameters (unit tests).
    #[cfg(test)]
    pub fn of(template: &'static str, query: &str) -> Call {
        Call {
            template,
            route_id: 0,
            params: Vec::new(),
            query: Query::parse(Some(query)),
        }
    }
}

/// Finds the documented route of `path` (relative to `/api/v1`). `None` for a path
/// the upstream does not serve.
pub fn route(path: &str, query: Option<&str>) -> Option<Call> {
    let (route_id, raw) = docs::route(path)?;
    let params = raw
        .iter()
        .map(|p| percent_decode_str(p).decode_utf8_lossy().into_owned())
        .collect();
    Some(Call {
        template: docs::routes()[route_id].template,
        route_id,
        params,
        query: Query::parse(query),
    })
}

/// A raw query string, decoded. The first value of a name wins; an empty value counts
/// as absent.
#[derive(Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Every pair as sent, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Decodes `raw` (without the `?`).
    pub fn parse(raw: Option<&str>) -> Query {
        let pairs = raw
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Query { pairs }
    }

    /// The value of `name`, if given and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The value of `name`, or 400 when it is missing.
    pub fn required(&self, name: &str) -> Result<&str, Refusal> {
        self.get(name).ok_or(Refusal::BadRequest)
    }

    /// The value of `name` or `default`; 400 when it is not one of `allowed`.
    pub fn choice<'a>(
        &'a self,
        name: &str,
        allowed: &[&'a str],
        default: &'a str,
    ) -> Result<&'a str, Refusal> {
        match self.get(name) {
            None => Ok(default),
            Some(_) => self.required_choice(name, allowed),
        }
    }

    /// A required value that must be one of `allowed` (any case); 400 otherwise.
    pub fn required_choice<'a>(&self, name: &str, allowed: &[&'a str]) -> Result<&'a str, Refusal> {
        let value = self.required(name)?;
        allowed
            .iter()
            .find(|a| a.eq_ignore_ascii_case(value))
            .copied()
            .ok_or(Refusal::BadRequest)
    }

    /// An integer parameter or `default`; 400 when it is not a number.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, Refusal> {
        self.get(name)
            .map_or(Ok(default), |v| v.parse().map_err(|_| Refusal::BadRequest))
    }

    /// A 1-based page number and a page size (at least 1).
    pub fn paging(&self, default_size: i64) -> Result<Paging, Refusal> {
        Ok(Paging {
            page: self.int("page", 1)?.max(1),
            size: self.int("pageSize", default_size)?.max(1),
        })
    }

    /// A `YYYY-MM-DD` parameter, if given; 400 when it is not a date.
    pub fn date(&self, name: &str) -> Result<Option<NaiveDate>, Refusal> {
        self.get(name)
            .map(|v| NaiveDate::parse_from_str(v, "%Y-%m-%d").map_err(|_| Refusal::BadRequest))
            .transpose()
    }

    /// A text parameter or `default`.
    pub fn text<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.get(name).unwrap_or(default)
    }
}

/// A page request: `page` counts from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    pub page: i64,
    pub size: i64,
}

impl Paging {
    /// The items of this page out of `total` items: (skip, take).
    pub fn window(self) -> (usize, usize) {
        (((self.page - 1) * self.size) as usize, self.size as usize)
    }

    /// Pages needed for `count` items.
    pub fn pages(self, count: usize) -> usize {
        count.div_ceil(self.size as usize)
    }

    /// This page of `items`.
    pub fn slice<T: Clone>(self, items: &[T]) -> Vec<T> {
        let (skip, take) = self.window();
        items.iter().skip(skip).take(take).cloned().collect()
    }
}

/// The six digits of a security code given as `600519`, `600519.SH` or `600519.sh`
/// (`.SH`, `.SZ`, `.BJ` in any case); `None` for anything else.
pub fn code_digits(code: &str) -> Option<&str> {
    let (digits, suffix) = match code.split_once('.') {
        Some((d, s)) => (d, Some(s)),
        None => (code, None),
    };
    let suffix_ok = suffix.is_none_or(|s| {
        ["SH", "SZ", "BJ"]
            .iter()
            .any(|known| known.eq_ignore_ascii_case(s))
    });
    (suffix_ok && digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_come_with_or_without_a_suffix_in_any_case() {
        assert_eq!(code_digits("600519"), Some("600519"));
        assert_eq!(code_digits("600519.SH"), Some("600519"));
        assert_eq!(code_digits("000001.sz"), Some("000001"));
        assert_eq!(code_digits("920001.Bj"), Some("920001"));
        assert_eq!(code_digits("600519.HK"), None);
        assert_eq!(code_digits("60051"), None);
        assert_eq!(code_digits("SH600519"), None);
    }

    #[test]
    fn queries_are_read_leniently() {
        let q = Query::parse(Some(
            "page=2&pageSize=&x=1&keyword=%E9%93%B6%E8%A1%8C&page=9",
        ));
        assert_eq!(q.get("page"), Some("2"), "the first value wins");
        assert_eq!(q.get("pageSize"), None, "empty is absent");
        assert_eq!(q.text("keyword", ""), "银行");
        assert_eq!(q.int("pageSize", 50), Ok(50));
        assert_eq!(q.paging(50).unwrap(), Paging { page: 2, size: 50 });
        assert_eq!(
            Query::parse(Some("page=x")).int("page", 1),
            Err(Refusal::BadRequest)
        );
        assert_eq!(q.required("code"), Err(Refusal::BadRequest));
        let fqt = Query::parse(Some("fqt=AFTER"));
        assert_eq!(fqt.choice("fqt", &["pre", "after"], "pre"), Ok("after"));
        assert_eq!(fqt.choice("period", &["day"], "day"), Ok("day"));
        assert!(Query::parse(Some("to=2024-13-01")).date("to").is_err());
    }

    #[test]
    fn routes_come_from_the_documented_list() {
        let call = route("/news/search", Some("keyword=a")).unwrap();
        assert_eq!(call.template, "/news/search");
        let call = route("/stock/detail/600519%2Esh", None).unwrap();
        assert_eq!(call.template, "/stock/detail/{code}");
        assert_eq!(call.id(), "600519.sh");
        assert!(route("/nope", None).is_none());
    }
}
