//! One subscriber's stream: its feed (codes, pz, what it was sent, liveness), the
//! state machine its task runs (`retry:`, the snapshot, then what changed, with
//! keepalives when idle), and the events built one at a time from the board, only
//! when the connection takes them. On an outlet the task rests while the stream is
//! caught up and the fan-out writes for it (`fanout`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, watch};

use crate::hub::board::Board;
use crate::hub::event::{self, Event};
use crate::hub::port::{Code, Membership, Outlet, Room};

/// Liveness of one subscriber, written by its stream and read by the poll loop.
#[derive(Debug)]
pub(super) struct Progress {
    /// Milliseconds since the hub started at which the stream last sent something.
    pub(super) last_ms: AtomicU64,
    /// The board tick the stream last caught up with.
    pub(super) delivered_tick: AtomicU64,
    /// Bytes of events built and not yet taken by the connection.
    pub(super) pending_bytes: AtomicU64,
}

/// One subscriber's stream state, shared by its task and the fan-out.
#[derive(Debug)]
pub(super) struct Feed {
    /// The subscriber's codes, in its order; the registry's shared copies.
    pub(super) codes: Arc<[Code]>,
    pz: usize,
    /// Added to a board's tick to make an event's id: 0, unless the client
    /// reconnected with a `Last-Event-ID` at or past the board's tick (another
    /// node's, or this process's before a restart), so its ids keep rising.
    id_offset: u64,
    pub(super) progress: Progress,
    cursor: Mutex<Cursor>,
    /// Where the fan-out writes this subscriber's events itself; without one, its
    /// task takes every event from the board. Every chunk of a stream on an outlet
    /// is framed by the outlet.
    pub(super) outlet: Option<Arc<dyn Outlet>>,
    /// The outlet's room, kept around every chunk built for it.
    room: Room,
    /// Wakes a resting task: the fan-out handed the stream back (its connection
    /// took less than an event), the hub's sweep found a keepalive due
    /// (`hub::keepalive`), or the hub stops.
    pub(super) kick: Notify,
    /// Wakes a resting task without an outlet: a new board (the fan-out). Apart
    /// from `kick`, so that a board never sends a keepalive early: one is due a
    /// fixed period after the last send, and the sweep sends it.
    pub(super) board: Notify,
    /// `hub.keepalive_secs`, plus this stream's share of an eighth of it (see
    /// [`keepalive_slack_ms`]): how long after its last send a keepalive is due.
    keepalive_ms: u64,
}

/// Where a subscriber's stream stands.
#[derive(Debug)]
pub(super) struct Cursor {
    /// `sent[i]`: the `changed_at` of the last quote of the feed's `codes[i]` sent.
    sent: Vec<u64>,
    /// A pass over a board under way: one event is built per call, only when the
    /// connection takes it, so nothing is built ahead.
    pub(super) scan: Option<Scan>,
    /// A chunk that goes out before anything else: `retry:`, a keepalive, or the
    /// rest of an event the connection did not take whole.
    control: Option<Bytes>,
    /// The task rests and the fan-out writes the events (only on an outlet).
    pub(super) pushed: bool,
}

/// A pass over one board: where it continues, and whether it sends every quote
/// (the snapshot) or only those that changed since this subscriber last got them.
/// It holds the board (shared, not copied) so the events of one pass carry one
/// tick; the next pass reads the newest board, so updates collapse between passes.
#[derive(Debug)]
pub(super) struct Scan {
    board: Arc<Board>,
    next: usize,
    snapshot: bool,
}

impl Scan {
    /// A pass over `board` sending what changed.
    pub(super) fn changes(board: Arc<Board>) -> Scan {
        Scan {
            board,
            next: 0,
            snapshot: false,
        }
    }
}

