//! Parameter validation and the canonical cache key. A request that passes becomes a
//! [`Valid`] whose `target` (path and canonical query) is both the cache key and the
//! request sent upstream; anything else becomes an [`Error`] naming the parameter.

use std::borrow::Cow;

use chrono::{Months, NaiveDate};

use crate::catalog::{
    ClassRule, Endpoint, FreshnessClass, KeyRole, Successor, VenueRule, segments,
};
use crate::error::Error;
use crate::value::{canonical, is_date};
use mdproxy_market::Venue;

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
    /// The first date (where its market trades) on which an answer fetched is final
    /// ([`FreshnessClass::Immutable`]): the catalogue's `settles` rule applied to this
    /// request's date.
    pub settles: Option<NaiveDate>,
    /// The market whose sessions this answer follows.
    pub venue: Venue,
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
/// use mdproxy_api::catalog::catalog;
/// let kline = catalog().by_path("/stock/kline").unwrap();
/// let valid = mdproxy_api::params::validate(kline, &[], Some("fqt=pre&code=000001&_=17")).unwrap();
/// // Canonical order and code; the cache-buster is not part of the key.
/// assert_eq!(valid.target, "/stock/kline?code=000001&period=day&fqt=pre");
/// let err = mdproxy_api::params::validate(kline, &[], Some("code=000001&period=hour")).unwrap_err();
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
    // The path first: a bad path parameter is the catalogue's 400 even beside a
    // query parameter the endpoint does not take (whose error pass-through reads as
    // "forward it as it is").
    let mut target = String::with_capacity(endpoint.path.len() + 48);
    write_path(endpoint, raw_path_params, &mut target)?;
    let mut values = read_query(endpoint, raw_query)?;
    if let Some(successor) = endpoint.successor {
        return as_successor(endpoint, successor, raw_path_params, &values);
    }
    let (target, keyed) = write_query(endpoint, target, &mut values);
    Ok(Valid {
        endpoint,
        target,
        class: keyed.class,
        until_open: keyed.until_open,
        // Forward adjustment rewrites history at every ex-dividend date: never final.
        settles: keyed.settles.filter(|_| !keyed.until_open),
        venue: keyed.venue,
    })
}

/// The canonical value of each query parameter of an endpoint, in its order
/// (`None`: not given, or given empty where empty means absent).
type Values<'a> = [Option<Cow<'a, str>>; MAX_QUERY];

