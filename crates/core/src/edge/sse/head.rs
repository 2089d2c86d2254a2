//! Heads on the bare socket: the request head of a stream, parsed with httparse
//! (only a plain HTTP/1.1 `GET` of the stream path, without a body or an upgrade,
//! is taken), and the answer's head written out with its framing headers owned
//! here: whatever the handler set, `content-length`, `transfer-encoding`,
//! `connection` and `date` each go out once and agree with the body.

use std::time::SystemTime;

use http::header::{self, HeaderName};
use http::response::Parts;
use http::{Method, Request, Version};

/// Whether a connection whose first bytes are `first` may be a `GET` of `path`
/// (cheap: decides whether its head is worth peeking at).
pub fn may_be(first: &[u8], path: &str) -> bool {
    let wanted = [b"GET ".as_slice(), path.as_bytes()];
    let mut rest = first;
    for part in wanted {
        let n = rest.len().min(part.len());
        if rest[..n] != part[..n] {
            return false;
        }
        rest = &rest[n..];
    }
    // Past the path: its end (`?` or the space before the version).
    rest.first().is_none_or(|b| matches!(b, b'?' | b' '))
}

/// The request `parsed` is when it is one the bare socket serves: HTTP/1.1 `GET`
/// of `path` (query allowed) with no body, no upgrade and no `Expect`; every
/// header a valid `http` one (else hyper answers it, 400).
pub(super) fn request_of(parsed: &httparse::Request<'_, '_>, path: &str) -> Option<Request<()>> {
    if parsed.method != Some("GET") || parsed.version != Some(1) {
        return None;
    }
    let target = parsed.path?;
    if target.split_once('?').map_or(target, |(p, _)| p) != path {
        return None;
    }
    let mut request = Request::builder()
        .method(Method::GET)
        .version(Version::HTTP_11)
        .uri(target);
    for h in parsed.headers.iter() {
        let name = h.name;
        let framing = name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("upgrade")
            || name.eq_ignore_ascii_case("expect")
            || (name.eq_ignore_ascii_case("content-length") && h.value != b"0");
        if framing {
            return None;
        }
        request = request.header(name, h.value);
    }
    request.body(()).ok()
}

/// Headers the answer's framing owns: a handler's are not written (hop-by-hop
/// ones, and those this module writes itself).
const FRAMING: [HeaderName; 5] = [
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
];

