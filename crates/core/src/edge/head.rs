//! The request headers the edge reads on every request, found in one pass over the
//! header map instead of one hashed lookup each.
//!
//! A client sends a few headers (a dashboard's backend two or three, a browser about
//! fifteen); walking them and comparing names costs less than the five or six probes
//! a cache hit made (`Host`, `Authorization`, `X-Request-Id`, `Origin`,
//! `Accept-Encoding`, `If-None-Match`: about 100 instructions each). Single-valued
//! headers keep their first value, as [`HeaderMap::get`] would; list-valued ones
//! (`Accept-Encoding`, `If-None-Match`) are only marked present, and whoever reads
//! them reads every value from the map.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::telemetry::context::X_REQUEST_ID;

const X_API_KEY: HeaderName = HeaderName::from_static(mdproxy_api::params::API_KEY);

/// What one pass over a request's headers found.
#[derive(Debug)]
pub struct Head<'a> {
    /// Every header, for the list-valued ones and for what is read rarely.
    pub map: &'a HeaderMap,
    pub host: bool,
    pub authorization: Option<&'a HeaderValue>,
    pub api_key: Option<&'a HeaderValue>,
    pub request_id: Option<&'a HeaderValue>,
    pub origin: Option<&'a HeaderValue>,
    /// At least one `Accept-Encoding` line.
    pub accept_encoding: bool,
    /// At least one `If-None-Match` line.
    pub if_none_match: bool,
}

impl<'a> Head<'a> {
    /// Walks `map` once.
    pub fn read(map: &'a HeaderMap) -> Head<'a> {
        let mut head = Head {
            map,
            host: false,
            authorization: None,
            api_key: None,
            request_id: None,
            origin: None,
            accept_encoding: false,
            if_none_match: false,
        };
        for (name, value) in map {
            // Standard names compare as one byte, custom ones by length first.
            if name == header::HOST {
                head.host = true;
            } else if name == header::AUTHORIZATION {
                head.authorization.get_or_insert(value);
            } else if name == header::ACCEPT_ENCODING {
                head.accept_encoding = true;
            } else if name == header::IF_NONE_MATCH {
                head.if_none_match = true;
            } else if name == header::ORIGIN {
                head.origin.get_or_insert(value);
            } else if name == X_REQUEST_ID {
                head.request_id.get_or_insert(value);
            } else if name == X_API_KEY {
                head.api_key.get_or_insert(value);
            }
        }
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pass finds what the map's own lookups find, first values included.
    #[test]
    fn finds_what_lookups_find() {
        let mut map = HeaderMap::new();
        map.insert(header::USER_AGENT, HeaderValue::from_static("test"));
        map.insert(header::HOST, HeaderValue::from_static("example"));
        map.append(X_REQUEST_ID, HeaderValue::from_static("first"));
        map.append(X_REQUEST_ID, HeaderValue::from_static("second"));
        map.insert("x-api-key", HeaderValue::from_static("key"));
        map.append(header::ACCEPT_ENCODING, HeaderValue::from_static("br"));
        map.append(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        map.insert("x-custom", HeaderValue::from_static("ignored"));
        let head = Head::read(&map);
        assert!(head.host);
        assert_eq!(head.request_id, map.get(X_REQUEST_ID));
        assert_eq!(head.request_id.unwrap(), "first");
        assert_eq!(head.api_key.unwrap(), "key");
        assert!(head.accept_encoding);
        assert!(!head.if_none_match);
        assert!(head.authorization.is_none() && head.origin.is_none());

        let mut map = HeaderMap::new();
        map.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        map.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://a.example"),
        );
        map.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"x\""));
        let head = Head::read(&map);
        assert!(!head.host && !head.accept_encoding && head.if_none_match);
        assert_eq!(head.authorization.unwrap(), "Bearer t");
        assert_eq!(head.origin.unwrap(), "https://a.example");
        assert!(head.request_id.is_none() && head.api_key.is_none());
    }
}
