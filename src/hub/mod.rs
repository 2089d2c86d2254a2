//! The quote hub behind `/stock/indicator/realtime/sse`: one upstream poll loop for
//! the union of every subscriber's codes, a board of the latest quote per code, and
//! per-subscriber SSE streams that send a snapshot, then only what changed, at most
//! `pz` quotes per event. Validation, auth and limits checks happen before a stream
//! starts; the HTTP plumbing is the edge's.
//!
//! Slow subscribers cost nothing: events are built one at a time from a shared board
//! (`tokio::sync::watch` keeps only the latest), only when the connection can take
//! them, so a subscriber that does not read collapses to the newest state per code
//! and holds no queue. One that stops reading while updates wait is disconnected
//! after `hub.stall_timeout_secs`.
//!
//! Two ways an event goes out. A stream on an [`Outlet`] (HTTP/1.1 on the bare
//! socket, nearly every subscriber) rests while it is caught up, and the poll loop's
//! fan-out writes each new board's events to its connection itself, split across
//! the runtime's workers: a tick costs one non-blocking write per subscriber and no
//! task wake. When the connection takes less than a whole event, the rest and
//! everything after it go back to the stream's task, which writes as the connection
//! drains and rests again once caught up. A stream without an outlet (HTTP/2, TLS)
//! is woken by each board and yields its events to hyper.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::sync::{Notify, watch};
use tokio::time::Sleep;

use crate::closing::Closer;
use crate::config::HubConfig;
use crate::error::Error;
use crate::state::AppState;
use crate::upstream::budget::Priority;
use crate::upstream::client::FetchError;

/// A subscribed code (canonical). One copy per code is shared by every subscriber
/// that wants it: a list of 200 codes costs 200 pointers, not 200 strings.
type Code = Arc<str>;

/// Seconds a client is told to wait after the per-token stream limit.
const STREAM_RETRY_AFTER_SECS: u64 = 5;

/// A connection the fan-out writes a stream's events to itself, without waking the
/// stream's task: an HTTP/1.1 answer written by hand. Every chunk of such a stream
/// (those written here and those its task yields) is a whole HTTP/1.1 chunk, framed
/// by the hub.
pub trait Outlet: Send + Sync + std::fmt::Debug {
    /// Writes what the connection takes of `bytes` now, without waiting: how many
    /// bytes that was (`WouldBlock` when none).
    ///
    /// # Errors
    /// The connection's write error.
    fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize>;
}

/// The fewest streams one fan-out task writes to (fewer cost more in tasks than
/// they gain in spread).
const MIN_SHARE: usize = 128;

/// The most bytes a chunk's size line takes: 16 hex digits and CRLF.
const CHUNK_HEAD: usize = 18;

/// The latest quote of every subscribed code.
#[derive(Debug, Default)]
pub struct Board {
    /// Increases with every poll.
    pub tick: u64,
    /// Keyed by the address of the registry's one copy of each code, which every
    /// subscriber of the code shares: each subscriber looks up each of its codes here
    /// on every tick, and hashing and comparing a pointer costs a fraction of a
    /// string's (the string sits elsewhere in memory, a cache miss per code). The
    /// entry holds that copy, so its address is not reused while the board lives.
    quotes: foldhash::HashMap<usize, Entry>,
    /// The hub stops: every stream ends when it sees this board. Streams learn of
    /// the stop here rather than each from the stop token, whose check takes a lock
    /// shared by every stream on each of their wakes.
    closing: bool,
}

#[derive(Debug)]
struct Entry {
    /// Keeps the key's address taken.
    _code: Code,
    quote: Arc<Quote>,
}

/// A code's key on the board: the address of its shared copy.
fn address(code: &Code) -> usize {
    Arc::as_ptr(code).cast::<u8>() as usize
}

#[derive(Debug)]
struct Quote {
    /// The tick at which this quote last changed.
    changed_at: u64,
    /// The upstream's item for this code, as one line of JSON.
    json: Bytes,
}

/// Liveness of one subscriber, written by its stream and read by the poll loop.
#[derive(Debug)]
struct Progress {
    /// Milliseconds since the hub started at which the stream last yielded.
    last_ms: AtomicU64,
    /// The board tick the stream last caught up with.
    delivered_tick: AtomicU64,
    /// Bytes of events built and not yet taken by the connection.
    pending_bytes: AtomicU64,
}

struct Subscriber {
    token: usize,
    feed: Arc<Feed>,
    /// Closes the subscriber's connection (set when it runs over HTTP).
    connection: Option<Closer>,
}

