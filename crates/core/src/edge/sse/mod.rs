//! Event streams on the bare socket: a plain HTTP/1.1 `GET` of the stream path is
//! taken off the socket (its head read by the bare socket's `head`), answered by the same handler as every other
//! request, and its text/event-stream body written as chunks straight to the
//! socket, without hyper's per-connection read and write buffers (16 KiB that an
//! idle subscriber would hold for hours; docs/quote-stream.md). The socket is
//! also the stream's outlet (`outlet`): the hub's fan-out writes events to it itself
//! while the stream is caught up. Anything unusual (a head split over several
//! reads, a body, an upgrade, HTTP/1.0) is left to hyper untouched.

mod outlet;

pub use crate::edge::bare::head::may_be;
pub use outlet::{Socket, chunk};

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::SystemTime;

use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::edge::bare::close_gently;
use crate::edge::bare::head::{self, Framing};
use crate::edge::body::Body;

/// Marks an answer whose body frames are HTTP/1.1 chunks already (the hub frames a
/// stream's events when it writes them to an [`Outlet`](crate::hub::Outlet)).
#[derive(Clone, Copy, Debug)]
pub struct Chunked;

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
    let Some(request) = head::request_of(&parsed, path) else {
        return Taken::Elsewhere;
    };
    match stream.read_exact(&mut buf[..len]).await {
        Ok(_) => Taken::Request(Box::new(request)),
        Err(_) => Taken::Gone,
    }
}

/// Writes `response` on `socket`: a streamed body as chunks until it ends or the
/// client goes (its end is noticed while the stream is quiet, too); a whole body
/// with `Connection: close`, then the connection is closed. The socket is shared
/// with the stream's [`Socket`] outlet, which writes only while the body rests.
pub async fn write(socket: Arc<TcpStream>, response: Response<Body>) {
    let (parts, mut body) = response.into_parts();
    let length = body.size_hint().exact();
    let chunked = parts.extensions.get::<Chunked>().is_some();
    let framing = length.map_or(Framing::Chunked, Framing::Length);
    let mut head = Vec::with_capacity(512);
    head::write(
        &mut head,
        &parts,
        framing,
        length.is_some(),
        SystemTime::now(),
    );
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
                        let data = if chunked { data } else { chunk(&data) };
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
