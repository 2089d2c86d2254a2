//! Heads on the bare socket: a request head parsed with httparse and taken only when
//! it is a plain HTTP/1.1 `GET` without a body, an upgrade or an `Expect` (a quote
//! stream's, or any request the bare socket serves), and an answer's head written
//! out with its framing headers owned here: whatever the handler set,
//! `content-length`, `transfer-encoding`, `connection` and `date` each go out once
//! and agree with the body.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::response::Parts;
use http::{Method, Request, Uri, Version};

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
pub(crate) fn request_of(parsed: &httparse::Request<'_, '_>, path: &str) -> Option<Request<()>> {
    // Whether it asks for a close does not matter: a stream's connection closes
    // when the stream ends.
    plain_get(parsed, |p| p == path)?;
    let mut request = Request::builder()
        .method(Method::GET)
        .version(Version::HTTP_11)
        .uri(parsed.path?);
    for h in parsed.headers.iter() {
        request = request.header(h.name, h.value);
    }
    request.body(()).ok()
}

/// Whether `parsed` is a plain HTTP/1.1 `GET` in origin form whose path `takes`
/// accepts, with no body, no upgrade and no `Expect`: `Some(close)`, `close` when
/// its `Connection` says so.
fn plain_get(parsed: &httparse::Request<'_, '_>, takes: impl Fn(&str) -> bool) -> Option<bool> {
    if parsed.method != Some("GET") || parsed.version != Some(1) {
        return None;
    }
    let target = parsed.path?;
    if !target.starts_with('/') || !takes(target.split_once('?').map_or(target, |(p, _)| p)) {
        return None;
    }
    let mut close = false;
    for h in parsed.headers.iter() {
        let name = h.name;
        let framing = name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("upgrade")
            || name.eq_ignore_ascii_case("expect")
            || (name.eq_ignore_ascii_case("content-length") && h.value != b"0");
        if framing {
            return None;
        }
        if name.eq_ignore_ascii_case("connection") {
            close |= h
                .value
                .split(|b| *b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
    }
    Some(close)
}

/// What the head at the start of a buffer is to the bare socket.
#[allow(
    clippy::large_enum_variant,
    reason = "one a request, returned once: a box would cost every request an allocation"
)]
pub(crate) enum Parsed {
    /// A request it serves (its head taken off the buffer), and whether its
    /// answer closes the connection.
    Take(Request<()>, bool),
    /// Not whole yet.
    Partial,
    /// For hyper: another kind of request, a head that does not parse or is
    /// longer than allowed, or more header fields than allowed. The buffer is as
    /// it was.
    Leave,
}

/// Header fields parsed at most on the bare socket; a head with more (when the
/// limit allows more) goes to hyper.
const MAX_HEADERS: usize = 64;

/// Where a header's name and value lie in its head: start and end of each (a head
/// is at most `server.max_header_bytes`, 1 MiB).
type Span = [u32; 4];

/// Parses the head at the start of `buf`, of at most `max_head` bytes and
/// `max_headers` header fields (and [`MAX_HEADERS`]), and takes it off `buf` when
/// it is a request the bare socket serves. Its values and target are slices of the
/// head's bytes, not copies (as hyper makes them).
pub(crate) fn parse(
    buf: &mut BytesMut,
    max_head: usize,
    max_headers: usize,
    takes: impl Fn(&str) -> bool,
) -> Parsed {
    let mut spans = [[0u32; 4]; MAX_HEADERS];
    let (len, close, target, count) = {
        // Left uninitialised (httparse writes what it parses), as hyper's are.
        let mut headers = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut []);
        let headers = &mut headers[..max_headers.min(MAX_HEADERS)];
        let len = match parsed.parse_with_uninit_headers(buf, headers) {
            Ok(httparse::Status::Complete(len)) if len <= max_head => len,
            Ok(httparse::Status::Partial) => return Parsed::Partial,
            _ => return Parsed::Leave,
        };
        let Some(close) = plain_get(&parsed, takes) else {
            return Parsed::Leave;
        };
        let start = buf.as_ptr() as usize;
        // Within `len <= max_head`, so within a `u32`.
        let at = |part: &[u8]| {
            let from = part.as_ptr() as usize - start;
            [from as u32, (from + part.len()) as u32]
        };
        for (span, h) in spans.iter_mut().zip(parsed.headers.iter()) {
            let ([a, b], [c, d]) = (at(h.name.as_bytes()), at(h.value));
            *span = [a, b, c, d];
        }
        let [from, to] = at(parsed.path.unwrap_or_default().as_bytes());
        let target = from as usize..to as usize;
        (len, close, target, parsed.headers.len())
    };
    let head = buf.split_to(len).freeze();
    match request_from(&head, target, &spans[..count]) {
        Some(request) => Parsed::Take(request, close),
        None => {
            // Rare (httparse lets through what `http` refuses): the buffer as it
            // was, for hyper to answer.
            let mut whole = BytesMut::with_capacity(head.len() + buf.len());
            whole.extend_from_slice(&head);
            whole.extend_from_slice(buf);
            *buf = whole;
            Parsed::Leave
        }
    }
}

