//! HTTP/1.1 chunk framing, and the bare socket as the hub's [`Outlet`]: the hub
//! builds every chunk of a stream on it with room for the size line in front and
//! the CRLF behind, which the outlet fills in, and the fan-out writes to the socket
//! without waiting.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::net::TcpStream;

use crate::hub::{Outlet, Room};

/// The most bytes a chunk's size line takes: 16 hex digits and CRLF.
const CHUNK_HEAD: usize = 18;

/// The room a chunk's framing takes around its data: the size line, the CRLF.
const CHUNK_ROOM: Room = Room {
    head: CHUNK_HEAD,
    tail: 2,
};

/// A bare socket as the hub's outlet.
#[derive(Debug)]
pub struct Socket(pub Arc<TcpStream>);

impl Outlet for Socket {
    fn room(&self) -> Room {
        CHUNK_ROOM
    }

    fn frame(&self, text: BytesMut) -> Bytes {
        frame(text)
    }

    fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.try_write(bytes)
    }
}

/// `data` after [`CHUNK_HEAD`] bytes of room, as one HTTP/1.1 chunk: its size line
/// written into the end of the room, the data, CRLF.
fn frame(mut data: BytesMut) -> Bytes {
    debug_assert!(data.len() >= CHUNK_HEAD, "room for the size line");
    let size = data.len() - CHUNK_HEAD;
    data.extend_from_slice(b"\r\n");
    let mut line = [0u8; CHUNK_HEAD];
    let line = chunk_size_line(size, &mut line);
    let start = CHUNK_HEAD - line.len();
    data[start..CHUNK_HEAD].copy_from_slice(line);
    let mut chunk = data.freeze();
    chunk.advance(start);
    chunk
}

/// `data` as one HTTP/1.1 chunk: its size line, the data, CRLF.
pub fn chunk(data: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(CHUNK_HEAD + data.len() + 2);
    framed.resize(CHUNK_HEAD, 0);
    framed.extend_from_slice(data);
    frame(framed)
}

/// The size line of an HTTP/1.1 chunk of `n` bytes (`n` in hexadecimal, then
/// CRLF), written at the end of `line`.
fn chunk_size_line(mut n: usize, line: &mut [u8; CHUNK_HEAD]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut at = CHUNK_HEAD - 2;
    line[at..].copy_from_slice(b"\r\n");
    loop {
        at -= 1;
        line[at] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    &line[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_hex() {
        let mut line = [0u8; CHUNK_HEAD];
        assert_eq!(chunk_size_line(0, &mut line), b"0\r\n");
        assert_eq!(chunk_size_line(255, &mut line), b"ff\r\n");
        assert_eq!(chunk_size_line(0x1a2b3, &mut line), b"1a2b3\r\n");
        assert_eq!(chunk_size_line(usize::MAX, &mut line).len(), CHUNK_HEAD);
    }

    /// A text built with the outlet's room becomes one whole chunk, its size line in
    /// front, without growing its buffer.
    #[test]
    fn framed_text_is_one_whole_chunk() {
        let sse = format!("event: quote\nid: 12\ndata: [{}]\n\n", "q".repeat(300));
        let mut text = BytesMut::with_capacity(CHUNK_HEAD + sse.len() + 2);
        text.resize(CHUNK_HEAD, 0);
        text.extend_from_slice(sse.as_bytes());
        let framed = frame(text);
        assert_eq!(framed, format!("{:x}\r\n{sse}\r\n", sse.len()).into_bytes());
        assert_eq!(chunk(b"retry: 3000\n\n"), &b"d\r\nretry: 3000\n\n\r\n"[..]);
        assert_eq!(chunk(b""), &b"0\r\n\r\n"[..]);
    }
}
