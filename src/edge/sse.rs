//! Event streams on the bare socket: a plain HTTP/1.1 `GET` of the stream path is
//! parsed here (httparse), answered by the same handler as every other request, and
//! its text/event-stream body written as chunks straight to the socket, without
//! hyper's per-connection read and write buffers (16 KiB that an idle subscriber
//! would hold for hours; README "Quote stream"). Anything unusual (a head split
//! over several reads, a body, an upgrade, HTTP/1.0) is left to hyper untouched.

use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes};
use http::{Method, Request, Response, Version};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::edge::body::Body;

/// How long a connection closed after an answer is given to take it (its unread
/// bytes are drained meanwhile: closing with unread bytes resets the connection,
/// and the client might lose the answer).
const LINGER: Duration = Duration::from_secs(1);

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

/// What [`take`] found at the head of a connection.
pub enum Taken {
    /// A stream request, its head consumed from the socket.
    Request(Box<Request<()>>),
    /// Not one for this path: every byte is still in the socket, for hyper.
    Elsewhere,
    /// The connection failed while its head was read.
    Gone,
}

/// The request at the head of `stream` when it is a plain HTTP/1.1 `GET` of `path`
/// (query allowed) whose whole head has arrived within `max_head` bytes and
/// `max_headers` headers, with no body and no upgrade. The head is peeked first, so
/// anything else is left in the socket as it came.
pub async fn take(
    stream: &mut TcpStream,
    path: &str,
    max_head: usize,
    max_headers: usize,
) -> Taken {
    let mut buf = vec![0u8; max_head];
    let Ok(n) = stream.peek(&mut buf).await else {
        return Taken::Gone;
    };
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut parsed = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(len)) = parsed.parse(&buf[..n]) else {
        return Taken::Elsewhere;
    };
    let Some(request) = request_of(&parsed, path) else {
        return Taken::Elsewhere;
    };
    match stream.read_exact(&mut buf[..len]).await {
        Ok(_) => Taken::Request(Box::new(request)),
        Err(_) => Taken::Gone,
    }
}

/// The request `parsed` is when it is one this module serves.
fn request_of(parsed: &httparse::Request<'_, '_>, path: &str) -> Option<Request<()>> {
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
    for header in parsed.headers.iter() {
        let name = header.name;
        let framing = name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("upgrade")
            || name.eq_ignore_ascii_case("expect")
            || (name.eq_ignore_ascii_case("content-length") && header.value != b"0");
        if framing {
            return None;
        }
        request = request.header(name, header.value);
    }
    // A name or value `http` refuses goes to hyper, which answers it 400.
    request.body(()).ok()
}

/// Writes `response` on `stream`: a streamed body as chunks until it ends or the
/// client goes (its end is noticed while the stream is quiet, too); a whole body
/// with `Connection: close`, then the connection is closed.
pub async fn write(mut stream: TcpStream, response: Response<Body>) {
    let (parts, mut body) = response.into_parts();
    let length = body.size_hint().exact();
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
    for (name, value) in &parts.headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"date: ");
    head.extend_from_slice(httpdate::fmt_http_date(SystemTime::now()).as_bytes());
    head.extend_from_slice(b"\r\n");
    match length {
        Some(n) => {
            head.extend_from_slice(b"content-length: ");
            head.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            head.extend_from_slice(b"\r\nconnection: close\r\n\r\n");
        }
        None => head.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n"),
    }
    drop(parts);
    if stream.write_all(&head).await.is_err() {
        return;
    }
    drop(head);
    if length.is_some() {
        let whole = async {
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(mut data) = frame.into_data() {
                    stream.write_all_buf(&mut data).await?;
                }
            }
            Ok::<(), std::io::Error>(())
        };
        if whole.await.is_ok() {
            close_gently(&mut stream).await;
        }
        return;
    }
    let (mut incoming, mut outgoing) = stream.split();
    // The client sends nothing more on a stream; what it does send is dropped, and
    // its end of the connection ends the stream (and the subscription with it).
    let mut probe = [0u8; 64];
    loop {
        tokio::select! {
            // The body first: while events are ready the socket's read side is not
            // looked at (its readiness check takes the socket's waiter lock); it is
            // each time the body has nothing, which is when a client goes quiet.
            biased;
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                        && write_chunk(&mut outgoing, data).await.is_err()
                    {
                        return;
                    }
                }
                _ => {
                    let _ = outgoing.write_all(b"0\r\n\r\n").await;
                    return;
                }
            },
            read = incoming.read(&mut probe) => if matches!(read, Ok(0) | Err(_)) {
                return;
            },
        }
    }
}

/// One chunk of a chunked body, written with one vectored write where it fits.
async fn write_chunk(out: &mut (impl AsyncWriteExt + Unpin), data: Bytes) -> std::io::Result<()> {
    let mut size = [0u8; 18];
    let hex = format_hex(data.len(), &mut size);
    let mut chunk = Buf::chain(Buf::chain(hex, data), &b"\r\n"[..]);
    out.write_all_buf(&mut chunk).await
}

/// `n` in hexadecimal followed by CRLF, written into `buf`.
fn format_hex(mut n: usize, buf: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut at = 16;
    buf[16] = b'\r';
    buf[17] = b'\n';
    loop {
        at -= 1;
        buf[at] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// Closes `stream` after an answer: no more writes, then what the client still
/// sends is read and dropped for at most [`LINGER`], so that closing does not reset
/// the connection before the client has read the answer.
pub async fn close_gently(stream: &mut TcpStream) {
    let drain = async {
        stream.shutdown().await?;
        // On the heap: a buffer in the future would make every connection's task
        // that much larger for as long as it lives.
        let mut sink = vec![0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_hex() {
        let mut buf = [0u8; 18];
        assert_eq!(format_hex(0, &mut buf), b"0\r\n");
        assert_eq!(format_hex(255, &mut buf), b"ff\r\n");
        assert_eq!(format_hex(0x1a2b3, &mut buf), b"1a2b3\r\n");
        assert_eq!(format_hex(usize::MAX, &mut buf).len(), 18);
    }

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
}
