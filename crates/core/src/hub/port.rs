//! What the hub exchanges with its callers and its parts: the request for a stream
//! ([`Subscription`]), what the edge provides for one (the connection's [`Outlet`],
//! which frames and takes its chunks, and its [`Hangup`]), how far apart the polls
//! are now ([`Pacing`]), and what a stream needs of its hub ([`Membership`]). The
//! hub knows nothing of HTTP: these are its ports. A leaf: it imports no other part
//! of the hub.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

/// A subscribed code (canonical). One copy per code is shared by every subscriber
/// that wants it: a list of 200 codes costs 200 pointers, not 200 strings.
pub(super) type Code = Arc<str>;

/// A connection the fan-out writes a stream's events to itself, without waking the
/// stream's task (an HTTP/1.1 answer written by hand), and that frames each chunk
/// of the stream, those written here and those its task yields alike.
pub trait Outlet: Send + Sync + std::fmt::Debug {
    /// The room the framing needs around a chunk's text; the hub keeps it free in
    /// every chunk it builds for this outlet, so framing copies nothing.
    fn room(&self) -> Room;

    /// `text` as it goes on the wire: `text` starts with [`Outlet::room`]'s
    /// `head` bytes of room, and has its `tail` free behind it.
    fn frame(&self, text: BytesMut) -> Bytes;

    /// Writes what the connection takes of `bytes` now, without waiting: how many
    /// bytes that was (`WouldBlock` when none).
    ///
    /// # Errors
    /// The connection's write error.
    fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize>;
}

/// How the hub ends a stream whose subscriber stalls or whose token is revoked:
/// its connection closed, or its HTTP/2 stream reset alone.
pub trait Hangup: Send + Sync + std::fmt::Debug {
    /// Ends the stream now.
    fn close(&self);

    /// Whether [`Hangup::close`] was called.
    fn is_closed(&self) -> bool;

    /// The connection the stream is on, as a number that its other streams share
    /// and no other open connection has: the fan-out wakes the streams of one
    /// connection one after another, so that its task takes all of their events in
    /// one turn and one write. By default this hangup's address (a hangup a
    /// connection).
    fn connection_key(&self) -> usize {
        std::ptr::from_ref(self).cast::<()>().addr()
    }
}

/// Room around a chunk's text for an outlet's framing, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// Before the text (at most; what the framing does not use is skipped).
    pub head: usize,
    /// After the text.
    pub tail: usize,
}

/// A request for a stream of quotes.
#[derive(Debug)]
pub struct Subscription<'a> {
    /// The client's token (its index): streams are limited per token.
    pub token: usize,
    /// Canonical codes, comma-separated, in the client's order.
    pub codes: &'a str,
    /// Most quotes per event.
    pub pz: usize,
    /// The `Last-Event-ID` the client reconnected with: the stream's ids continue
    /// past it (its first event is still a whole snapshot).
    pub last_event_id: Option<u64>,
    /// Ends the stream (its connection, or its HTTP/2 stream) if it stalls, or its
    /// token is revoked.
    pub connection: Option<Arc<dyn Hangup>>,
    /// Where the fan-out writes the events itself while the stream is caught up.
    pub outlet: Option<Arc<dyn Outlet>>,
}

/// How far apart the polls are now, and why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacing {
    /// The wait after the last poll before the next.
    pub interval: Duration,
    /// What stretched it past the hub's interval (`paused`, `pace`,
    /// `minute_quota`, `day_quota`); none: the interval.
    pub held_by: Option<&'static str>,
}

/// What a stream needs of the hub it belongs to: the hub's time, and leaving it.
pub(super) trait Membership: Send + Sync {
    /// Milliseconds since the hub started.
    fn now_ms(&self) -> u64;

    /// Unregisters subscriber `id` (its stream was dropped).
    fn leave(&self, id: u64);
}