/// The head of an answer of `parts` on the bare socket: the status line, the
/// handler's headers (but [`FRAMING`]'s), one `date` (the handler's first, else
/// `now`), then the framing: a whole body of `length` bytes with `content-length`
/// and `connection: close` (the socket closes after it), a stream (`None`) with
/// `transfer-encoding: chunked`.
pub(super) fn response_head(parts: &Parts, length: Option<u64>, now: SystemTime) -> Vec<u8> {
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(parts.status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or_default()
            .as_bytes(),
    );
    head.extend_from_slice(b"\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        head.extend_from_slice(name);
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    };
    for (name, value) in &parts.headers {
        if FRAMING.contains(name) || name == header::DATE {
            continue;
        }
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    match parts.headers.get(header::DATE) {
        Some(date) => line(b"date", date.as_bytes()),
        None => line(b"date", httpdate::fmt_http_date(now).as_bytes()),
    }
    match length {
        Some(n) => {
            line(b"content-length", itoa::Buffer::new().format(n).as_bytes());
            line(b"connection", b"close");
        }
        None => line(b"transfer-encoding", b"chunked"),
    }
    head.extend_from_slice(b"\r\n");
    head
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderValue, Response, StatusCode};

    #[test]
    fn only_gets_of_the_path_are_candidates() {
        let path = "/api/v1/stock/indicator/realtime/sse";
        assert!(may_be(b"GET /api/v1/stock/indica", path));
        assert!(may_be(b"GE", path));
        assert!(may_be(
            b"GET /api/v1/stock/indicator/realtime/sse?codes=1",
            path
        ));
        assert!(may_be(
            b"GET /api/v1/stock/indicator/realtime/sse HTTP/1.1",
            path
        ));
        assert!(!may_be(b"GET /api/v1/stock/indicator/realtime/sse2", path));
        assert!(!may_be(b"HEAD /api/v1/stock", path));
        assert!(!may_be(b"GET /api/v1/market/indices", path));
    }

    fn parse(head: &[u8]) -> Option<Request<()>> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Request::new(&mut headers);
        assert!(parsed.parse(head).unwrap().is_complete());
        request_of(&parsed, "/sse")
    }

    #[test]
    fn plain_gets_are_taken_and_the_rest_left_to_hyper() {
        let r = parse(b"GET /sse?codes=1 HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\n\r\n").unwrap();
        assert_eq!(r.uri().query(), Some("codes=1"));
        assert_eq!(r.version(), Version::HTTP_11);
        assert_eq!(r.headers()["x-api-key"], "k");
        assert!(parse(b"GET /sse HTTP/1.1\r\nContent-Length: 0\r\n\r\n").is_some());
        for head in [
            &b"GET /sse HTTP/1.0\r\n\r\n"[..],
            b"HEAD /sse HTTP/1.1\r\n\r\n",
            b"GET /sse/x HTTP/1.1\r\n\r\n",
            b"GET /sse HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
            b"GET /sse HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /sse HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
            b"GET /sse HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
        ] {
            assert!(parse(head).is_none(), "{}", String::from_utf8_lossy(head));
        }
    }

    /// The lines of a head, parsed back with httparse (not this module's writer).
    fn lines(head: &[u8]) -> (u16, Vec<(String, String)>) {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Response::new(&mut headers);
        assert!(parsed.parse(head).unwrap().is_complete(), "a whole head");
        let all = parsed
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8(h.value.to_vec()).unwrap(),
                )
            })
            .collect();
        (parsed.code.unwrap(), all)
    }

    fn values<'a>(all: &'a [(String, String)], name: &str) -> Vec<&'a str> {
        all.iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Framing headers a handler set are never written twice nor in conflict with
    /// the body: the writer's own framing stands, the handler's `date` is kept once.
    #[test]
    fn the_writer_owns_the_framing_headers() {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::UNAUTHORIZED;
        let h = response.headers_mut();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("999"));
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("gzip"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::DATE,
            HeaderValue::from_static("Mon, 02 Mar 2026 02:00:00 GMT"),
        );
        h.append(
            header::DATE,
            HeaderValue::from_static("Tue, 03 Mar 2026 02:00:00 GMT"),
        );
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let (parts, ()) = response.into_parts();
        let (status, all) = lines(&response_head(&parts, Some(42), SystemTime::UNIX_EPOCH));
        assert_eq!(status, 401);
        assert_eq!(values(&all, "content-length"), ["42"]);
        assert_eq!(values(&all, "connection"), ["close"]);
        assert!(values(&all, "transfer-encoding").is_empty());
        assert!(values(&all, "keep-alive").is_empty());
        assert_eq!(values(&all, "date"), ["Mon, 02 Mar 2026 02:00:00 GMT"]);
        assert_eq!(values(&all, "content-type"), ["application/json"]);

        let (_, all) = lines(&response_head(&parts, None, SystemTime::UNIX_EPOCH));
        assert_eq!(values(&all, "transfer-encoding"), ["chunked"]);
        assert!(values(&all, "content-length").is_empty());
        assert!(values(&all, "connection").is_empty());

        let (parts, ()) = Response::new(()).into_parts();
        let (status, all) = lines(&response_head(&parts, None, SystemTime::UNIX_EPOCH));
        assert_eq!(status, 200);
        assert_eq!(values(&all, "date"), ["Thu, 01 Jan 1970 00:00:00 GMT"]);
    }

    /// The bare socket's request head, fuzzed: any bytes a client sends are parsed
    /// or left to hyper, never a panic, and what is taken is exactly a plain
    /// HTTP/1.1 `GET` of the stream path without a body or an upgrade.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        const PATH: &str = "/api/v1/stock/indicator/realtime/sse";

        /// What the bare socket does with `bytes`: the request it takes, if any.
        fn taken(bytes: &[u8]) -> Option<Request<()>> {
            let _ = may_be(bytes, PATH);
            let mut headers = vec![httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Request::new(&mut headers);
            match parsed.parse(bytes) {
                Ok(httparse::Status::Complete(_)) => request_of(&parsed, PATH),
                _ => None,
            }
        }

        /// A head made of plausible pieces, some of them wrong.
        fn head() -> impl Strategy<Value = Vec<u8>> {
            let method = prop_oneof!["GET", "POST", "HEAD", "get", "GET GET"];
            let path = prop_oneof![
                Just(PATH.to_owned()),
                Just(format!("{PATH}?codes=600519")),
                "/[a-z/?=&%0-9]{0,40}",
            ];
            let version = prop_oneof!["HTTP/1.1", "HTTP/1.0", "HTTP/2", ""];
            let header = prop_oneof![
                "[A-Za-z-]{1,20}: [ -~]{0,30}",
                Just("Transfer-Encoding: chunked".to_owned()),
                Just("Content-Length: 5".to_owned()),
                Just("Content-Length: 0".to_owned()),
                Just("Upgrade: websocket".to_owned()),
                Just("Expect: 100-continue".to_owned()),
                "[\\x00-\\xff]{0,20}",
            ];
            (
                method,
                path,
                version,
                proptest::collection::vec(header, 0..6),
            )
                .prop_map(|(m, p, v, hs)| {
                    let mut head = format!("{m} {p} {v}\r\n");
                    for h in hs {
                        head.push_str(&h);
                        head.push_str("\r\n");
                    }
                    head.push_str("\r\n");
                    head.into_bytes()
                })
        }

        proptest! {
            #[test]
            fn any_bytes_are_taken_or_left(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                if let Some(request) = taken(&bytes) {
                    prop_assert_eq!(request.method(), Method::GET);
                }
            }

            #[test]
            fn only_a_plain_get_of_the_path_is_taken(head in head()) {
                if let Some(request) = taken(&head) {
                    prop_assert_eq!(request.method(), Method::GET);
                    prop_assert_eq!(request.version(), Version::HTTP_11);
                    prop_assert_eq!(request.uri().path(), PATH);
                    for name in ["transfer-encoding", "upgrade", "expect"] {
                        prop_assert!(!request.headers().contains_key(name), "{}", name);
                    }
                    if let Some(length) = request.headers().get("content-length") {
                        prop_assert_eq!(length, "0");
                    }
                }
            }
        }
    }
}
