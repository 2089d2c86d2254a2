//! The quote hub behind `/stock/indicator/realtime/sse`: one poll loop for the union
//! of every subscriber's codes, a board of the latest quote per code, and
//! per-subscriber streams that send a snapshot, then only what changed, at most `pz`
//! quotes per event. Validation, auth and limits happen before a stream starts; the
//! HTTP plumbing (and how a chunk is framed on the wire) is the edge's.
//!
//! Slow subscribers cost nothing: events are built one at a time from a shared board
//! (`tokio::sync::watch` keeps only the latest), only when the connection can take
//! them, so a subscriber that does not read collapses to the newest state per code
//! and holds no queue. One that stops reading while updates wait is disconnected
//! after `hub.stall_timeout_secs`.
//!
//! Two ways an event goes out. A stream on an [`Outlet`] (HTTP/1.1 on the bare
//! socket, nearly every subscriber) rests while it is caught up, and the poll loop's
//! fan-out writes each new board's events to its connection itself. A stream without
//! an outlet (HTTP/2, TLS) is woken by the fan-out after each board, the streams of
//! one connection one after another, and yields its events to hyper.
//!
//! The parts: `registry` (who is subscribed, the union, the limits), `poll` (the
//! loop, its interval, the stall check), `keepalive` (the sweep that kicks streams
//! due a keepalive), `leader` (the cluster's share), `source`
//! (the [`QuoteSource`]: the upstream, or a test's script), `board`, `fanout`,
//! `stream` (one subscriber's state machine) and `event` (the SSE text).

mod board;
mod event;
mod fanout;
mod keepalive;
mod leader;
pub mod metrics;
mod poll;
mod port;
mod registry;
pub mod source;
mod stream;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::state::AppState;
use board::Board;
use mdproxy_api::error::Error;
use port::Membership;
pub use port::{Hangup, Outlet, Pacing, Room, Subscription};
use registry::Registry;
pub use source::{Allowance, Polled, QuoteSource, UpstreamSource};
use stream::{Feed, Guard, SubStream};

struct Inner {
    registry: Mutex<Registry>,
    board: watch::Sender<Arc<Board>>,
    /// Wakes the poll loop early when the union gains codes.
    wake: Notify,
    started: Instant,
    /// Config, upstream, counters, tracker and the shutdown token.
    state: AppState,
    source: Arc<dyn QuoteSource>,
    /// The spacing the poll loop chose last.
    pacing: Mutex<Pacing>,
    /// Events the fan-out wrote in part, their rest handed to the stream's task.
    partial_writes: AtomicU64,
    /// Upstream quote poll requests made (those the upstream was asked).
    polls: AtomicU64,
    /// Subscribers disconnected for stalling.
    stalled: AtomicU64,
}

/// The largest `Last-Event-ID` a stream continues from: 2^53, the largest integer
/// a JavaScript client holds exactly.
pub const MAX_EVENT_ID: u64 = 1 << 53;

/// The hub. Cheap to clone.
#[derive(Clone)]
pub struct QuoteHub {
    inner: Arc<Inner>,
}

impl QuoteHub {
    /// A hub polling `state`'s upstream; its streams end when the state's stop
    /// token is cancelled.
    pub fn new(state: AppState) -> QuoteHub {
        let source = Arc::new(UpstreamSource::new(state.clone()));
        QuoteHub::with_source(state, source)
    }

    /// A hub polling `source` (a test drives the hub through one), with `state`'s
    /// configuration, counters, tasks and stop token.
    pub fn with_source(state: AppState, source: Arc<dyn QuoteSource>) -> QuoteHub {
        let (board, _) = watch::channel(Arc::new(Board::default()));
        QuoteHub {
            inner: Arc::new(Inner {
                registry: Mutex::new(Registry::default()),
                board,
                wake: Notify::new(),
                started: Instant::now(),
                state,
                source,
                pacing: Mutex::default(),
                partial_writes: AtomicU64::new(0),
                polls: AtomicU64::new(0),
                stalled: AtomicU64::new(0),
            }),
        }
    }

    /// Upstream poll requests made so far.
    pub fn polls(&self) -> u64 {
        self.inner.polls.load(Ordering::Relaxed)
    }

    /// The newest board's tick (one per poll of the union).
    pub fn tick(&self) -> u64 {
        self.inner.board.borrow().tick
    }

    /// Open streams.
    pub fn subscribers(&self) -> usize {
        self.registry().subscribers.len()
    }

    /// Open streams on an outlet: those the fan-out writes to itself (HTTP/1.1 on
    /// the bare socket).
    pub fn outlet_subscribers(&self) -> usize {
        self.registry()
            .subscribers
            .values()
            .filter(|s| s.feed.outlet.is_some())
            .count()
    }

    /// Codes in the poll union.
    pub fn codes(&self) -> usize {
        self.registry().codes()
    }

    /// Subscribers disconnected for stalling.
    pub fn stalled(&self) -> u64 {
        self.inner.stalled.load(Ordering::Relaxed)
    }

    /// Events the fan-out wrote in part (the connection took less than the whole
    /// event), whose rest the stream's task wrote as the connection drained.
    pub fn partial_writes(&self) -> u64 {
        self.inner.partial_writes.load(Ordering::Relaxed)
    }