/// One subscriber's stream state, shared by its task and the fan-out.
#[derive(Debug)]
struct Feed {
    /// The subscriber's codes, in its order; the registry's shared copies.
    codes: Arc<[Code]>,
    pz: usize,
    progress: Progress,
    cursor: Mutex<Cursor>,
    /// Where the fan-out writes this subscriber's events itself; without one, its
    /// task takes every event from the board. With one, every chunk is framed as
    /// an HTTP/1.1 chunk.
    outlet: Option<Arc<dyn Outlet>>,
    /// Wakes a resting task: the fan-out handed the stream back (its connection
    /// took less than an event), or the hub stops.
    kick: Notify,
}

impl Feed {
    fn cursor(&self) -> std::sync::MutexGuard<'_, Cursor> {
        self.cursor
            .lock()
            .expect("stream cursor lock is never poisoned")
    }
}

/// Where a subscriber's stream stands.
#[derive(Debug)]
struct Cursor {
    /// `sent[i]`: the `changed_at` of the last quote of the feed's `codes[i]` sent.
    sent: Vec<u64>,
    /// A pass over a board under way: one event is built per call, only when the
    /// connection takes it, so nothing is built ahead.
    scan: Option<Scan>,
    /// A chunk that goes out before anything else: `retry:`, a keepalive, or the
    /// rest of an event the connection did not take whole.
    control: Option<Bytes>,
    /// The task rests and the fan-out writes the events (only on an outlet).
    pushed: bool,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    subscribers: HashMap<u64, Subscriber>,
    /// How many subscribers want each code: the poll loop's union. Its keys are
    /// the one copy of each code that every subscriber's list shares.
    refs: BTreeMap<Code, usize>,
    per_token: HashMap<usize, usize>,
    /// Whether a poll loop is running (changed only under this lock).
    polling: bool,
    /// The feeds on an outlet, for the fan-out; built again after a change.
    outlets: Option<Arc<[Arc<Feed>]>>,
}

struct Inner {
    registry: Mutex<Registry>,
    board: watch::Sender<Arc<Board>>,
    /// Wakes the poll loop early when the union gains codes.
    wake: Notify,
    started: Instant,
    /// Config, upstream, counters, tracker and the shutdown token.
    state: AppState,
}

/// The hub. Cheap to clone.
#[derive(Clone)]
pub struct QuoteHub {
    inner: Arc<Inner>,
}

impl QuoteHub {
    /// A hub polling through `state`'s upstream; its streams end when the state's
    /// stop token is cancelled.
    pub fn new(state: AppState) -> QuoteHub {
        let (board, _) = watch::channel(Arc::new(Board::default()));
        QuoteHub {
            inner: Arc::new(Inner {
                registry: Mutex::new(Registry::default()),
                board,
                wake: Notify::new(),
                started: Instant::now(),
                state,
            }),
        }
    }

    /// Upstream poll requests made so far.
    pub fn polls(&self) -> u64 {
        self.inner.state.stats().hub_polls.load(Ordering::Relaxed)
    }

    /// The newest board's tick (one per poll of the union).
    pub fn tick(&self) -> u64 {
        self.inner.board.borrow().tick
    }

    /// Open streams.
    pub fn subscribers(&self) -> usize {
        self.registry().subscribers.len()
    }

    /// Codes in the poll union.
    pub fn codes(&self) -> usize {
        self.registry().refs.len()
    }

