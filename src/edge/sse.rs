//! Event streams on the bare socket: a plain HTTP/1.1 `GET` of the stream path is
//! parsed here (httparse), answered by the same handler as every other request, and
//! its text/event-stream body written as chunks straight to the socket, without
//! hyper's per-connection read and write buffers (16 KiB that an idle subscriber
//! would hold for hours; README "Quote stream"). The socket is also the stream's
//! [`Outlet`]: the hub's fan-out writes events to it itself while the stream is
//! caught up. Anything unusual (a head split over several reads, a body, an
//! upgrade, HTTP/1.0) is left to hyper untouched.

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response, Version};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::edge::body::Body;
use crate::hub::{self, Outlet};

/// How long a connection closed after an answer is given to take it (its unread
/// bytes are drained meanwhile: closing with unread bytes resets the connection,
/// and the client might lose the answer).
const LINGER: Duration = Duration::from_secs(1);

/// Marks an answer whose body frames are HTTP/1.1 chunks already (the hub frames a
/// stream's events when it writes them to an [`Outlet`]).
#[derive(Clone, Copy, Debug)]
pub struct Chunked;

/// A bare socket as the hub's outlet.
#[derive(Debug)]
pub struct Socket(pub Arc<TcpStream>);

impl Outlet for Socket {
    fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.try_write(bytes)
    }
}

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

/// Writes `response` on `socket`: a streamed body as chunks until it ends or the
/// client goes (its end is noticed while the stream is quiet, too); a whole body
/// with `Connection: close`, then the connection is closed. The socket is shared
/// with the stream's [`Socket`] outlet, which writes only while the body rests.
pub async fn write(socket: Arc<TcpStream>, response: Response<Body>) {
    let (parts, mut body) = response.into_parts();
    let length = body.size_hint().exact();
    let chunked = parts.extensions.get::<Chunked>().is_some();
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
    if write_all(&socket, &head).await.is_err() {
        return;
    }
    drop(head);
    if length.is_some() {
        let whole = async {
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data() {
                    write_all(&socket, &data).await?;
                }
            }
            Ok::<(), std::io::Error>(())
        };
        // A whole answer comes from no stream, so nothing else holds the socket.
        if whole.await.is_ok()
            && let Ok(mut stream) = Arc::try_unwrap(socket)
        {
            close_gently(&mut stream).await;
        }
        return;
    }
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
                    {
                        let data = if chunked { data } else { hub::chunk(&data) };
                        if write_all(&socket, &data).await.is_err() {
                            return;
                        }
                    }
                }
                _ => {
                    let _ = write_all(&socket, b"0\r\n\r\n").await;
                    return;
                }
            },
            ready = socket.readable() => {
                if ready.is_err() {
                    return;
                }
                match socket.try_read(&mut probe) {
                    Ok(0) => return,
                    Err(e) if e.kind() != ErrorKind::WouldBlock => return,
                    _ => {}
                }
            }
        }
    }
}

/// Writes all of `bytes` on a socket that others may write to as well (in turns).
async fn write_all(socket: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        socket.writable().await?;
        match socket.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