impl Feed {
    /// A feed of `codes` at `pz` per event, its ids shifted by `id_offset`, on
    /// `outlet` if any, a keepalive due `keepalive_ms` after its last send; `now_ms`
    /// counts as its last send.
    pub(super) fn new(
        codes: Arc<[Code]>,
        pz: usize,
        id_offset: u64,
        outlet: Option<Arc<dyn Outlet>>,
        now_ms: u64,
        keepalive_ms: u64,
    ) -> Feed {
        Feed {
            progress: Progress {
                last_ms: AtomicU64::new(now_ms),
                delivered_tick: AtomicU64::new(0),
                pending_bytes: AtomicU64::new(0),
            },
            cursor: Mutex::new(Cursor {
                sent: vec![0; codes.len()],
                scan: None,
                control: None,
                pushed: false,
            }),
            codes,
            pz: pz.max(1),
            id_offset,
            room: outlet.as_ref().map(|o| o.room()).unwrap_or_default(),
            outlet,
            kick: Notify::new(),
            board: Notify::new(),
            keepalive_ms,
        }
    }

    /// How long after its last send a keepalive is due (fixed for the stream's life).
    pub(super) fn keepalive_ms(&self) -> u64 {
        self.keepalive_ms
    }

    /// Whether a keepalive is due at `now_ms`: one period after the last thing sent.
    pub(super) fn keepalive_due(&self, now_ms: u64) -> bool {
        now_ms >= self.progress.last_ms.load(Ordering::Relaxed) + self.keepalive_ms
    }

    pub(super) fn cursor(&self) -> std::sync::MutexGuard<'_, Cursor> {
        self.cursor
            .lock()
            .expect("stream cursor lock is never poisoned")
    }

    /// Keeps `chunk` (as it goes on the wire) to go out next.
    pub(super) fn hold(&self, cursor: &mut Cursor, chunk: Bytes) {
        self.progress
            .pending_bytes
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        cursor.control = Some(chunk);
    }

    /// `text` built with this stream's room, as it goes on the wire.
    fn seal(&self, text: BytesMut) -> Bytes {
        match &self.outlet {
            Some(outlet) => outlet.frame(text),
            None => text.freeze(),
        }
    }

    /// A `retry:` or keepalive, framed as this stream's chunks are.
    fn control_chunk(&self, text: &[u8]) -> Bytes {
        self.seal(event::control(text, self.room))
    }

    /// The next event of the pass under way; `None` when the pass is over. Built
    /// straight into the event's buffer, which is allocated only when a quote is due
    /// (every pass ends with a call that finds none).
    pub(super) fn next_event(&self, cursor: &mut Cursor) -> Option<Bytes> {
        let mut scan = cursor.scan.take()?;
        let board = Arc::clone(&scan.board);
        let mut event: Option<Event> = None;
        let mut items = 0;
        while scan.next < self.codes.len() && items < self.pz {
            let i = scan.next;
            scan.next += 1;
            if let Some(q) = board.quote(&self.codes[i])
                && (scan.snapshot || q.changed_at > cursor.sent[i])
            {
                // Room for as many quotes of this size as the event may still take.
                let rows = q.json.len() * (self.codes.len() - i).min(self.pz);
                event
                    .get_or_insert_with(|| {
                        Event::new(board.tick.saturating_add(self.id_offset), rows, self.room)
                    })
                    .push(&q.json);
                items += 1;
                cursor.sent[i] = q.changed_at;
            }
        }
        let Some(event) = event else {
            self.progress
                .delivered_tick
                .store(board.tick, Ordering::Relaxed);
            return None;
        };
        cursor.scan = Some(scan);
        Some(self.seal(event.finish()))
    }
}

/// Unregisters its subscriber when the stream is dropped (client gone, or shutdown).
pub(super) struct Guard {
    pub(super) hub: Arc<dyn Membership>,
    pub(super) id: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.hub.leave(self.id);
    }
}

/// A stream's keepalive period beyond `keepalive_secs`: a random share of an eighth
/// of it, fixed for the stream's life. Streams that went quiet together (their codes
/// stopped moving at one tick) come due over that eighth, not all in one sweep, and
/// streams opened together do not send their keepalives together for ever.
pub(super) fn keepalive_slack_ms(keepalive_secs: u64) -> u64 {
    fastrand::u64(..=keepalive_secs * 1_000 / 8)
}

/// One subscriber's stream: its task's side of the [`Feed`].
pub(super) struct SubStream {
    guard: Guard,
    rx: watch::Receiver<Arc<Board>>,
    feed: Arc<Feed>,
    started: bool,
    retry_ms: u64,
}