    /// Subscribers disconnected for stalling.
    pub fn stalled(&self) -> u64 {
        self.inner.state.stats().hub_stalled.load(Ordering::Relaxed)
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

    /// Whether the poll loop runs.
    pub fn is_polling(&self) -> bool {
        self.registry().polling
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .expect("hub registry lock is never poisoned")
    }

    fn now_ms(&self) -> u64 {
        self.inner.started.elapsed().as_millis() as u64
    }

    /// Opens a stream of quotes for `codes` (canonical, client order) with `pz` per
    /// event, for client `token`. `connection` closes the client's connection if it
    /// stalls; on an `outlet`, the fan-out writes the events to it while the stream
    /// is caught up, and every chunk is an HTTP/1.1 chunk.
    ///
    /// # Errors
    /// 400 for too many codes, 429 past the token's stream limit, 503 past the total.
    pub fn subscribe(
        &self,
        token: usize,
        codes: &str,
        pz: usize,
        connection: Option<Closer>,
        outlet: Option<Arc<dyn Outlet>>,
    ) -> Result<BoxStream<'static, Bytes>, Error> {
        let snap = self.inner.state.snapshot();
        let config = snap.config.hub.clone();
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
        let progress = Progress {
            last_ms: AtomicU64::new(self.now_ms()),
            delivered_tick: AtomicU64::new(0),
            pending_bytes: AtomicU64::new(0),
        };
        let (id, start_loop, new_codes, feed) = {
            let mut reg = self.registry();
            if reg.subscribers.len() >= config.max_streams {
                return Err(Error::Overloaded {
                    reason: format!(
                        "the proxy serves its maximum of {} streams",
                        config.max_streams
                    ),
                });
            }
            let mine = reg.per_token.get(&token).copied().unwrap_or(0);
            if mine >= config.max_streams_per_token {
                return Err(Error::RateLimited {
                    retry_after_secs: STREAM_RETRY_AFTER_SECS,
                });
            }
            reg.next_id += 1;
            let id = reg.next_id;
            *reg.per_token.entry(token).or_default() += 1;
            let mut new_codes = false;
            let codes: Arc<[Code]> = unique
                .into_iter()
                .map(|code| {
                    let shared = match reg.refs.get_key_value(code.as_str()) {
                        Some((shared, _)) => Arc::clone(shared),
                        None => Code::from(code),
                    };
                    let n = reg.refs.entry(Arc::clone(&shared)).or_default();
                    new_codes |= *n == 0;
                    *n += 1;
                    shared
                })
                .collect();
            let feed = Arc::new(Feed {
                progress,
                cursor: Mutex::new(Cursor {
                    sent: vec![0; codes.len()],
                    scan: None,
                    control: None,
                    pushed: false,
                }),
                codes,
                pz: pz.max(1),
                outlet,
                kick: Notify::new(),
            });
            if feed.outlet.is_some() {
                reg.outlets = None;
            }
            reg.subscribers.insert(
                id,
                Subscriber {
                    token,
                    feed: Arc::clone(&feed),
                    connection,
                },
            );
            let start_loop = !reg.polling;
            reg.polling = true;
            (id, start_loop, new_codes, feed)
        };
        if start_loop {
            let hub = self.clone();
            self.inner
                .state
                .tracker()
                .spawn(async move { hub.poll_loop().await });
        } else if new_codes {
            self.inner.wake.notify_one();
        }
        tracing::debug!(
            subscriber = id,
            codes = feed.codes.len(),
            pz,
            "stream opened"
        );
        let keepalive_ms =
            config.keepalive_secs * 1_000 + keepalive_slack_ms(config.keepalive_secs);
        let stream = SubStream {
            guard: Guard {
                hub: self.clone(),
                id,
            },
            rx: self.inner.board.subscribe(),
            feed,
            started: false,
            retry_ms: config.retry_ms,
            keepalive_ms,
            next_keepalive: Box::pin(tokio::time::sleep(Duration::from_millis(keepalive_ms))),
            rearm: false,
        };
        Ok(futures_util::stream::unfold(stream, |mut s| async move {
            let next = s.next().await?;
            Some((next, s))
        })
        .boxed())
    }

    fn unsubscribe(&self, id: u64) {
        let mut reg = self.registry();
        let Some(sub) = reg.subscribers.remove(&id) else {
            return;
        };
        if sub.feed.outlet.is_some() {
            reg.outlets = None;
        }
        // Thousands of streams grew the table; give the room back once they have
        // gone (amortised: only when three quarters are free).
        if reg.subscribers.capacity() > 64 && reg.subscribers.len() * 4 < reg.subscribers.capacity()
        {
            let keep = reg.subscribers.len() * 2;
            reg.subscribers.shrink_to(keep);
        }
        if let Some(n) = reg.per_token.get_mut(&sub.token) {
            *n -= 1;
            if *n == 0 {
                reg.per_token.remove(&sub.token);
            }
        }
        for code in sub.feed.codes.iter() {
            if let Some(n) = reg.refs.get_mut(&**code) {
                *n -= 1;
                if *n == 0 {
                    reg.refs.remove(code);
                }
            }
        }
        tracing::debug!(subscriber = id, "stream closed");
    }

