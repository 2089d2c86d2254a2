//! What a new clear-text connection speaks, read from its first bytes without
//! consuming them: HTTP/2's preface, or anything else (HTTP/1.1).

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

/// Peeks at a new connection's first bytes without consuming them: HTTP/2 when they
/// are the preface, HTTP/1 as soon as they differ from it, unknown when too few
/// have come to tell; `None` when the client closed without a byte.
pub(crate) async fn sniff(stream: &TcpStream) -> Option<(Protocol, First)> {
    let mut bytes = [0u8; 24];
    let len = stream.peek(&mut bytes).await.ok()?;
    let seen = &bytes[..len];
    let protocol = match len {
        0 => return None,
        _ if !H2_PREFACE.starts_with(seen) => Protocol::H1,
        24 => Protocol::H2,
        _ => Protocol::Unknown,
    };
    Some((protocol, First { bytes, len }))
}
