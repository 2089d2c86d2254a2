//! The canonical target of a request the catalogue does not know (`[passthrough]`):
//! the path as sent, checked so it cannot leave `/api/v1` upstream, and the query
//! sorted by name with credentials and the cache-buster removed. That target is sent
//! upstream; its cache key is the same in a namespace of its own, so a pass-through
//! answer never shares a key with the catalogue's.

use crate::catalog::{FreshnessClass, catalog};
use crate::error::Error;
use crate::params::{PASSTHROUGH_KEY, Valid, is_ignored, query_pairs};
use mdproxy_market::Venue;

/// Query parameters that carry a client credential, in any letter case: never
/// keyed, never forwarded, never logged.
const CREDENTIALS: [&str; 2] = ["access_token", "x-api-key"];

/// Whether `name` is a credential's parameter (`X-Api-Key`, `ACCESS_TOKEN` too).
fn is_credential(name: &str) -> bool {
    CREDENTIALS.iter().any(|c| c.eq_ignore_ascii_case(name))
}

/// Whether a purge of the keys under `prefix` takes `key`: the key starts so, or it
/// is a pass-through key whose path does (`/` takes every answer, `/market/` the
/// pass-through ones under it too); `passthrough:` itself takes them all.
pub fn key_under(key: &str, prefix: &str) -> bool {
    key.starts_with(prefix) || (prefix.starts_with('/') && key_path(key).starts_with(prefix))
}

/// The request path a cache key stands for: a pass-through key's path without its
/// namespace, a catalogue key as it is (`passthrough:/a/b?x=1` → `/a/b?x=1`).
pub fn key_path(key: &str) -> &str {
    key.strip_prefix(PASSTHROUGH_KEY).unwrap_or(key)
}

/// The pass-through request for `path` (relative to `/api/v1`) and `query`, cached
/// under `class`. A request that is a catalogue request once its credentials are
/// removed is answered as the catalogue's (its class, its key).
///
/// ```
/// use mdproxy_api::catalog::FreshnessClass;
/// use mdproxy_api::passthrough::target;
/// let v = target("/market/newer-route", Some("pageSize=50&x-api-key=k&dimension=region&_=1"),
///     FreshnessClass::Intraday, 2048).unwrap();
/// assert_eq!(v.upstream_target(), "/market/newer-route?dimension=region&pageSize=50");
/// assert_eq!(v.target, "passthrough:/market/newer-route?dimension=region&pageSize=50");
/// assert_eq!(v.endpoint.path, "passthrough");
/// let known = target("/market/indices", Some("access_token=t"), FreshnessClass::Immutable, 2048).unwrap();
/// assert_eq!((known.target.as_str(), known.endpoint.path.as_str()), ("/market/indices", "/market/indices"));
/// assert!(target("/a/../../admin", None, FreshnessClass::Intraday, 2048).is_err());
/// ```
///
/// # Errors
/// `NotFound` for a path that is not a plain relative path (empty, `.` or `..`
/// segments, escapes that decode to ASCII), `InvalidParameter` for a query that is
/// not UTF-8 once decoded, `UriTooLong` past `max_bytes`.
pub fn target(
    path: &str,
    query: Option<&str>,
    class: FreshnessClass,
    max_bytes: usize,
) -> Result<Valid, Error> {
    if !is_plain_path(path) {
        return Err(Error::NOT_FOUND);
    }
    let mut pairs = Vec::new();
    for pair in query_pairs(query.unwrap_or_default()) {
        let (name, value) = pair?;
        if !is_ignored(&name) && !is_credential(&name) {
            pairs.push((name, value));
        }
    }
    // Stable: repeated names keep the client's order.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut target = String::with_capacity(path.len() + query.map_or(0, str::len) + 1);
    target.push_str(path);
    if !pairs.is_empty() {
        target.push('?');
        let start = target.len();
        target = form_urlencoded::Serializer::for_suffix(target, start)
            .extend_pairs(pairs)
            .finish();
    }
    if target.len() > max_bytes {
        return Err(Error::UriTooLong { max_bytes });
    }
    // Without its credentials it may be a catalogue request after all: then it is one.
    let (known, stripped) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target.as_str(), None),
    };
    if let Some(route) = crate::router().route(known)
        && !route.endpoint.streaming
    {
        // A parameter the endpoint does not take passes through; a bad value of one
        // it takes is the catalogue's 400 (validation reports an unknown parameter
        // only when everything known is right).
        match crate::validate(&route, stripped) {
            Ok(valid) => return Ok(valid),
            Err(Error::UnknownParameter { .. }) => {}
            Err(refused) => return Err(refused),
        }
    }
    target.insert_str(0, PASSTHROUGH_KEY);
    Ok(Valid {
        endpoint: catalog().passthrough(),
        target,
        class,
        until_open: false,
        settles: None,
        venue: Venue::China,
    })
}