    /// Polls the upstream for the union of codes once per interval while anyone is
    /// subscribed; ends (and lets the next subscriber start a new loop) when the last
    /// one leaves. When the hub stops, it publishes the closing board, which ends
    /// every stream.
    async fn poll_loop(&self) {
        let state = &self.inner.state;
        loop {
            let codes: Option<Vec<Code>> = {
                let mut reg = self.registry();
                if reg.subscribers.is_empty() || state.stop().is_cancelled() {
                    reg.polling = false;
                    None
                } else {
                    Some(reg.refs.keys().cloned().collect())
                }
            };
            let Some(codes) = codes else {
                if state.stop().is_cancelled() {
                    // Every stream registered so far sees this board (a stream
                    // that registers later starts a loop of its own, which lands
                    // here too).
                    let tick = self.inner.board.borrow().tick;
                    let closing = Arc::new(Board {
                        tick,
                        quotes: Default::default(),
                        closing: true,
                    });
                    self.inner.board.send_replace(Arc::clone(&closing));
                    self.fan_out(closing).await;
                    tracing::debug!("quote poll stopped: the proxy stops");
                } else {
                    tracing::debug!("quote poll stopped: no subscribers");
                }
                return;
            };
            let snap = state.snapshot();
            let config = &snap.config.hub;
            let interval =
                Duration::from_millis(if snap.policy.calendar().is_open(state.clock().now()) {
                    config.session_interval_ms
                } else {
                    config.closed_interval_ms
                });
            let (fetched, following) = tokio::select! {
                polled = self.poll(config, &codes, interval) => polled,
                // Streams end at once, not after a slow poll.
                () = state.stop().cancelled() => continue,
            };
            // Before the new board: the check walks every subscriber, and after the
            // publish that walk would hold a worker at the start of the fan-out.
            self.drop_stalled(config);
            let board = self.publish(&codes, fetched);
            self.fan_out(board).await;
            let cluster = Some(state.fleet().leadership()).filter(|_| following);
            // An upstream that asked us to wait (Retry-After) is not polled before
            // its time: subscribers keep their last quotes and keepalives meanwhile.
            let wait = interval.max(state.upstream().paused_for().unwrap_or_default());
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.inner.wake.notified() => {}
                () = state.stop().cancelled() => {}
                // A follower publishes each board the leader sends, as it arrives.
                () = async { cluster.expect("checked").board_arrived().await }, if cluster.is_some() => {}
            }
        }
    }

    /// This node's quotes for `codes`, and whether it follows another node: alone
    /// (no cluster, or Redis away) it polls the upstream; in a cluster it registers
    /// its codes, and the leader polls the union of every node's codes and
    /// publishes the rows, which the others take from it.
    async fn poll(
        &self,
        config: &HubConfig,
        codes: &[Code],
        interval: Duration,
    ) -> (HashMap<String, Bytes>, bool) {
        let state = &self.inner.state;
        let Some(cluster) = Some(state.fleet().leadership()).filter(|c| c.is_up()) else {
            return (self.fetch(config, codes).await, false);
        };
        // Two intervals of silence hand the lead to another node; the lease also
        // covers one poll's longest wait (budget and upstream timeout), so a slow
        // poll does not lose it.
        let snap = state.snapshot();
        let longest_poll = Duration::from_millis(
            snap.config.upstream.timeout_ms + snap.config.limits.client_wait_ms,
        );
        let lease = interval * 2 + longest_poll + Duration::from_millis(500);
        let codes: Vec<String> = codes.iter().map(|c| c.to_string()).collect();
        cluster.register_codes(&codes, lease * 2).await;
        match cluster.lead_hub(lease).await {
            Ok(Some(term)) => {
                let union = cluster.all_codes().await.unwrap_or(codes);
                let fetched = self.fetch(config, &union).await;
                cluster.publish_board(term, &fetched).await;
                (fetched, false)
            }
            Ok(None) => {
                let board = cluster.latest_board();
                let mine = codes
                    .iter()
                    .filter_map(|c| Some((c.clone(), board.get(c)?.clone())))
                    .collect();
                (mine, true)
            }
            Err(_) => (self.fetch(config, &codes).await, false),
        }
    }

    /// One poll: every batch of the union, concurrently, through the upstream client
    /// and budget. Returns the items by canonical code.
    async fn fetch<S: std::borrow::Borrow<str>>(
        &self,
        config: &HubConfig,
        codes: &[S],
    ) -> HashMap<String, Bytes> {
        let state = &self.inner.state;
        let batches = codes.chunks(config.batch_size.max(1)).map(|batch| {
            let target = format!("{}?codes={}", config.source, batch.join(","));
            async move {
                match state.upstream().fetch(&target, Priority::Client).await {
                    Ok(fetched) => {
                        state.stats().hub_polls.fetch_add(1, Ordering::Relaxed);
                        parse_items(&fetched.body)
                    }
                    Err(
                        e @ (FetchError::Overloaded
                        | FetchError::Dropped
                        | FetchError::Paused { .. }
                        | FetchError::OverQuota { .. }),
                    ) => {
                        tracing::warn!(
                            error = e.as_str(),
                            "quote poll skipped: the upstream budget, pause or quota holds it back"
                        );
                        Vec::new()
                    }
                    Err(e) => {
                        state.stats().hub_polls.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            error = e.as_str(),
                            "quote poll failed; subscribers keep the last quotes"
                        );
                        Vec::new()
                    }
                }
            }
        });
        futures_util::future::join_all(batches)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Builds and publishes the next board: quotes of codes still subscribed,
    /// updated where the upstream sent something different.
    fn publish(&self, codes: &[Code], fetched: HashMap<String, Bytes>) -> Arc<Board> {
        let old = self.inner.board.borrow().clone();
        let tick = old.tick + 1;
        let mut quotes =
            foldhash::HashMap::with_capacity_and_hasher(codes.len(), Default::default());
        for code in codes {
            let prev = old.quotes.get(&address(code)).map(|e| &e.quote);
            let quote = match (fetched.get(&**code), prev) {
                (Some(json), Some(prev)) if *json == prev.json => Arc::clone(prev),
                (Some(json), _) => Arc::new(Quote {
                    changed_at: tick,
                    json: json.clone(),
                }),
                (None, Some(prev)) => Arc::clone(prev),
                (None, None) => continue,
            };
            let entry = Entry {
                _code: Arc::clone(code),
                quote,
            };
            quotes.insert(address(code), entry);
        }
        let board = Arc::new(Board {
            tick,
            quotes,
            closing: false,
        });
        self.inner.board.send_replace(Arc::clone(&board));
        board
    }

    /// Writes `board`'s events to every resting stream on an outlet, in shares that
    /// the runtime's workers take in parallel (a tick's fan-out is one write per
    /// subscriber, and one core alone would take twice as long to reach the last of
    /// them). Runs after `board` is published: a stream at work misses this pass,
    /// and looks at the newest board before it rests.
    async fn fan_out(&self, board: Arc<Board>) {
        let feeds = {
            let mut guard = self.registry();
            let reg = &mut *guard;
            let subscribers = &reg.subscribers;
            let outlets = reg.outlets.get_or_insert_with(|| {
                subscribers
                    .values()
                    .filter(|s| s.feed.outlet.is_some())
                    .map(|s| Arc::clone(&s.feed))
                    .collect()
            });
            Arc::clone(outlets)
        };
        if feeds.is_empty() {
            return;
        }
        let now_ms = self.now_ms();
        // Many small shares per worker, each a task: a worker that the machine
        // holds back leaves its remaining shares to the others, which steal them,
        // and what it holds back is one small share at most. (All of them are
        // tasks: the last one spawned waits in its worker's own slot, which no
        // other worker may steal from.)
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        let share = feeds.len().div_ceil(workers.max(1) * 16).max(MIN_SHARE);
        let shares: Vec<_> = (0..feeds.len())
            .step_by(share)
            .map(|start| {
                let (feeds, board) = (Arc::clone(&feeds), Arc::clone(&board));
                self.inner.state.tracker().spawn(async move {
                    let end = (start + share).min(feeds.len());
                    for feed in &feeds[start..end] {
                        feed.push(&board, now_ms);
                    }
                })
            })
            .collect();
        for share in shares {
            let _ = share.await;
        }
    }

    /// Closes the connections of every stream opened with one of `tokens` (a
    /// reload revoked them). Returns how many were closed.
    pub fn close_streams_of(&self, tokens: &[usize]) -> usize {
        let reg = self.registry();
        let mut closed = 0;
        for sub in reg.subscribers.values() {
            if tokens.contains(&sub.token)
                && let Some(connection) = &sub.connection
                && !connection.is_closed()
            {
                connection.close();
                closed += 1;
            }
        }
        closed
    }

    /// Disconnects subscribers that took nothing for the stall timeout while
    /// updates were waiting for them.
    fn drop_stalled(&self, config: &HubConfig) {
        let now = self.now_ms();
        let tick = self.inner.board.borrow().tick;
        let limit = config.stall_timeout_secs * 1_000;
        let reg = self.registry();
        for (id, sub) in &reg.subscribers {
            let progress = &sub.feed.progress;
            let idle = now.saturating_sub(progress.last_ms.load(Ordering::Relaxed));
            let behind = progress.delivered_tick.load(Ordering::Relaxed) < tick;
            if idle > limit
                && behind
                && let Some(connection) = &sub.connection
                && !connection.is_closed()
            {
                tracing::warn!(
                    subscriber = id,
                    idle_ms = idle,
                    "disconnecting a stalled subscriber"
                );
                self.inner
                    .state
                    .stats()
                    .hub_stalled
                    .fetch_add(1, Ordering::Relaxed);
                connection.close();
            }
        }
    }
}