impl SubStream {
    /// A stream of `feed` for `guard`'s subscriber, reading boards from `rx`.
    pub(super) fn new(
        guard: Guard,
        rx: watch::Receiver<Arc<Board>>,
        feed: Arc<Feed>,
        retry_ms: u64,
    ) -> SubStream {
        SubStream {
            guard,
            rx,
            feed,
            started: false,
            retry_ms,
        }
    }

    /// The next chunk of the stream; `None` when it ends (the hub stops).
    pub(super) async fn next(&mut self) -> Option<Bytes> {
        let on_outlet = self.feed.outlet.is_some();
        loop {
            {
                let mut cursor = self.feed.cursor();
                // At work: the fan-out leaves this stream alone until it rests.
                cursor.pushed = false;
                if let Some(chunk) = cursor.control.take() {
                    drop(cursor);
                    self.feed
                        .progress
                        .pending_bytes
                        .fetch_sub(chunk.len() as u64, Ordering::Relaxed);
                    return Some(self.sent_now(chunk));
                }
                if let Some(event) = self.feed.next_event(&mut cursor) {
                    drop(cursor);
                    return Some(self.sent_now(event));
                }
                if !self.started {
                    // `retry:` first, then a snapshot of every code that has a quote
                    // (also after a reconnect with Last-Event-ID).
                    self.started = true;
                    let board = Arc::clone(&self.rx.borrow_and_update());
                    if board.closing {
                        return None;
                    }
                    let retry = self
                        .feed
                        .control_chunk(event::retry(self.retry_ms).as_bytes());
                    self.feed.hold(&mut cursor, retry);
                    cursor.scan = Some(Scan {
                        board,
                        next: 0,
                        snapshot: true,
                    });
                    continue;
                }
                // Caught up with its last pass; a board published while this task
                // was at work was passed by the fan-out (or its wake-up came before
                // this rest), so it takes that one itself before it rests.
                let board = Arc::clone(&self.rx.borrow_and_update());
                if board.closing {
                    return None;
                }
                let delivered = self.feed.progress.delivered_tick.load(Ordering::Relaxed);
                if board.tick > delivered {
                    cursor.scan = Some(Scan::changes(board));
                    continue;
                }
                cursor.pushed = on_outlet;
            }
            // A wake-up that came while the task was at work is kept (by its
            // `Notify`), and ends the next rest at once.
            tokio::select! {
                biased;
                // A new board (without an outlet): the loop takes it.
                () = self.feed.board.notified(), if !on_outlet => {}
                // Handed back by the fan-out (on an outlet), or a keepalive may be
                // due: the hub's sweep kicks a stream one period after its last
                // send (a busy stream is never woken to find nothing to send).
                () = self.feed.kick.notified() => {
                    let mut cursor = self.feed.cursor();
                    // At work from here: the fan-out leaves the stream alone.
                    cursor.pushed = false;
                    // What the fan-out handed back (the rest of an event, or one
                    // its connection took none of) goes first, and is a send of
                    // its own: a keepalive in its place would lose its quotes or
                    // cut a frame in two.
                    if cursor.control.is_none()
                        && self.feed.keepalive_due(self.guard.hub.now_ms())
                    {
                        let keepalive = self.feed.control_chunk(event::KEEPALIVE);
                        self.feed.hold(&mut cursor, keepalive);
                    }
                }
            }
        }
    }

    /// Notes that `chunk` goes to the connection now.
    fn sent_now(&mut self, chunk: Bytes) -> Bytes {
        self.feed
            .progress
            .last_ms
            .store(self.guard.hub.now_ms(), Ordering::Relaxed);
        chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_slack_is_at_most_an_eighth_and_differs_between_streams() {
        let slacks: Vec<u64> = (0..1_000).map(|_| keepalive_slack_ms(15)).collect();
        assert!(slacks.iter().all(|&s| s <= 1_875), "{slacks:?}");
        let distinct: std::collections::HashSet<_> = slacks.iter().collect();
        assert!(
            distinct.len() > 100,
            "spread over many instants: {}",
            distinct.len()
        );
        assert_eq!(keepalive_slack_ms(0), 0);
    }
}
