//! The SSE text of the hub's events: a quote event (`event: quote`, `id:`, `data:`
//! with every row on one line), the `retry:` line and the keepalive comment. Each
//! is built into one buffer with room kept in front and behind for the outlet's
//! framing (none without an outlet), so framing never copies an event.

use bytes::BytesMut;

use crate::hub::port::Room;

/// The fixed part of a quote event: `event: quote\nid: ` (17), the id (at most 20
/// digits), `\ndata: [` (8) and `]\n\n` (3).
const EVENT_TEXT: usize = 48;

/// One quote event being built: `event: quote`, `id: <id>`, `data: [<row>,...]`.
pub(super) struct Event {
    out: BytesMut,
    empty: bool,
}

impl Event {
    /// An event of `id` with room for `rows` bytes of rows, after `room.head` bytes
    /// kept for the framing (and `room.tail` behind the text).
    pub(super) fn new(id: u64, rows: usize, room: Room) -> Event {
        let mut out = BytesMut::with_capacity(room.head + EVENT_TEXT + rows + room.tail);
        out.resize(room.head, 0);
        out.extend_from_slice(b"event: quote\nid: ");
        out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
        out.extend_from_slice(b"\ndata: [");
        Event { out, empty: true }
    }

    /// Adds one row (a line of JSON).
    pub(super) fn push(&mut self, row: &[u8]) {
        if !self.empty {
            self.out.extend_from_slice(b",");
        }
        self.empty = false;
        self.out.extend_from_slice(row);
    }

    /// The whole event, its room in front still there.
    pub(super) fn finish(mut self) -> BytesMut {
        self.out.extend_from_slice(b"]\n\n");
        self.out
    }
}

/// `text` (a `retry:` line or a comment, with its blank line) after `room.head`
/// bytes of room.
pub(super) fn control(text: &[u8], room: Room) -> BytesMut {
    let mut out = BytesMut::with_capacity(room.head + text.len() + room.tail);
    out.resize(room.head, 0);
    out.extend_from_slice(text);
    out
}

/// The `retry:` line a stream starts with: how long EventSource waits before it
/// reconnects.
pub(super) fn retry(ms: u64) -> String {
    format!("retry: {ms}\n\n")
}

/// The comment that keeps an idle stream's connection (and the proxies on its way)
/// from timing out.
pub(super) const KEEPALIVE: &[u8] = b": keepalive\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_one_line_sse() {
        let a = br#"{"code":"600519.SH","price":1}"#;
        let b = br#"{"code":"000001.SZ","price":2}"#;
        let mut e = Event::new(7, 0, Room::default());
        e.push(a);
        e.push(b);
        assert_eq!(
            &e.finish()[..],
            b"event: quote\nid: 7\ndata: [{\"code\":\"600519.SH\",\"price\":1},{\"code\":\"000001.SZ\",\"price\":2}]\n\n"
        );
    }

    /// The room asked for is kept in front and left free behind, so the longest id
    /// and the framing fit without growing the buffer.
    #[test]
    fn room_is_kept_in_front_and_behind() {
        let room = Room { head: 18, tail: 2 };
        let row = [b'q'; 300];
        let mut e = Event::new(u64::MAX, row.len(), room);
        e.push(&row);
        let out = e.finish();
        assert_eq!(&out[..18], &[0u8; 18]);
        assert!(out[18..].starts_with(b"event: quote\nid: 18446744073709551615\n"));
        assert!(
            out.capacity() - out.len() >= room.tail,
            "{}",
            out.capacity()
        );
        let c = control(KEEPALIVE, room);
        assert_eq!(&c[18..], KEEPALIVE);
        assert!(c.capacity() - c.len() >= room.tail);
        assert_eq!(retry(3000), "retry: 3000\n\n");
    }
}