/// Extracts the quote rows of a poll answer, keyed by canonical code: `data.diff[*]`
/// (the upstream's push2 lists), else `data.list[*]`, else a bare `data` array. Each
/// row is kept as the upstream sent it, re-serialised as one line of JSON.
fn parse_items(body: &[u8]) -> Vec<(String, Bytes)> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let data = &value["data"];
    let list = data["diff"]
        .as_array()
        .or_else(|| data["list"].as_array())
        .or_else(|| data.as_array());
    list.into_iter()
        .flatten()
        .filter_map(|item| {
            let code = crate::api::code::row_code(item)?;
            let json = serde_json::to_vec(item).ok()?;
            Some((code, Bytes::from(json)))
        })
        .collect()
}

/// Unregisters its subscriber when the stream is dropped (client gone, or shutdown).
struct Guard {
    hub: QuoteHub,
    id: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.hub.unsubscribe(self.id);
    }
}

/// A stream's keepalive period beyond `keepalive_secs`: a random share of an eighth
/// of it, fixed for the stream's life. The fan-out notes one write time for every
/// stream of a pass, so without it every busy stream's timer would come due at the
/// same instant (10,000 tasks woken at once every period to find nothing due), and
/// streams opened together would send their keepalives together for ever.
fn keepalive_slack_ms(keepalive_secs: u64) -> u64 {
    fastrand::u64(..=keepalive_secs * 1_000 / 8)
}

