//! What a new clear-text connection speaks, read from its first bytes without
//! consuming them: HTTP/2's preface, or anything else (HTTP/1.1).

use std::time::Duration;

use tokio::net::TcpStream;

use crate::edge::protocol::Protocol;

/// HTTP/2's connection preface (RFC 9113 §3.4), which an h2c client sends first.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection's first bytes, peeked.
pub(crate) struct First {
    bytes: [u8; 24],
    len: usize,
}

impl First {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// How long to wait before peeking again at a connection whose first bytes start
/// the preface but are too few to tell (a peek sees the same bytes until more come,
/// so it cannot wait for them).
const PEEK_AGAIN: Duration = Duration::from_millis(5);

/// Peeks at a new connection's first bytes without consuming them: HTTP/2 when they
/// are the preface, HTTP/1 as soon as they differ from it; while too few have come
/// to tell, it peeks again (the caller bounds the wait: a client that sends `PRI`
/// and stops must not hold its slot). `None` when the client closed first.
pub(crate) async fn sniff(stream: &TcpStream) -> Option<(Protocol, First)> {
    let mut bytes = [0u8; 24];
    loop {
        let len = stream.peek(&mut bytes).await.ok()?;
        let seen = &bytes[..len];
        let protocol = match len {
            0 => return None,
            _ if !H2_PREFACE.starts_with(seen) => Protocol::H1,
            24 => Protocol::H2,
            _ => {
                tokio::time::sleep(PEEK_AGAIN).await;
                continue;
            }
        };
        return Some((protocol, First { bytes, len }));
    }
}