/// The request of `head` with its target and headers where `target` and `spans`
/// say, its values and target slices of `head`.
fn request_from(
    head: &Bytes,
    target: std::ops::Range<usize>,
    spans: &[Span],
) -> Option<Request<()>> {
    let mut map = HeaderMap::with_capacity(spans.len());
    for &[a, b, c, d] in spans {
        let name = HeaderName::from_bytes(&head[a as usize..b as usize]).ok()?;
        let value = HeaderValue::from_maybe_shared(head.slice(c as usize..d as usize)).ok()?;
        map.append(name, value);
    }
    let mut request = Request::new(());
    *request.uri_mut() = Uri::from_maybe_shared(head.slice(target)).ok()?;
    *request.headers_mut() = map;
    Some(request)
}

/// Whether the answer's framing owns header `name` (lowercase, as `HeaderName`
/// holds it): a handler's are not written (hop-by-hop ones, and those this module
/// writes itself). Told by the name's length first: this runs for every header of
/// every answer, where five `HeaderName` comparisons a header (and a map lookup
/// for `date`) cost a hit about 150 instructions.
fn is_framing(name: &str) -> bool {
    match name.len() {
        7 => name == "upgrade",
        10 => name == "connection" || name == "keep-alive",
        14 => name == "content-length",
        17 => name == "transfer-encoding",
        _ => false,
    }
}

/// How an answer's body goes on the wire.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Framing {
    /// A whole body of this many bytes: `content-length`.
    Length(u64),
    /// A stream: `transfer-encoding: chunked`.
    Chunked,
    /// No body and no length (1xx, 204, 304), as hyper writes them.
    None,
}

