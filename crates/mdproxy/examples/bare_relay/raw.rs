//! The relay without hyper (`--raw`): each connection's task reads a request head
//! with httparse, sends `GET path` to the upstream over a pooled keep-alive
//! connection, reads the answer's head with httparse and its body by
//! `Content-Length`, and writes status, `Content-Type` and body back in one write.
//! No timeouts, no chunked bodies, no HTTP/2, no request bodies: a measurement of
//! what a server side written by hand could reach (docs/BENCHMARKS.md, "The stack's
//! floor"), not a server to run.

use std::sync::{Arc, Mutex};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Headers parsed at most, either way.
const MAX_HEADERS: usize = 32;

/// Where requests go, how they are signed, and the idle upstream connections.
struct Upstream {
    address: String,
    /// `Host: ...\r\nAuthorization: Bearer ...\r\n\r\n`: the end of every request.
    tail: Vec<u8>,
    idle: Mutex<Vec<TcpStream>>,
}

/// An upstream answer, read whole.
struct Answer {
    status: u16,
    content_type: Option<Vec<u8>>,
    body: BytesMut,
}

impl Upstream {
    /// Sends `GET target` and reads the answer, on an idle connection or a new one.
    async fn ask(&self, target: &[u8]) -> std::io::Result<Answer> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut stream = match idle {
            Some(stream) => stream,
            None => {
                let stream = TcpStream::connect(&self.address).await?;
                stream.set_nodelay(true)?;
                stream
            }
        };
        let mut request = Vec::with_capacity(target.len() + self.tail.len() + 16);
        request.extend_from_slice(b"GET ");
        request.extend_from_slice(target);
        request.extend_from_slice(b" HTTP/1.1\r\n");
        request.extend_from_slice(&self.tail);
        stream.write_all(&request).await?;
        let answer = read_answer(&mut stream).await?;
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(stream);
        Ok(answer)
    }
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads one answer: its head, then `Content-Length` bytes of body.
async fn read_answer(stream: &mut TcpStream) -> std::io::Result<Answer> {
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(invalid("upstream closed"));
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(head) = response.parse(&buf).map_err(|_| invalid("head"))?
        else {
            continue;
        };
        let mut length = None;
        let mut content_type = None;
        for header in response.headers.iter() {
            if header.name.eq_ignore_ascii_case("content-length") {
                length = std::str::from_utf8(header.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<usize>().ok());
            } else if header.name.eq_ignore_ascii_case("content-type") {
                content_type = Some(header.value.to_vec());
            }
        }
        let status = response.code.unwrap_or(502);
        let length = length.ok_or_else(|| invalid("no Content-Length"))?;
        buf.advance(head);
        while buf.len() < length {
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(invalid("body cut short"));
            }
        }
        let body = buf.split_to(length);
        return Ok(Answer {
            status,
            content_type,
            body,
        });
    }
}

/// The answer's head and body in one buffer.
fn response(answer: &Answer) -> Vec<u8> {
    let mut out = Vec::with_capacity(answer.body.len() + 128);
    out.extend_from_slice(format!("HTTP/1.1 {} X\r\n", answer.status).as_bytes());
    if let Some(kind) = &answer.content_type {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(kind);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", answer.body.len()).as_bytes());
    out.extend_from_slice(&answer.body);
    out
}

/// One client connection: requests one after another until it closes.
async fn connection(mut client: TcpStream, upstream: Arc<Upstream>) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        let parsed = request.parse(&buf).map_err(|_| invalid("request head"))?;
        let httparse::Status::Complete(head) = parsed else {
            if client.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
            continue;
        };
        let target = request.path.unwrap_or("/").as_bytes().to_vec();
        buf.advance(head);
        let out = match upstream.ask(&target).await {
            Ok(answer) => response(&answer),
            Err(_) => b"HTTP/1.1 502 X\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        client.write_all(&out).await?;
    }
}

/// Serves relayed requests on `listener` until the process ends.
pub async fn serve(listener: TcpListener, upstream: &str, token: &str) -> Result<(), String> {
    let tail = format!("Host: {upstream}\r\nAuthorization: Bearer {token}\r\n\r\n");
    let upstream = Arc::new(Upstream {
        address: upstream.to_owned(),
        tail: tail.into_bytes(),
        idle: Mutex::new(Vec::new()),
    });
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let upstream = Arc::clone(&upstream);
        tokio::spawn(async move {
            let _ = connection(stream, upstream).await;
        });
    }
}