/// One subscriber's stream: its task's side of the [`Feed`].
struct SubStream {
    guard: Guard,
    rx: watch::Receiver<Arc<Board>>,
    feed: Arc<Feed>,
    started: bool,
    retry_ms: u64,
    /// `hub.keepalive_secs`, plus this stream's share of an eighth of it (see
    /// [`keepalive_slack_ms`]).
    keepalive_ms: u64,
    /// Wakes the stream to check whether a keepalive is due: one `keepalive` after
    /// the last thing sent, never pushed back by a board that had nothing for this
    /// subscriber (else busy boards would starve it of keepalives and the stall
    /// check would cut a healthy client). One timer for the stream's life, moved
    /// only when it fires: sending an event just notes the time, since resetting
    /// the timer on every event was a measurable part of a tick's fan-out.
    next_keepalive: Pin<Box<Sleep>>,
    /// The timer fired and a keepalive is going out: it is set one period on when
    /// that is sent (a flag, not a look at the timer: its entry is one more cache
    /// line per subscriber per event).
    rearm: bool,
}

/// A pass over one board: where it continues, and whether it sends every quote
/// (the snapshot) or only those that changed since this subscriber last got them.
/// It holds the board (shared, not copied) so the events of one pass carry one
/// tick; the next pass reads the newest board, so updates collapse between passes.
#[derive(Debug)]
struct Scan {
    board: Arc<Board>,
    next: usize,
    snapshot: bool,
}

