//! One HTTP/1.1 exchange on a direct connection: the request's head written whole,
//! the answer's head parsed by httparse (hyper's own parser), its body read by its
//! framing (RFC 9112 §6.3): a length, chunks, or the connection's end. Only what a
//! GET without a body needs: no pipelining, no upgrades, no request body.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{CommonHeaders, Own, Received, WireError, ends_chunked, wire_error};

/// The most an answer's head, or a chunked body's trailers, may take.
const MAX_HEAD: usize = 64 * 1024;
/// The most header lines an answer's head may have.
const MAX_HEADERS: usize = 100;
/// The least room a read into the connection's buffer is given.
const READ_ROOM: usize = 8 * 1024;

/// A GET's head for the target `path` then `rest` (origin form, in the two parts
/// an [`Address`](super::Address) holds) with the `common` headers and the
/// request's `own` (one of `own` replaces the common ones of its name), and `Host`
/// from `authority` when neither carries one; `None` when the target holds what a
/// request line cannot (a space, a control byte).
pub(super) fn request_head(
    (path, rest): (&str, &str),
    authority: &str,
    common: &CommonHeaders,
    own: &[Own],
) -> Option<Vec<u8>> {
    if own.iter().any(|(name, _)| common.map.contains_key(name)) {
        let merged = CommonHeaders::new(common.with(own));
        return request_head((path, rest), authority, &merged, &[]);
    }
    if ![path, rest]
        .iter()
        .all(|part| part.bytes().all(|b| b.is_ascii_graphic()))
    {
        return None;
    }
    let mut head = Vec::with_capacity(64 + path.len() + rest.len() + common.lines.len());
    head.extend_from_slice(b"GET ");
    head.extend_from_slice(path.as_bytes());
    head.extend_from_slice(rest.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    if !common.has_host && !own.iter().any(|(name, _)| name == http::header::HOST) {
        if !authority.bytes().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        head.extend_from_slice(b"host: ");
        head.extend_from_slice(authority.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(&common.lines);
    put_lines(&mut head, own.iter().map(|(name, value)| (name, value)));
    head.extend_from_slice(b"\r\n");
    Some(head)
}

/// `name: value` and CRLF for each of `headers`. Names are tokens and values hold
/// no CR or LF: `http` checked both.
pub(super) fn put_lines<'h>(
    head: &mut Vec<u8>,
    headers: impl IntoIterator<Item = (&'h HeaderName, &'h HeaderValue)>,
) {
    for (name, value) in headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
}

/// How an answer's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// No body (1xx, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// At the connection's end.
    Close,
}

/// What the exchange keeps of an answer's head.
struct Head {
    status: StatusCode,
    framing: Framing,
    /// The connection may carry another request after this answer.
    keep_alive: bool,
    retry_after: Option<HeaderValue>,
    date: Option<HeaderValue>,
}

/// An answer's head from httparse's parse, or `None` when its framing is broken
/// (two lengths that differ, a length that is not a number).
fn head_of(response: &httparse::Response<'_, '_>) -> Option<Head> {
    let status = StatusCode::from_u16(response.code?).ok()?;
    let http11 = response.version? == 1;
    let (mut length, mut chunked, mut coded, mut close, mut keep) =
        (None, false, false, false, false);
    let (mut retry_after, mut date) = (None, None);
    for header in response.headers.iter() {
        let (name, value) = (header.name, header.value);
        if name.eq_ignore_ascii_case("content-length") {
            // Digits only (RFC 9110 §8.6): `parse` would take a sign too.
            let digits = value.trim_ascii();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
            if length.is_some_and(|seen| seen != n) {
                return None;
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // The last coding of the last such header decides.
            coded = true;
            chunked = ends_chunked(value);
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("retry-after") {
            retry_after = HeaderValue::from_bytes(value).ok();
        } else if name.eq_ignore_ascii_case("date") {
            date = HeaderValue::from_bytes(value).ok();
        }
    }
    let framing = if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Empty
    } else if coded {
        if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        }
    } else {
        length.map_or(Framing::Close, Framing::Length)
    };
    Some(Head {
        status,
        framing,
        // A length beside a transfer coding is ignored, and the connection with
        // it: such an answer may be an attempt to split answers (RFC 9112 §6.3).
        keep_alive: framing != Framing::Close
            && !close
            && (http11 || keep)
            && !(coded && length.is_some()),
        // As `read` keeps them for the proxied path: a `Date` only beside a
        // `Retry-After`.
        date: date.filter(|_| retry_after.is_some()),
        retry_after,
    })
}

/// The answer to a request already written on `io`, read whole within `limit`
/// bytes of body, and whether the connection can carry another request. `buf`
/// holds what the connection read and no answer used yet, and keeps what comes
/// after this answer (nothing, from an upstream that answers what it is asked).
pub(super) async fn read_answer<S>(
    io: &mut S,
    buf: &mut BytesMut,
    limit: u64,
) -> Result<(Received, bool), WireError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head = loop {
        let head = read_head(io, buf).await?;
        if head.status == StatusCode::SWITCHING_PROTOCOLS {
            // Nothing was asked to switch to.
            return Err(WireError::Unreachable);
        }
        if !head.status.is_informational() {
            break head;
        }
    };
    let body = match head.framing {
        Framing::Empty => Bytes::new(),
        Framing::Length(n) => read_length(io, buf, n, limit).await?,
        Framing::Chunked => read_chunked(io, buf, limit).await?,
        Framing::Close => read_to_end(io, buf, limit).await?,
    };
    let received = Received {
        status: head.status,
        retry_after: head.retry_after,
        date: head.date,
        body,
        close_delimited: head.framing == Framing::Close,
    };
    Ok((received, head.keep_alive))
}