/// Reads `raw_query` for `endpoint`: each pair checked and made canonical, then
/// the ranges, the one-of groups, the required parameters, and last an unknown one.
fn read_query<'a>(endpoint: &Endpoint, raw_query: Option<&'a str>) -> Result<Values<'a>, Error> {
    let mut values: Values<'a> = Default::default();
    debug_assert!(endpoint.query.len() <= MAX_QUERY);
    // A parameter the endpoint does not take is reported only once everything the
    // endpoint does take is right: then the answer does not depend on the order of
    // the pairs, and an unknown parameter (which pass-through may forward) never
    // hides a bad known one (which it must not).
    let mut unknown = None;
    let mut unnamed = false;
    let mut given = [false; MAX_QUERY];
    for pair in query_pairs(raw_query.unwrap_or("")) {
        let (name, value) = pair?;
        let Some(index) = endpoint.query.iter().position(|p| p.name == name) else {
            if name.is_empty() {
                unnamed = true;
            } else if !is_ignored(&name) && unknown.is_none() {
                let near = crate::suggest::suggest(&name, endpoint.query.iter().map(|p| p.name));
                unknown = Some((truncate(&name, 64), near.first().copied()));
            }
            continue;
        };
        let param = &endpoint.query[index];
        if std::mem::replace(&mut given[index], true) {
            return Err(Error::invalid(
                param.name,
                format!("{} is given more than once", param.name),
            ));
        }
        if value.is_empty() && param.required {
            // The upstream refuses a required parameter given empty as missing.
            return Err(Error::MissingParameter {
                param: param.name.to_owned(),
            });
        }
        if value.is_empty() && param.empty_is_absent {
            continue;
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
    if let Some(param) = endpoint
        .query
        .iter()
        .zip(&values)
        .find(|(p, v)| p.required && v.is_none())
        .map(|(p, _)| p.name)
    {
        return Err(Error::MissingParameter {
            param: param.to_owned(),
        });
    }
    if unnamed {
        // `?=x` or a stray `&=`: nothing to name, and nothing a client meant.
        return Err(Error::BadRequest {
            reason: "a query pair has no name (as in `=value`): remove it".into(),
        });
    }
    match unknown {
        Some((param, suggestion)) => Err(Error::UnknownParameter { param, suggestion }),
        None => Ok(values),
    }
}

/// Writes the canonical path of `endpoint` with its path parameters (raw, still
/// percent-encoded, in template order) into `target`.
fn write_path(
    endpoint: &Endpoint,
    raw_path_params: &[&str],
    target: &mut String,
) -> Result<(), Error> {
    let mut path_params = raw_path_params.iter();
    let mut path_specs = endpoint.path_params.iter();
    for segment in segments(&endpoint.path) {
        target.push('/');
        if crate::catalog::param_name(segment).is_none() {
            target.push_str(segment);
            continue;
        }
        let (Some(param), Some(raw)) = (path_specs.next(), path_params.next()) else {
            return Err(Error::NOT_FOUND);
        };
        // Decoded only where there is a `%` (seldom): the decoder's walk cost a
        // miss about 200 instructions for a six-digit code.
        let decoded = if !raw.as_bytes().contains(&b'%') {
            std::borrow::Cow::Borrowed(*raw)
        } else {
            percent_encoding::percent_decode_str(raw)
                .decode_utf8()
                .map_err(|_| {
                    Error::invalid(param.name, format!("{} is not valid UTF-8", param.name))
                })?
        };
        // Path values are restricted to [0-9A-Za-z._-] by every path kind, so they
        // need no escaping in the target.
        target.push_str(&canonical(param, decoded)?);
    }
    Ok(())
}

/// What the values of a request decide beside its key.
struct Keyed {
    class: FreshnessClass,
    until_open: bool,
    settles: Option<NaiveDate>,
    venue: Venue,
}

/// Appends the key's query (defaults applied, canonical order) to `target` (its
/// path), reading what the values decide on the way: the freshness class, whether
/// the answer holds until the open, when it settles and its market.
fn write_query(endpoint: &Endpoint, target: String, values: &mut Values<'_>) -> (String, Keyed) {
    let mut keyed = Keyed {
        class: endpoint.class,
        // Absent counts as the value: the upstream's default adjustment is forward.
        until_open: endpoint.until_open_when.is_some(),
        settles: None,
        venue: Venue::China,
    };
    // Pairs follow a `?`; the `?` goes again when no pair was written.
    let mut target = target;
    target.push('?');
    let query_start = target.len();
    let mut query = form_urlencoded::Serializer::for_suffix(target, query_start);
    for (param, value) in endpoint.query.iter().zip(values.iter_mut()) {
        let value = match value.take() {
            Some(v) => v,
            None => match param.default {
                Some(d) => Cow::Borrowed(d),
                None => continue,
            },
        };
        keyed.read(endpoint, param.name, &value);
        if param.role == KeyRole::Key {
            query.append_pair(param.name, &value);
        }
    }
    let mut target = query.finish();
    if target.len() == query_start {
        target.pop();
    }
    (target, keyed)
}

impl Keyed {
    /// What the value of parameter `name` decides under `endpoint`'s rules.
    fn read(&mut self, endpoint: &Endpoint, name: &str, value: &str) {
        for rule in endpoint.class_rules {
            match *rule {
                ClassRule::Present(rule_name, other) if rule_name == name => self.class = other,
                ClassRule::OneOf(rule_name, values, other)
                    if rule_name == name && values.contains(&value) =>
                {
                    self.class = other;
                }
                _ => {}
            }
        }
        if let Some((rule_name, when)) = endpoint.until_open_when
            && rule_name == name
        {
            self.until_open = value == when;
        }
        if let Some(rule) = endpoint.settles
            && rule.param == name
        {
            self.settles = settled_from(value, rule.months);
        }
        match endpoint.venue {
            Some(VenueRule::OfCode(rule_name)) if rule_name == name => {
                self.venue = code_venue(value);
            }
            Some(VenueRule::HongKongFor(rule_name, values))
                if rule_name == name && values.contains(&value) =>
            {
                self.venue = Venue::HongKong;
            }
            _ => {}
        }
    }
}

/// The market of a canonical K-line code: five digits are an HK code, a secid of
/// market 105/106/107 a US one, anything else an A-share code.
fn code_venue(code: &str) -> Venue {
    if code.len() == 5 && code.bytes().all(|b| b.is_ascii_digit()) {
        Venue::HongKong
    } else if ["105.", "106.", "107."].iter().any(|m| code.starts_with(m)) {
        Venue::NewYork
    } else {
        Venue::China
    }
}

/// A retired endpoint's validated request as its successor's: the renamed parameter
/// and its value translated, the rest as given; then validated as the successor's,
/// which gives it the successor's key, class and lifetimes.
fn as_successor(
    endpoint: &Endpoint,
    successor: Successor,
    raw_path_params: &[&str],
    values: &[Option<Cow<'_, str>>],
) -> Result<Valid, Error> {
    let target = crate::catalog::catalog()
        .by_path(successor.path)
        .expect("a successor is a catalogue path (a catalogue test checks it)");
    let (old, new, map) = successor.renamed;
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (param, value) in endpoint.query.iter().zip(values) {
        let Some(value) = value else { continue };
        if param.name == old {
            let mapped = map
                .iter()
                .find(|(from, _)| *from == value.as_ref())
                .map_or(value.as_ref(), |(_, to)| *to);
            query.append_pair(new, mapped);
        } else {
            query.append_pair(param.name, value);
        }
    }
    let query = query.finish();
    validate(
        target,
        raw_path_params,
        (!query.is_empty()).then_some(query.as_str()),
    )
}

/// The first day on which data bounded by the date `value` is final, `months` after
/// it (the next day for 0). `None` for a value that is not a `YYYY-MM-DD` date.
fn settled_from(value: &str, months: u32) -> Option<NaiveDate> {
    // Only a strict date: chrono also reads `2024-1-5` or ` 1-1-1`, which a text
    // bound may hold and the upstream may not read as a date at all (a list still
    // growing would be kept as final).
    if !crate::value::is_date(value) {
        return None;
    }
    let date = NaiveDate::parse_from_str(value, "%Y-%m-%d").ok()?;
    date.checked_add_months(Months::new(months))?.succ_opt()
}

/// A query's name/value pairs (`application/x-www-form-urlencoded`: `+` is a
/// space), percent-decoded strictly. A name or value whose bytes are not UTF-8 (a
/// GBK-encoded keyword) is refused naming the parameter, never replaced by U+FFFD:
/// two different byte strings must never become one cache key.
///
/// ```
/// let pairs: Vec<_> = mdproxy_api::params::query_pairs("a=%E9%93%B6+x&b").map(Result::unwrap).collect();
/// assert_eq!(pairs, [("a".into(), "银 x".into()), ("b".into(), "".into())]);
/// let gbk = mdproxy_api::params::query_pairs("keyword=%D0%C2%CE%C5").next().unwrap();
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
            // A pair without a name (`=%A0`) has nothing else to name.
            if name.is_empty() {
                return Error::invalid(
                    "query",
                    "the value of a pair without a name is not UTF-8 once percent-decoded",
                );
            }
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

/// Date ranges whose end must not come before their start.
const RANGES: [(&str, &str); 2] = [("from", "to"), ("startDate", "endDate")];

/// A range of two `YYYY-MM-DD` dates must not end before it starts (the text order
/// is then the date order). Bounds in a form the docs leave open are the upstream's
/// to read.
fn check_ranges(endpoint: &Endpoint, values: &[Option<Cow<'_, str>>]) -> Result<(), Error> {
    let value = |name: &str| {
        let index = endpoint.query.iter().position(|p| p.name == name)?;
        values[index].as_deref().filter(|v| is_date(v))
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
mod tests;
