//! CORS: which browser origins may read answers, the headers they may read, and the
//! answer to a preflight.

use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use crate::edge::body::{self, Body};

/// Headers a browser script may read on a CORS response.
const EXPOSED: &str = "X-Cache, Cache-Status, Age, ETag, Retry-After, X-Request-Id";

/// The CORS policy of `server.cors_origins`.
#[derive(Debug, Default)]
pub struct Cors {
    any: bool,
    /// Each allowed origin, as the header value that answers it (built once, so an
    /// answer does not share the request's bytes: see [`Cors::allowed`]).
    origins: Vec<HeaderValue>,
}

impl Cors {
    /// The policy allowing `origins` (`"*"`: any).
    pub fn new(origins: &[String]) -> Cors {
        Cors {
            any: origins.iter().any(|o| o == "*"),
            origins: origins
                .iter()
                .filter(|o| *o != "*")
                .map(|o| o.trim_end_matches('/'))
                // One a header cannot carry is never a request's origin.
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect(),
        }
    }

    /// Whether `request` is a preflight (`OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method`), answered before auth: it carries no
    /// credentials.
    pub fn is_preflight(method: &http::Method, request: &HeaderMap) -> bool {
        method == http::Method::OPTIONS
            && request.contains_key(header::ORIGIN)
            && request.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    }

    /// The request's origin if it is allowed, as the value to answer with: never
    /// a clone of the request's own, which would hold hyper's read buffer while the
    /// response is written (and make hyper read the next request into a new one).
    fn allowed(&self, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
        let text = origin?.to_str().ok()?;
        match self
            .origins
            .iter()
            .find(|o| o.as_bytes() == text.as_bytes())
        {
            Some(value) => Some(value.clone()),
            None if self.any => HeaderValue::from_str(text).ok(),
            None => None,
        }
    }

    /// Adds the CORS headers to a response when the request's `origin` is allowed.
    pub fn apply(&self, origin: Option<&HeaderValue>, response: &mut HeaderMap) {
        if self.origins.is_empty() && !self.any {
            return;
        }
        response.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = self.allowed(origin) {
            response.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            response.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSED),
            );
        }
    }

    /// The answer to a preflight; the origin header itself is added by `apply`.
    pub fn preflight(&self, request: &HeaderMap) -> Response<Body> {
        let mut r = Response::new(body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        if self.allowed(request.get(header::ORIGIN)).is_some() {
            let h = r.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, HEAD"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(
                    "Authorization, X-Api-Key, If-None-Match, Last-Event-ID, Cache-Control",
                ),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cors_allows_listed_origins_only() {
        let cors = Cors::new(&["https://dash.example.com".to_owned()]);
        let mut req = HeaderMap::new();
        req.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://dash.example.com"),
        );
        let mut resp = HeaderMap::new();
        cors.apply(req.get(header::ORIGIN), &mut resp);
        assert_eq!(
            resp[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "https://dash.example.com"
        );
        let mut other = HeaderMap::new();
        other.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        let mut resp = HeaderMap::new();
        cors.apply(other.get(header::ORIGIN), &mut resp);
        assert!(!resp.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
        assert_eq!(resp[header::VARY], "Origin");
    }
}