    /// The most bytes any subscriber has built but not handed to its connection:
    /// at most one `retry:` or keepalive, since quote events are built one at a time
    /// when the connection takes them, however slow it is.
    pub fn max_pending_bytes(&self) -> u64 {
        self.registry()
            .subscribers
            .values()
            .map(|s| s.feed.progress.pending_bytes.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// The latest quote of `code` (canonical) while the hub polls it: the
    /// upstream's row as the stream sends it, and when that poll was answered.
    pub fn latest(&self, code: &str) -> Option<(Bytes, chrono::DateTime<chrono::Utc>)> {
        let shared = self.registry().shared(code)?;
        let board = self.inner.board.borrow();
        let quote = board.quote(&shared)?;
        Some((quote.json.clone(), board.polled_at?))
    }

    /// Whether the poll loop runs.
    pub fn is_polling(&self) -> bool {
        self.registry().polling
    }

    /// How far apart the polls are now, and what stretched them, if anything.
    pub fn pacing(&self) -> Pacing {
        *self.pacing_mut()
    }

    fn pacing_mut(&self) -> std::sync::MutexGuard<'_, Pacing> {
        self.inner
            .pacing
            .lock()
            .expect("hub pacing lock is never poisoned")
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .expect("hub registry lock is never poisoned")
    }

    /// Milliseconds since the hub started.
    fn now_ms(&self) -> u64 {
        self.inner.started.elapsed().as_millis() as u64
    }

    /// Opens a stream of quotes as `subscription` asks: the chunks to send, in
    /// order (each a whole HTTP/1.1 chunk on an outlet). The stream ends when the
    /// hub stops; dropping it unsubscribes.
    ///
    /// # Errors
    /// 400 for too many codes, 429 past the token's stream limit, 503 past the total.
    pub fn subscribe(
        &self,
        subscription: Subscription<'_>,
    ) -> Result<BoxStream<'static, Bytes>, Error> {
        let Subscription {
            token,
            codes,
            pz,
            last_event_id,
            connection,
            outlet,
        } = subscription;
        let snap = self.inner.state.snapshot();
        let config = &snap.config.hub;
        let mut unique: Vec<String> = Vec::new();
        for code in codes.split(',') {
            if !unique.iter().any(|c| c == code) {
                unique.push(code.to_owned());
            }
        }
        if unique.len() > config.max_codes_per_stream {
            return Err(Error::invalid(
                "codes",
                format!(
                    "codes holds more than {} codes",
                    config.max_codes_per_stream
                ),
            ));
        }
        // Ids are board ticks, unless the client's last id is at or past the tick
        // now: then they continue past it (its first event is past the tick now).
        // One past [`MAX_EVENT_ID`] was not this hub's (a tick a second takes
        // 285 million years to get there) and is ignored: ids built on it would
        // overflow.
        let id_offset = last_event_id
            .filter(|last| *last <= MAX_EVENT_ID)
            .map_or(0, |last| last.saturating_add(1).saturating_sub(self.tick()));
        let now_ms = self.now_ms();
        let keepalive_ms =
            config.keepalive_secs * 1_000 + stream::keepalive_slack_ms(config.keepalive_secs);
        let added = {
            let mut reg = self.registry();
            reg.admit(token, config)?;
            reg.add(token, unique, connection, |codes| {
                Feed::new(codes, pz, id_offset, outlet, now_ms, keepalive_ms)
            })
        };
        if added.start_loop {
            let hub = self.clone();
            // On the shared runtime: its fan-out spreads over that runtime's
            // workers, where the serving thread of the first subscriber is one.
            self.inner
                .state
                .spawn_shared(async move { hub.run().await });
        } else if added.new_codes {
            self.inner.wake.notify_one();
        }
        tracing::debug!(
            subscriber = added.id,
            codes = added.feed.codes.len(),
            pz,
            "stream opened"
        );
        let stream = SubStream::new(
            Guard {
                hub: Arc::new(self.clone()),
                id: added.id,
            },
            self.inner.board.subscribe(),
            added.feed,
            config.retry_ms,
        );
        Ok(futures_util::stream::unfold(stream, |mut s| async move {
            let next = s.next().await?;
            Some((next, s))
        })
        .boxed())
    }

    fn unsubscribe(&self, id: u64) {
        let (removed, nobody_left) = {
            let mut reg = self.registry();
            (reg.remove(id), reg.subscribers.is_empty())
        };
        if removed {
            tracing::debug!(subscriber = id, "stream closed");
        }
        // The last one gone: the poll loop ends now, not at its next wake (a minute
        // away when the market is closed).
        if removed && nobody_left {
            self.inner.wake.notify_one();
        }
    }

    /// Closes the connections of every stream opened with one of `tokens` (a
    /// reload revoked them). Returns how many were closed.
    pub fn close_streams_of(&self, tokens: &[usize]) -> usize {
        let reg = self.registry();
        let mut closed = 0;
        for connection in reg.connections_of(tokens) {
            if !connection.is_closed() {
                connection.close();
                closed += 1;
            }
        }
        closed
    }
}

impl Membership for QuoteHub {
    fn now_ms(&self) -> u64 {
        QuoteHub::now_ms(self)
    }

    fn leave(&self, id: u64) {
        self.unsubscribe(id);
    }
}