/// `/a/b-c/d.e`: non-empty segments of unreserved characters (RFC 3986) and
/// percent-escapes of non-ASCII bytes (UTF-8 text), none of them `.` or `..`. An
/// escape that decodes to ASCII (`%2F`, `%2E`) could change the path upstream.
fn is_plain_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    rest.split('/').all(|segment| {
        let bytes = segment.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' => {
                    let escaped = segment
                        .get(i + 1..i + 3)
                        .and_then(|hex| u8::from_str_radix(hex, 16).ok());
                    if escaped.is_none_or(|b| b < 0x80) {
                        return false;
                    }
                    i += 3;
                }
                b if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') => i += 1,
                _ => return false,
            }
        }
        // Escapes must spell UTF-8 (overlong forms such as `%C0%AE` are refused).
        !matches!(segment, "" | "." | "..")
            && percent_encoding::percent_decode_str(segment)
                .decode_utf8()
                .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_pass() {
        for ok in [
            "/a",
            "/market/sector-flow/summary",
            "/news/%E9%93%B6",
            "/x/v1.2_~",
        ] {
            assert!(is_plain_path(ok), "{ok}");
        }
        for bad in [
            "",
            "a",
            "/",
            "/a/",
            "//a",
            "/a/./b",
            "/a/../b",
            "/a/%2e%2e/b",
            "/a%2Fb",
            "/a%zz",
            "/a%e",
            "/a b",
            "/a;b",
            "/a\\b",
            "/a/%C0%AE%C0%AE/b",
            "/%FF",
        ] {
            assert!(!is_plain_path(bad), "{bad}");
        }
    }

    #[test]
    fn the_key_is_sorted_and_carries_no_credentials() {
        let v = target(
            "/news/archive",
            Some("pageSize=20&keyword=%E9%93%B6&access_token=t&keyword=b&x-api-key=k"),
            FreshnessClass::News,
            2048,
        )
        .unwrap();
        assert_eq!(
            v.upstream_target(),
            "/news/archive?keyword=%E9%93%B6&keyword=b&pageSize=20"
        );
        assert!(v.target.starts_with(PASSTHROUGH_KEY));
        assert_eq!(v.class, FreshnessClass::News);
        assert_eq!(v.endpoint.id, catalog().len());
        let e = target("/a", Some(&"q=x".repeat(1000)), FreshnessClass::News, 100).unwrap_err();
        assert_eq!(e.status(), 414);
    }

    /// A known endpoint with a bad known parameter is refused as the catalogue
    /// refuses it, whatever unknown parameters or credentials come with it.
    #[test]
    fn a_bad_known_parameter_never_passes_through() {
        for query in [
            "code=600519&period=2m&access_token=t",
            "access_token=t&period=2m&code=600519&foo=1",
            "foo=1&code=600519&period=2m",
        ] {
            let e = target("/stock/kline", Some(query), FreshnessClass::News, 2048).unwrap_err();
            assert_eq!(
                (e.code(), e.param()),
                ("invalid_parameter", Some("period")),
                "{query}"
            );
        }
        // A bad path parameter too (it used to be checked after the query, whose
        // unknown parameter sent the whole request through).
        for path in ["/stock/detail/600519.SZ", "/stock/detail/abc"] {
            let e = target(path, Some("foo=1"), FreshnessClass::News, 2048).unwrap_err();
            assert_eq!(e.code(), "invalid_parameter", "{path}");
        }
        let through = target(
            "/stock/kline",
            Some("code=600519&foo=1"),
            FreshnessClass::News,
            2048,
        )
        .unwrap();
        assert_eq!(through.target, "passthrough:/stock/kline?code=600519&foo=1");
    }

    /// Credentials in any letter case are neither keyed nor forwarded: the key (the
    /// access log's) and the upstream target carry none of them.
    #[test]
    fn credentials_in_any_case_are_stripped() {
        let v = target(
            "/market/newer-route",
            Some("X-Api-Key=k1&ACCESS_TOKEN=k2&Access_Token=k3&x-API-key=k4&page=2"),
            FreshnessClass::Intraday,
            2048,
        )
        .unwrap();
        assert_eq!(v.target, "passthrough:/market/newer-route?page=2");
        assert_eq!(v.upstream_target(), "/market/newer-route?page=2");
        assert_eq!(key_path(&v.target), "/market/newer-route?page=2");
        assert_eq!(
            key_path("/stock/kline?code=600519"),
            "/stock/kline?code=600519"
        );
        assert!(key_under(&v.target, "/"));
        assert!(key_under(&v.target, "/market/new"));
        assert!(key_under(&v.target, PASSTHROUGH_KEY));
        assert!(!key_under(&v.target, "/stock/"));
        assert!(!key_under("/market/indices", PASSTHROUGH_KEY));
    }
}
