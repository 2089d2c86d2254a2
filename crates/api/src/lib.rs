//! The contract mdproxy serves: the endpoint catalogue as data, the router, the
//! validation that turns a request into one canonical target (cache key and upstream
//! request at once; remembered for hot targets), and the OpenAPI document generated
//! from them (the answers' shapes read off the documented examples), and the MCP
//! tools over the same endpoints. Knows nothing
//! of HTTP beyond paths, query strings and what that document states.

pub mod catalog;
pub mod code;
pub(crate) mod documented;
pub mod error;
pub mod memo;
pub mod openapi;
pub mod params;
pub mod passthrough;
pub mod router;
pub(crate) mod shapes;
pub mod suggest;
pub mod tools;
pub(crate) mod value;
pub mod words;

use std::sync::OnceLock;

use crate::error::Error;
use params::Valid;
use router::{Route, Router};

/// The router over the catalogue, built once.
pub fn router() -> &'static Router {
    static ROUTER: OnceLock<Router> = OnceLock::new();
    ROUTER.get_or_init(|| Router::new(catalog::catalog()))
}

/// Validates a routed request's query: the one place a route becomes a [`Valid`].
///
/// # Errors
/// The contract's error naming the bad parameter.
pub fn validate(route: &Route<'_>, query: Option<&str>) -> Result<Valid, Error> {
    params::validate(route.endpoint, route.params(), query)
}

/// Parses a target such as `/stock/kline?code=600519` (relative to `/api/v1`) into
/// a validated request, as the scheduler's jobs and the admin purge name them.
///
/// # Errors
/// `InvalidParameter { param: "target" }` for an unknown path or the stream (which
/// is never cached), and the parameter's own error (naming it) otherwise.
pub fn parse_target(target: &str) -> Result<Valid, Error> {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let route = router()
        .route(path)
        .ok_or_else(|| Error::invalid("target", "the target names no endpoint"))?;
    if route.endpoint.streaming {
        return Err(Error::invalid(
            "target",
            "the quote stream is never cached, so it cannot be prewarmed or purged",
        ));
    }
    validate(&route, query)
}

/// The longest path compared: a longer one is no typo of a documented path, and
/// the comparison's cost grows with the length.
const NEAREST_MAX_LEN: usize = 128;

/// The documented path nearest to `path` (an API path that names no endpoint), for
/// a 404 that says what was probably meant: each template is compared with its
/// parameters filled from `path`'s own segments.
pub fn nearest_path(path: &str) -> Option<&'static str> {
    if path.len() > NEAREST_MAX_LEN {
        return None;
    }
    let given: Vec<&str> = path.split('/').collect();
    let filled: Vec<(String, &'static str)> = catalog::catalog()
        .endpoints()
        .iter()
        .filter(|e| !e.path.is_empty())
        .map(|e| {
            let template = e.path.as_str();
            let filled = template
                .split('/')
                .enumerate()
                .map(|(i, segment)| match catalog::param_name(segment) {
                    Some(_) => given.get(i).copied().unwrap_or(segment),
                    None => segment,
                })
                .collect::<Vec<_>>()
                .join("/");
            (filled, template)
        })
        .collect();
    let near = suggest::suggest(path, filled.iter().map(|(f, _)| f.as_str()));
    let first = near.first()?;
    filled.iter().find(|(f, _)| f == first).map(|(_, t)| *t)
}

/// How a response was answered, as the `X-Cache` header says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// Fresh from the cache.
    Hit,
    /// Fetched from the upstream for this request (or a coalesced one).
    Miss,
    /// Served past its fresh TTL (the upstream failed, or a refresh is under way).
    Stale,
}

impl CacheStatus {
    /// Every status, in counter order.
    pub const ALL: [CacheStatus; 3] = [CacheStatus::Hit, CacheStatus::Miss, CacheStatus::Stale];

    /// The contract's label: `HIT`, `MISS`, `STALE`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Stale => "STALE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_parsed_with_typed_errors() {
        assert!(parse_target("/stock/kline?code=600519").is_ok());
        let e = parse_target("/stock/kline?code=600519&period=year").unwrap_err();
        assert_eq!(e.code(), "invalid_parameter");
        assert_eq!(e.param(), Some("period"));
        let e = parse_target("/stock/kline?period=day").unwrap_err();
        assert_eq!(e.code(), "missing_parameter");
        assert_eq!(e.param(), Some("code"));
        assert_eq!(parse_target("/nope").unwrap_err().param(), Some("target"));
        let e = parse_target("/stock/indicator/realtime/sse?codes=600519").unwrap_err();
        assert_eq!(e.param(), Some("target"));
    }

    /// A typo of a documented path names it, its parameters filled or not; nothing
    /// near, or a path too long to be a typo, names none.
    #[test]
    fn the_nearest_path_is_the_documented_one_meant() {
        assert_eq!(nearest_path("/stock/klin"), Some("/stock/kline"));
        assert_eq!(
            nearest_path("/stok/detail/600519"),
            Some("/stock/detail/{code}")
        );
        assert_eq!(nearest_path("/weather/today"), None);
        let long = format!("/stock/kline{}", "x".repeat(NEAREST_MAX_LEN));
        assert_eq!(nearest_path(&long), None);
    }
}
