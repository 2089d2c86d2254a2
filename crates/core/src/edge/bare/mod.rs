//! HTTP/1.1 on the bare socket, without hyper: plain `GET`s served one after another
//! on a kept-alive connection ([`serve`]), their heads read and written by `head`.
//! The first request it does not take (another method, a body, an upgrade,
//! HTTP/1.0, a head that does not parse or passes the limits) goes to hyper with the
//! bytes read so far, and so does everything after it on that connection: hyper
//! answers what is unusual (400, 431, `Expect`, HEAD, h2c upgrades) as it always did.
//!
//! Why it exists: hyper's server side cost a cache miss about 11,700 of its 53,000
//! instructions and a hit most of what it spends past bare hyper
//! (docs/BENCHMARKS.md, "The bare HTTP/1.1 path"); the requests the cache answers are
//! all plain `GET`s, which this loop reads with httparse and answers with one write.

pub(crate) mod head;

use std::future::Future;
use std::io::ErrorKind;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use bytes::{Buf, Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::{BodyExt, Either};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::edge::body::Body;
use head::{Framing, Parsed};

/// A connection's read buffer to begin with; it grows to the head limit at most.
const READ_BUFFER: usize = 4096;

/// How long a connection closed after an answer is given to take it (its unread
/// bytes are drained meanwhile: closing with unread bytes resets the connection,
/// and the client might lose the answer).
const LINGER: Duration = Duration::from_secs(1);

/// The listener's limits, as the bare socket applies them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules {
    /// From the wait for a request's head to its last byte; past it the connection
    /// closes (an idle keep-alive too).
    pub header_read_timeout: Duration,
    /// A write that makes no progress for this long closes the connection.
    pub send_timeout: Duration,
    /// A head this long and not whole goes to hyper (which answers 431).
    pub max_head: usize,
    /// More header fields than this go to hyper (431).
    pub max_headers: usize,
    /// `false`: every answer closes its connection.
    pub keep_alive: bool,
}

/// How the bare socket's turn with a connection ended.
pub(crate) enum Ended {
    /// Nothing more to serve: the client closed or went quiet past the header read
    /// timeout, a write failed, the answer closed the connection, or the listener
    /// drains.
    Done,
    /// A request the bare socket does not take: the connection goes to hyper with
    /// these bytes (that request's head and what followed it) first.
    Hyper(Bytes),
}

/// The next thing on the connection.
#[allow(
    clippy::large_enum_variant,
    reason = "one a request, returned once: a box would cost every request an allocation"
)]
enum Next {
    /// A request to answer; `true`: the answer closes the connection.
    Request(Request<()>, bool),
    Hyper,
    Done,
}

/// Serves `stream`'s plain `GET`s whose path `takes` accepts, each answered by
/// `answer`, until the connection ends or a request is left to hyper.
pub(crate) async fn serve<T, A, F>(
    stream: &mut TcpStream,
    rules: Rules,
    takes: T,
    answer: A,
    draining: &CancellationToken,
) -> Ended
where
    T: Fn(&str) -> bool,
    A: Fn(Request<()>) -> F,
    F: Future<Output = Response<Body>>,
{
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    let mut out = Vec::new();
    // Registered once, with this task's waker, which the drain wakes. Polled again
    // only once the token says the drain began: each poll of a registered wait
    // takes the token's lock, which every connection shares. What this poll says
    // is left to `next_request`, where a request already read still goes first.
    let mut drained = std::pin::pin!(draining.cancelled());
    let _ = std::future::poll_fn(|cx| Poll::Ready(drained.as_mut().poll(cx))).await;
    // One timer for the connection's life, armed for its first head and moved on
    // only when it fires early (see `next_request`).
    let mut head_timer = std::pin::pin!(tokio::time::sleep(rules.header_read_timeout));
    loop {
        let waits = (draining, drained.as_mut(), head_timer.as_mut());
        let next = next_request(stream, &mut buf, rules, &takes, waits).await;
        let (request, close) = match next {
            Next::Request(request, close) => (request, close),
            Next::Hyper => return Ended::Hyper(buf.freeze()),
            Next::Done => return Ended::Done,
        };
        let response = answer(request).await;
        let close = close || !rules.keep_alive || draining.is_cancelled();
        match write_response(stream, response, close, rules.send_timeout, &mut out).await {
            Ok(false) => {}
            Ok(true) => {
                close_gently(stream).await;
                return Ended::Done;
            }
            Err(_) => return Ended::Done,
        }
    }
}