/// Appends to `out` the head of an answer of `parts` on the bare socket: the status
/// line, the handler's headers (but [`is_framing`]'s), one `date` (the handler's
/// first, else `now`'s), the `framing`, and `connection: close` when `close` (the
/// socket closes after the answer).
pub(crate) fn write(
    out: &mut Vec<u8>,
    parts: &Parts,
    framing: Framing,
    close: bool,
    now: SystemTime,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or_default()
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    // The handler's first `date`, found on the way (a map lookup cost more).
    let mut date = None;
    for (name, value) in &parts.headers {
        let name = name.as_str();
        if name == "date" {
            date.get_or_insert(value);
        } else if !is_framing(name) {
            line(name.as_bytes(), value.as_bytes());
        }
    }
    match date {
        Some(date) => line(b"date", date.as_bytes()),
        None => line(b"date", &http_date(now)),
    }
    match framing {
        Framing::Length(n) => line(b"content-length", itoa::Buffer::new().format(n).as_bytes()),
        Framing::Chunked => line(b"transfer-encoding", b"chunked"),
        Framing::None => {}
    }
    if close {
        line(b"connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
}

/// `now` as an HTTP date, formatted once a second on each thread (as hyper caches
/// its own).
fn http_date(now: SystemTime) -> [u8; 29] {
    thread_local! {
        static LAST: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [b' '; 29])) };
    }
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    LAST.with(|last| {
        let (seen, text) = last.get();
        if seen == second {
            return text;
        }
        let mut text = [b' '; 29];
        let formatted = httpdate::fmt_http_date(now);
        let n = formatted.len().min(29);
        text[..n].copy_from_slice(&formatted.as_bytes()[..n]);
        last.set((second, text));
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderValue, Response, StatusCode, header};

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

    fn head_of(parts: &Parts, framing: Framing, close: bool) -> Vec<u8> {
        let mut out = b"left alone".to_vec();
        write(&mut out, parts, framing, close, SystemTime::UNIX_EPOCH);
        assert!(out.starts_with(b"left alone"), "appended to what was there");
        out.split_off(10)
    }

    /// The bare socket's keep-alive loop takes plain `GET`s in origin form of
    /// the paths it serves, notes a `Connection: close` among its tokens, waits
    /// for a head cut short, and leaves the rest to hyper.
    #[test]
    fn the_loop_takes_plain_gets_and_leaves_the_rest() {
        let takes = |path: &str| path != "/sse";
        let parse = |bytes: &[u8], max_headers: usize| {
            let mut buf = BytesMut::from(bytes);
            let parsed = super::parse(&mut buf, 1024, max_headers, takes);
            if !matches!(parsed, Parsed::Take(..)) {
                assert_eq!(&buf[..], bytes, "left as it was");
            }
            (parsed, buf)
        };
        let taken = |bytes: &[u8], max_headers: usize| match parse(bytes, max_headers).0 {
            Parsed::Take(request, close) => Some((request, close)),
            _ => None,
        };
        let head = b"GET /api/v1/x?a=1 HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\n\r\nGET /next";
        let (Parsed::Take(request, close), rest) = parse(head, 100) else {
            panic!("a plain GET");
        };
        assert_eq!(request.uri(), "/api/v1/x?a=1");
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.version(), Version::HTTP_11);
        assert_eq!(request.headers()["host"], "x");
        assert_eq!(request.headers()["x-api-key"], "k");
        assert!(!close);
        assert_eq!(&rest[..], b"GET /next", "the head taken off, the rest left");
        let close = b"GET /a HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n";
        assert!(taken(close, 100).unwrap().1, "close among the tokens");
        let kept = b"GET /a HTTP/1.1\r\nConnection: closed\r\n\r\n";
        assert!(!taken(kept, 100).unwrap().1, "a token, not a substring");
        assert!(matches!(
            parse(b"GET /a HTTP/1.1\r\nHo", 100).0,
            Parsed::Partial
        ));
        let long = format!("GET /a HTTP/1.1\r\nX: {}\r\n\r\n", "y".repeat(1024));
        assert!(
            matches!(parse(long.as_bytes(), 100).0, Parsed::Leave),
            "past max_head"
        );
        for left in [
            &b"GET /sse HTTP/1.1\r\n\r\n"[..],
            b"GET http://x/a HTTP/1.1\r\n\r\n",
            b"HEAD /a HTTP/1.1\r\n\r\n",
            b"GET /a HTTP/1.0\r\n\r\n",
            b"GET /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nab",
            b"GET /a HTTP/1.1\r\nBad Header: x\r\n\r\n",
            b"\x16\x03\x01 not HTTP",
        ] {
            assert!(
                matches!(parse(left, 100).0, Parsed::Leave),
                "{}",
                String::from_utf8_lossy(left)
            );
        }
        let three = b"GET /a HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert!(taken(three, 3).is_some());
        assert!(
            matches!(parse(three, 2).0, Parsed::Leave),
            "past max_headers"
        );
    }

    /// Answers without a body (304, 204) go out as hyper writes them: no length.
    #[test]
    fn bodyless_answers_carry_no_length() {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        let (parts, ()) = response.into_parts();
        let (status, all) = lines(&head_of(&parts, Framing::None, false));
        assert_eq!(status, 304);
        assert!(values(&all, "content-length").is_empty());
        assert!(values(&all, "connection").is_empty());
        assert_eq!(values(&all, "date").len(), 1);
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
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        // Names of a framing header's length are written.
        h.insert("x-cache", HeaderValue::from_static("HIT"));
        h.insert("set-cookie", HeaderValue::from_static("a=1"));
        h.insert("if-modified-since", HeaderValue::from_static("x"));
        h.insert("accept-charset", HeaderValue::from_static("zh"));
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
        let (status, all) = lines(&head_of(&parts, Framing::Length(42), true));
        assert_eq!(status, 401);
        assert_eq!(values(&all, "content-length"), ["42"]);
        assert_eq!(values(&all, "connection"), ["close"]);
        assert!(values(&all, "transfer-encoding").is_empty());
        assert!(values(&all, "keep-alive").is_empty());
        assert!(values(&all, "upgrade").is_empty());
        assert_eq!(values(&all, "x-cache"), ["HIT"]);
        assert_eq!(values(&all, "set-cookie"), ["a=1"]);
        assert_eq!(values(&all, "if-modified-since"), ["x"]);
        assert_eq!(values(&all, "accept-charset"), ["zh"]);
        assert_eq!(values(&all, "date"), ["Mon, 02 Mar 2026 02:00:00 GMT"]);
        assert_eq!(values(&all, "content-type"), ["application/json"]);

        let (_, all) = lines(&head_of(&parts, Framing::Chunked, false));
        assert_eq!(values(&all, "transfer-encoding"), ["chunked"]);
        assert!(values(&all, "content-length").is_empty());
        assert!(values(&all, "connection").is_empty());

        let (parts, ()) = Response::new(()).into_parts();
        let (status, all) = lines(&head_of(&parts, Framing::Chunked, false));
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

            /// The keep-alive loop's parse: whatever the bytes, a head is taken off
            /// the buffer whole (a plain GET of a path it serves, the rest left as
            /// it came) or the buffer is left exactly as it was.
            #[test]
            fn the_loop_takes_a_whole_head_or_leaves_the_bytes(
                head in head(),
                tail in proptest::collection::vec(any::<u8>(), 0..40),
                cut in 0usize..400,
            ) {
                let mut bytes = head;
                bytes.extend_from_slice(&tail);
                let bytes = &bytes[..cut.min(bytes.len())];
                let mut buf = bytes::BytesMut::from(bytes);
                match super::super::parse(&mut buf, 16 * 1024, 100, |p| p != "/api/v1/mcp") {
                    Parsed::Take(request, _) => {
                        prop_assert_eq!(request.method(), Method::GET);
                        prop_assert_eq!(request.version(), Version::HTTP_11);
                        prop_assert!(bytes.ends_with(&buf), "the rest left as it came");
                        prop_assert!(buf.len() < bytes.len(), "a head taken off");
                        for name in ["transfer-encoding", "upgrade", "expect"] {
                            prop_assert!(!request.headers().contains_key(name), "{}", name);
                        }
                    }
                    Parsed::Partial | Parsed::Leave => prop_assert_eq!(&buf[..], bytes),
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