impl SubStream {
    async fn next(&mut self) -> Option<Bytes> {
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
                    let retry = format!("retry: {}\n\n", self.retry_ms);
                    self.feed
                        .hold(&mut cursor, self.feed.control_chunk(retry.as_bytes()));
                    cursor.scan = Some(Scan {
                        board,
                        next: 0,
                        snapshot: true,
                    });
                    continue;
                }
                if on_outlet {
                    // Caught up with its last pass; a board published while this
                    // task was at work was passed by the fan-out, so it takes that
                    // one itself before it rests.
                    let board = Arc::clone(&self.rx.borrow_and_update());
                    if board.closing {
                        return None;
                    }
                    let delivered = self.feed.progress.delivered_tick.load(Ordering::Relaxed);
                    if board.tick > delivered {
                        cursor.scan = Some(Scan {
                            board,
                            next: 0,
                            snapshot: false,
                        });
                        continue;
                    }
                    cursor.pushed = true;
                }
            }
            tokio::select! {
                biased;
                changed = self.rx.changed(), if !on_outlet => {
                    if changed.is_err() {
                        return None;
                    }
                    let board = Arc::clone(&self.rx.borrow_and_update());
                    if board.closing {
                        return None;
                    }
                    self.feed.cursor().scan = Some(Scan { board, next: 0, snapshot: false });
                }
                () = self.feed.kick.notified(), if on_outlet => {}
                () = self.next_keepalive.as_mut() => {
                    let hub = &self.guard.hub;
                    let due = self.feed.progress.last_ms.load(Ordering::Relaxed) + self.keepalive_ms;
                    if hub.now_ms() >= due {
                        let mut cursor = self.feed.cursor();
                        // At work from here: the fan-out leaves the chunk alone.
                        cursor.pushed = false;
                        let keepalive = self.feed.control_chunk(b": keepalive\n\n");
                        self.feed.hold(&mut cursor, keepalive);
                        self.rearm = true;
                    } else {
                        let at = hub.inner.started + Duration::from_millis(due);
                        self.next_keepalive.as_mut().reset(at.into());
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
        if self.rearm {
            self.rearm = false;
            let at = tokio::time::Instant::now() + Duration::from_millis(self.keepalive_ms);
            self.next_keepalive.as_mut().reset(at);
        }
        chunk
    }
}

impl Feed {
    /// The fan-out's part: when the stream rests, writes `board`'s events for it to
    /// its outlet; what the connection does not take goes back to the stream's task
    /// (which the closing board ends as well).
    fn push(&self, board: &Arc<Board>, now_ms: u64) {
        let Some(outlet) = &self.outlet else {
            return;
        };
        let mut cursor = self.cursor();
        if !cursor.pushed {
            return;
        }
        if !board.closing {
            cursor.scan = Some(Scan {
                board: Arc::clone(board),
                next: 0,
                snapshot: false,
            });
            loop {
                let Some(event) = self.next_event(&mut cursor) else {
                    return;
                };
                // Would block, or failed: the task's own write finds out which.
                let written = outlet.try_write(&event).unwrap_or(0);
                if written > 0 {
                    self.progress.last_ms.store(now_ms, Ordering::Relaxed);
                }
                if written == event.len() {
                    continue;
                }
                self.hold(&mut cursor, event.slice(written..));
                break;
            }
        }
        cursor.pushed = false;
        drop(cursor);
        self.kick.notify_one();
    }

    /// Keeps `chunk` (as it goes on the wire) to go out next.
    fn hold(&self, cursor: &mut Cursor, chunk: Bytes) {
        self.progress
            .pending_bytes
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        cursor.control = Some(chunk);
    }

    /// A `retry:` or keepalive, framed as this stream's chunks are.
    fn control_chunk(&self, text: &[u8]) -> Bytes {
        if self.outlet.is_some() {
            chunk(text)
        } else {
            Bytes::copy_from_slice(text)
        }
    }

    /// The next event of the pass under way; `None` when the pass is over. Built
    /// straight into the event's buffer, which is allocated only when a quote is due
    /// (every pass ends with a call that finds none).
    fn next_event(&self, cursor: &mut Cursor) -> Option<Bytes> {
        let mut scan = cursor.scan.take()?;
        let chunked = self.outlet.is_some();
        let board = Arc::clone(&scan.board);
        let mut event: Option<Event> = None;
        let mut items = 0;
        while scan.next < self.codes.len() && items < self.pz {
            let i = scan.next;
            scan.next += 1;
            if let Some(Entry { quote: q, .. }) = board.quotes.get(&address(&self.codes[i]))
                && (scan.snapshot || q.changed_at > cursor.sent[i])
            {
                // Room for as many quotes of this size as the event may still take.
                let room = q.json.len() * (self.codes.len() - i).min(self.pz);
                event
                    .get_or_insert_with(|| Event::new(board.tick, room, chunked))
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
        Some(event.finish())
    }
}

/// One SSE event being built: `event: quote`, `id: <tick>`, `data: [<quote>,...]`
/// on one line; as an HTTP/1.1 chunk when `chunked` (its size line is written in
/// front of it once its size is known, into room kept for the longest).
struct Event {
    out: BytesMut,
    empty: bool,
    chunked: bool,
}

impl Event {
    /// An event of `tick` with room for `room` bytes of quotes.
    fn new(tick: u64, room: usize, chunked: bool) -> Event {
        let mut out = if chunked {
            let mut out = BytesMut::with_capacity(CHUNK_HEAD + room + 50);
            out.resize(CHUNK_HEAD, 0);
            out
        } else {
            BytesMut::with_capacity(room + 48)
        };
        out.extend_from_slice(b"event: quote\nid: ");
        out.extend_from_slice(itoa::Buffer::new().format(tick).as_bytes());
        out.extend_from_slice(b"\ndata: [");
        Event {
            out,
            empty: true,
            chunked,
        }
    }

    fn push(&mut self, quote: &[u8]) {
        if !self.empty {
            self.out.extend_from_slice(b",");
        }
        self.empty = false;
        self.out.extend_from_slice(quote);
    }

    fn finish(mut self) -> Bytes {
        self.out.extend_from_slice(b"]\n\n");
        if !self.chunked {
            return self.out.freeze();
        }
        self.out.extend_from_slice(b"\r\n");
        let mut line = [0u8; CHUNK_HEAD];
        let size = chunk_size_line(self.out.len() - CHUNK_HEAD - 2, &mut line);
        let start = CHUNK_HEAD - size.len();
        self.out[start..CHUNK_HEAD].copy_from_slice(size);
        let mut out = self.out.freeze();
        out.advance(start);
        out
    }
}

/// `data` as one HTTP/1.1 chunk: its size line, the data, CRLF.
pub fn chunk(data: &[u8]) -> Bytes {
    let mut line = [0u8; CHUNK_HEAD];
    let mut chunk = BytesMut::with_capacity(CHUNK_HEAD + data.len() + 2);
    chunk.extend_from_slice(chunk_size_line(data.len(), &mut line));
    chunk.extend_from_slice(data);
    chunk.extend_from_slice(b"\r\n");
    chunk.freeze()
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
    fn events_are_one_line_sse() {
        let a = Bytes::from_static(br#"{"code":"600519.SH","price":1}"#);
        let b = Bytes::from_static(br#"{"code":"000001.SZ","price":2}"#);
        let mut e = Event::new(7, 0, false);
        e.push(&a);
        e.push(&b);
        let e = e.finish();
        assert_eq!(
            &e[..],
            b"event: quote\nid: 7\ndata: [{\"code\":\"600519.SH\",\"price\":1},{\"code\":\"000001.SZ\",\"price\":2}]\n\n"
        );
    }

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

    #[test]
    fn chunk_sizes_are_hex() {
        let mut line = [0u8; CHUNK_HEAD];
        assert_eq!(chunk_size_line(0, &mut line), b"0\r\n");
        assert_eq!(chunk_size_line(255, &mut line), b"ff\r\n");
        assert_eq!(chunk_size_line(0x1a2b3, &mut line), b"1a2b3\r\n");
        assert_eq!(chunk_size_line(usize::MAX, &mut line).len(), CHUNK_HEAD);
    }

    /// On an outlet an event is one whole HTTP/1.1 chunk, its size line in front.
    #[test]
    fn chunked_events_are_whole_chunks() {
        let quote = Bytes::from(vec![b'q'; 300]);
        let mut e = Event::new(12, 0, true);
        e.push(&quote);
        let e = e.finish();
        let sse = format!("event: quote\nid: 12\ndata: [{}]\n\n", "q".repeat(300));
        assert_eq!(e, format!("{:x}\r\n{sse}\r\n", sse.len()).into_bytes());
    }

    #[test]
    fn items_are_keyed_by_canonical_code() {
        let body = br#"{"success":true,"data":{"list":[{"code":"600519","p":1},{"code":"000001.SZ","p":2},{"p":3}]}}"#;
        let items = parse_items(body);
        let codes: Vec<&str> = items.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(codes, ["600519", "000001"]);
        assert!(parse_items(b"not json").is_empty());
    }

    /// Push2 rows (`data.diff`) carry a bare code and `marketId`; the row goes out
    /// unchanged.
    #[test]
    fn diff_rows_are_keyed_by_code_and_market_id() {
        let body = br#"{"success":true,"data":{"total":5,"diff":[
            {"code":"600519","marketId":1,"newPrice":150000},
            {"code":"000001","marketId":0},
            {"code":"920001","marketId":0},
            {"code":"000001","marketId":1},
            {"code":"300750.sz","marketId":0},
            "..."]}}"#;
        let items = parse_items(body);
        let codes: Vec<&str> = items.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            codes,
            // The Shanghai index keeps its suffix: its digits imply Shenzhen.
            ["600519", "000001", "920001", "000001.SH", "300750"]
        );
        assert_eq!(
            &items[0].1[..],
            br#"{"code":"600519","marketId":1,"newPrice":150000}"#
        );
        // A bare data array with neither diff nor list.
        let bare = parse_items(br#"{"success":true,"data":[{"code":"430047"}]}"#);
        assert_eq!(bare[0].0, "430047");
    }
}