/// Reads until `buf` starts with a whole head and says what it is, within the
/// header read timeout from the start of the wait.
///
/// The timeout is the connection's one timer (`head_timer`), not one made for each
/// wait: registering a timer and cancelling it for every wait (with the send
/// timeouts) cost a hit about 1,000 instructions (docs/BENCHMARKS.md, instructions
/// per hit). A wait for a head never moves the timer. It stays where an earlier
/// wait set it, at or before this wait's deadline; when it fires before the
/// deadline it is moved to it, and the wait goes on. A connection busy with
/// requests so moves it at most once per timeout, and a wait still ends at its own
/// deadline.
async fn next_request<T>(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    rules: Rules,
    takes: &T,
    (draining, mut drained, mut head_timer): (
        &CancellationToken,
        Pin<&mut tokio_util::sync::WaitForCancellationFuture<'_>>,
        Pin<&mut tokio::time::Sleep>,
    ),
) -> Next
where
    T: Fn(&str) -> bool,
{
    let mut deadline = None;
    loop {
        if !buf.is_empty() {
            match head::parse(buf, rules.max_head, rules.max_headers, takes) {
                Parsed::Take(request, close) => return Next::Request(request, close),
                Parsed::Partial if buf.len() < rules.max_head => {}
                _ => return Next::Hyper,
            }
        }
        if buf.capacity() - buf.len() < READ_BUFFER / 4 {
            buf.reserve(READ_BUFFER);
        }
        // The clock is read only when the head is not there yet.
        let until = *deadline.get_or_insert_with(|| Instant::now() + rules.header_read_timeout);
        // The drain's wait, looked at only once the token says it began (at any
        // wake-up, not only when this select starts): the drain wakes this task
        // through the wait `serve` registered.
        let between_requests = buf.is_empty();
        let drain = std::future::poll_fn(|cx| {
            if between_requests && draining.is_cancelled() {
                drained.as_mut().poll(cx)
            } else {
                Poll::Pending
            }
        });
        tokio::select! {
            biased;
            read = stream.read_buf(buf) => match read {
                Ok(n) if n > 0 => {}
                _ => return Next::Done,
            },
            () = head_timer.as_mut() => {
                if head_timer.deadline() >= until {
                    return Next::Done;
                }
                head_timer.as_mut().reset(until);
            }
            () = drain => return Next::Done,
        }
    }
}

/// Writes `response`, closing the connection after it when `close`; `Ok(true)`
/// when the connection must close (asked, or a streamed body that ran to its end).
async fn write_response(
    stream: &mut TcpStream,
    response: Response<Body>,
    close: bool,
    send_timeout: Duration,
    out: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let (parts, body) = response.into_parts();
    let bodyless = parts.status.is_informational()
        || matches!(
            parts.status,
            http::StatusCode::NO_CONTENT | http::StatusCode::NOT_MODIFIED
        );
    out.clear();
    match body {
        Either::Left(mut full) => {
            let data = match full.frame().await {
                Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
                _ => Bytes::new(),
            };
            if bodyless {
                head::write(out, &parts, Framing::None, close, SystemTime::now());
                send(stream, &mut &out[..], send_timeout).await?;
            } else {
                let length = Framing::Length(data.len() as u64);
                head::write(out, &parts, length, close, SystemTime::now());
                send(stream, &mut Buf::chain(&out[..], data), send_timeout).await?;
            }
            Ok(close)
        }
        Either::Right(mut chunks) => {
            // No endpoint the bare socket takes streams its answer; should one,
            // it goes out chunked and the connection closes after it.
            head::write(out, &parts, Framing::Chunked, true, SystemTime::now());
            send(stream, &mut &out[..], send_timeout).await?;
            while let Some(Ok(frame)) = chunks.frame().await {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    let size = format!("{:x}\r\n", data.len());
                    let mut chunk = Buf::chain(Buf::chain(size.as_bytes(), data), &b"\r\n"[..]);
                    send(stream, &mut chunk, send_timeout).await?;
                }
            }
            send(stream, &mut &b"0\r\n\r\n"[..], send_timeout).await?;
            Ok(true)
        }
    }
}

/// Writes all of `bytes` (vectored where they are in pieces); a write that makes no
/// progress for `timeout` fails.
async fn send(
    stream: &mut TcpStream,
    bytes: &mut impl Buf,
    timeout: Duration,
) -> std::io::Result<()> {
    // What the socket takes at once goes with no timer made: nearly every answer
    // fits its buffer, and the timeout's clock read and timer cost each a few
    // hundred instructions.
    while bytes.has_remaining() {
        let mut slices = [std::io::IoSlice::new(&[]); 4];
        let n = bytes.chunks_vectored(&mut slices);
        match stream.try_write_vectored(&slices[..n]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(written) => bytes.advance(written),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => break,
            Err(e) => return Err(e),
        }
    }
    while bytes.has_remaining() {
        match tokio::time::timeout(timeout, stream.write_buf(bytes)).await {
            Ok(Ok(0)) => return Err(ErrorKind::WriteZero.into()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(ErrorKind::TimedOut.into()),
        }
    }
    Ok(())
}

/// Closes `stream` after an answer: no more writes, then what the client still
/// sends is read and dropped for at most [`LINGER`], so that closing does not reset
/// the connection before the client has read the answer.
pub(crate) async fn close_gently(stream: &mut TcpStream) {
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