/// Writes `head` whole and flushes it (TLS keeps what it is given until then).
pub(super) async fn write_head<S: AsyncWrite + Unpin>(
    io: &mut S,
    head: &[u8],
) -> Result<(), WireError> {
    io.write_all(head).await.map_err(|e| wire_error(&e))?;
    io.flush().await.map_err(|e| wire_error(&e))
}

/// Reads more of the connection into `buf`; the connection's end before an answer
/// is whole is an answer cut off.
async fn fill<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) -> Result<(), WireError> {
    buf.reserve(READ_ROOM);
    match io.read_buf(buf).await {
        Ok(0) => Err(WireError::Unreachable),
        Ok(_) => Ok(()),
        Err(e) => Err(wire_error(&e)),
    }
}

/// One head, status line to blank line, taken off `buf`.
async fn read_head<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<Head, WireError> {
    loop {
        if let Some((head, len)) = parse_head(buf)? {
            buf.advance(len);
            return Ok(head);
        }
        if buf.len() >= MAX_HEAD {
            return Err(WireError::Unreachable);
        }
        fill(io, buf).await?;
    }
}

/// The head at the start of `buf` and its length, `None` while it is not all
/// there. Not async: the parser's header slots (3 KiB) stay on this call's stack,
/// out of the exchange's future, and are left uninitialised until parsed into.
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, WireError> {
    let mut headers = [MaybeUninit::uninit(); MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut headers,
    );
    match parsed {
        Ok(httparse::Status::Complete(len)) => match head_of(&response) {
            Some(head) => Ok(Some((head, len))),
            None => Err(WireError::Unreachable),
        },
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(WireError::Unreachable),
    }
}

/// A body of `n` bytes, in a buffer of its own sized to it (a slice of the
/// connection's buffer would pin all of it for as long as the answer is cached).
async fn read_length<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    n: u64,
    limit: u64,
) -> Result<Bytes, WireError> {
    if n > limit {
        return Err(WireError::TooLarge { limit });
    }
    let n = usize::try_from(n).map_err(|_| WireError::TooLarge { limit })?;
    let mut body = BytesMut::with_capacity(n);
    let held = buf.len().min(n);
    body.extend_from_slice(&buf[..held]);
    buf.advance(held);
    while body.len() < n {
        // Straight into the body, never past it.
        let want = (n - body.len()) as u64;
        match (&mut *io).take(want).read_buf(&mut body).await {
            Ok(0) => return Err(WireError::Unreachable),
            Ok(_) => {}
            Err(e) => return Err(wire_error(&e)),
        }
    }
    Ok(body.freeze())
}

/// A chunked body, its chunks joined, its trailers read and dropped.
async fn read_chunked<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    limit: u64,
) -> Result<Bytes, WireError> {
    let mut body = BytesMut::new();
    loop {
        let size = loop {
            match httparse::parse_chunk_size(buf) {
                Ok(httparse::Status::Complete((len, size))) => {
                    buf.advance(len);
                    break size;
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => fill(io, buf).await?,
                _ => return Err(WireError::Unreachable),
            }
        };
        if size == 0 {
            skip_trailers(io, buf).await?;
            return Ok(body.freeze());
        }
        if (body.len() as u64).saturating_add(size) > limit {
            return Err(WireError::TooLarge { limit });
        }
        // Within the limit, so it fits a usize.
        let mut left = size as usize;
        while left > 0 {
            if buf.is_empty() {
                fill(io, buf).await?;
            }
            let take = left.min(buf.len());
            body.extend_from_slice(&buf[..take]);
            buf.advance(take);
            left -= take;
        }
        while buf.len() < 2 {
            fill(io, buf).await?;
        }
        if &buf[..2] != b"\r\n" {
            return Err(WireError::Unreachable);
        }
        buf.advance(2);
    }
}

/// The trailer lines after a chunked body's last chunk, to the blank line.
async fn skip_trailers<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
) -> Result<(), WireError> {
    let mut taken = 0;
    loop {
        match buf.windows(2).position(|pair| pair == b"\r\n") {
            Some(0) => {
                buf.advance(2);
                return Ok(());
            }
            Some(end) if taken + end < MAX_HEAD => {
                taken += end + 2;
                buf.advance(end + 2);
            }
            None if taken + buf.len() < MAX_HEAD => fill(io, buf).await?,
            _ => return Err(WireError::Unreachable),
        }
    }
}

/// A body that ends with the connection.
async fn read_to_end<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    limit: u64,
) -> Result<Bytes, WireError> {
    let mut body = BytesMut::with_capacity(buf.len());
    loop {
        if body.len() as u64 + buf.len() as u64 > limit {
            return Err(WireError::TooLarge { limit });
        }
        body.extend_from_slice(buf);
        buf.clear();
        buf.reserve(READ_ROOM);
        match io.read_buf(buf).await {
            Ok(0) => return Ok(body.freeze()),
            Ok(_) => {}
            Err(e) => return Err(wire_error(&e)),
        }
    }
}

#[cfg(test)]
mod tests;
