//! The quote hub on tokio's paused clock, fed by a scripted [`QuoteSource`] instead
//! of the upstream, with no socket: keepalives, the stall check, chunks an outlet
//! takes in part, the poll loop's spacing under the upstream's throttling, ids after
//! a reconnect, and the log of a failing poll. Time moves only when every task
//! waits (the runtime then jumps to the next timer), so each timing is exact.

use crate::support;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use mdproxy_config::Config;
use mdproxy_core::hub::{
    Allowance, Hangup, Outlet, Polled, QuoteHub, QuoteSource, Room, Subscription,
};
use mdproxy_core::state::AppState;
use mdproxy_core::upstream::budget::RateClock;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A connection that only notes that the hub closed it.
#[derive(Debug, Default)]
struct Closer(AtomicBool);

impl Hangup for Closer {
    fn close(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_closed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
use tokio_util::task::TaskTracker;

/// Monday 2 March 2026, 10:00 China time: in session.
const MONDAY_10_00: &str = "2026-03-02T02:00:00Z";
const INTERVAL: Duration = Duration::from_millis(50);
const SECOND: Duration = Duration::from_secs(1);

/// A source that answers every code as the test says: the codes in `busy` change
/// on every poll, the others never do, and those in `missing` have no row. It
/// notes when it was polled, and reports the allowance and failures it is told.
#[derive(Default)]
struct Script {
    busy: Mutex<HashSet<String>>,
    missing: Mutex<HashSet<String>>,
    polls: Mutex<Vec<Instant>>,
    allowance: Mutex<Allowance>,
    /// Every request of a poll fails (three of them), holding the upstream back
    /// for `hold`.
    fail: AtomicBool,
    hold: Mutex<Option<Duration>>,
}

impl Script {
    fn busy(codes: &[&str]) -> Arc<Script> {
        let script = Script::default();
        script
            .busy
            .lock()
            .unwrap()
            .extend(codes.iter().map(|c| (*c).to_owned()));
        Arc::new(script)
    }

    fn polls(&self) -> Vec<Instant> {
        self.polls.lock().unwrap().clone()
    }
}

impl QuoteSource for Script {
    fn poll<'a>(&'a self, codes: &'a [&'a str]) -> BoxFuture<'a, Polled> {
        Box::pin(async move {
            let n = {
                let mut polls = self.polls.lock().unwrap();
                polls.push(Instant::now());
                polls.len()
            };
            if self.fail.load(Ordering::SeqCst) {
                return Polled {
                    requests: 3,
                    failed: 3,
                    error: Some("failed"),
                    hold: *self.hold.lock().unwrap(),
                    ..Polled::default()
                };
            }
            let (busy, missing) = (self.busy.lock().unwrap(), self.missing.lock().unwrap());
            let rows = codes
                .iter()
                .filter(|c| !missing.contains(**c))
                .map(|c| {
                    let version = if busy.contains(*c) { n } else { 0 };
                    let row = format!(r#"{{"code":"{c}","version":{version}}}"#);
                    ((*c).to_owned(), Bytes::from(row))
                })
                .collect();
            Polled {
                rows,
                requests: 1,
                ..Polled::default()
            }
        })
    }

    fn allowance(&self, _codes: usize, _interval: Duration) -> Allowance {
        *self.allowance.lock().unwrap()
    }
}

/// A hub on `script` with a 50 ms interval, 1 s keepalives (plus up to an eighth)
/// and a 3 s stall timeout, as `config` adjusts; its clock stands in session.
fn hub(script: &Arc<Script>, config: impl FnOnce(&mut Config)) -> (QuoteHub, AppState) {
    hub_at(script, MONDAY_10_00, |c| {
        c.hub.session_interval_ms = INTERVAL.as_millis() as u64;
        c.hub.closed_interval_ms = INTERVAL.as_millis() as u64;
        config(c);
    })
}

/// A hub on `script` whose clock stands at `at`, with its default intervals, 1 s
/// keepalives and a 3 s stall timeout, as `config` adjusts.
fn hub_at(
    script: &Arc<Script>,
    at: &str,
    config: impl FnOnce(&mut Config),
) -> (QuoteHub, AppState) {
    let mut c = Config::default();
    c.hub.keepalive_secs = 1;
    c.hub.stall_timeout_secs = 3;
    config(&mut c);
    let state = AppState::new(
        c,
        support::clock_at(at),
        RateClock::tokio(),
        TaskTracker::new(),
        CancellationToken::new(),
        None,
    )
    .unwrap();
    let source: Arc<dyn QuoteSource> = script.clone();
    (QuoteHub::with_source(state.clone(), source), state)
}

fn subscribe(
    hub: &QuoteHub,
    codes: &str,
    connection: Option<Arc<Closer>>,
    outlet: Option<Arc<dyn Outlet>>,
) -> BoxStream<'static, Bytes> {
    hub.subscribe(Subscription {
        token: 0,
        codes,
        pz: 20,
        last_event_id: None,
        connection: connection.map(|c| c as Arc<dyn Hangup>),
        outlet,
    })
    .unwrap()
}

/// One chunk of a stream without an outlet, read as an EventSource reads it (the
/// eventsource-stream crate; comments, which it drops, by their leading colon).
#[derive(Debug, PartialEq)]
enum Chunk {
    Retry(u64),
    Keepalive,
    Quote {
        id: u64,
        rows: Vec<serde_json::Value>,
    },
}

fn read(chunk: &[u8]) -> Chunk {
    use eventsource_stream::Eventsource;
    use futures_util::FutureExt;
    if chunk.starts_with(b":") {
        assert_eq!(chunk, b": keepalive\n\n");
        return Chunk::Keepalive;
    }
    // A `retry:` alone is not dispatched: an empty data line makes it an event.
    let mut bytes = chunk.to_vec();
    if chunk.starts_with(b"retry:") {
        bytes.truncate(bytes.len() - 1);
        bytes.extend_from_slice(b"data:\n\n");
    }
    let events: Vec<_> = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(bytes)])
        .eventsource()
        .collect::<Vec<_>>()
        .now_or_never()
        .unwrap();
    assert_eq!(events.len(), 1, "one chunk, one event: {chunk:?}");
    let e = events.into_iter().next().unwrap().unwrap();
    if let Some(retry) = e.retry {
        return Chunk::Retry(retry.as_millis() as u64);
    }
    assert_eq!(e.event, "quote");
    Chunk::Quote {
        id: e.id.parse().unwrap(),
        rows: serde_json::from_str(&e.data).unwrap(),
    }
}

/// The next chunk, within `wait` of paused time.
async fn next(stream: &mut BoxStream<'static, Bytes>, wait: Duration) -> Chunk {
    let chunk = tokio::time::timeout(wait, stream.next())
        .await
        .expect("a chunk in time")
        .expect("the stream goes on");
    read(&chunk)
}

fn codes(rows: &[serde_json::Value]) -> Vec<&str> {
    rows.iter().map(|r| r["code"].as_str().unwrap()).collect()
}

/// A stream whose codes never change gets a keepalive one period after the last
/// thing it was sent (1 s plus its own slack, at most an eighth), while another
/// code keeps the board changing every 50 ms, and is never taken for a stalled one
/// (the stall timeout is 3 s; it lives 6).
#[tokio::test(start_paused = true)]
async fn a_quiet_stream_gets_keepalives_one_period_apart() {
    let script = Script::busy(&["600519"]);
    script.missing.lock().unwrap().insert("605999".into());
    let (hub, _state) = hub(&script, |_| {});
    let _busy = subscribe(&hub, "600519", None, None);
    let closer = Arc::new(Closer::default());
    let mut quiet = subscribe(&hub, "605999", Some(closer.clone()), None);
    assert_eq!(next(&mut quiet, SECOND).await, Chunk::Retry(3000));
    let mut last = Instant::now();
    let mut gaps = Vec::new();
    for _ in 0..6 {
        assert_eq!(next(&mut quiet, 2 * SECOND).await, Chunk::Keepalive);
        gaps.push(last.elapsed());
        last = Instant::now();
    }
    assert!(
        gaps.iter().all(|g| *g == gaps[0]),
        "one period, fixed per stream: {gaps:?}"
    );
    assert!(
        gaps[0] >= SECOND && gaps[0] <= SECOND + SECOND / 8,
        "{gaps:?}"
    );
    assert!(script.polls().len() > 100, "the board kept changing");
    assert!(!closer.is_closed());
    assert_eq!((hub.stalled(), hub.subscribers()), (0, 2));
}

/// A keepalive is due one period after the last thing sent: a stream whose quote
/// moves on every poll gets a quote every 50 ms for ten seconds, and not one
/// keepalive (a timer on its own schedule would have sent ten).
#[tokio::test(start_paused = true)]
async fn a_busy_stream_gets_no_keepalives() {
    let script = Script::busy(&["600519"]);
    let (hub, _state) = hub(&script, |_| {});
    let mut busy = subscribe(&hub, "600519", None, None);
    assert_eq!(next(&mut busy, SECOND).await, Chunk::Retry(3000));
    let started = Instant::now();
    let mut ids = Vec::new();
    while started.elapsed() < 10 * SECOND {
        match next(&mut busy, SECOND).await {
            Chunk::Quote { id, rows } => {
                assert_eq!(codes(&rows), ["600519"]);
                ids.push(id);
            }
            other => panic!("only quotes: {other:?} after {:?}", started.elapsed()),
        }
    }
    assert!(ids.len() >= 190, "a quote per poll: {}", ids.len());
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "every tick: {ids:?}"
    );
}

/// A stream that stops reading while its quotes change is cut once it has taken
/// nothing for the stall timeout (3 s, checked at each 50 ms poll), not before;
/// meanwhile another subscriber of the same codes gets every tick, and afterwards
/// too.
#[tokio::test(start_paused = true)]
async fn a_stream_that_stops_reading_is_cut_after_the_stall_timeout_and_holds_no_one() {
    let script = Script::busy(&["600519"]);
    let (hub, _state) = hub(&script, |_| {});
    let (sleeper_closer, reader_closer) =
        (Arc::new(Closer::default()), Arc::new(Closer::default()));
    let mut sleeper = subscribe(&hub, "600519", Some(sleeper_closer.clone()), None);
    let mut reader = subscribe(&hub, "600519,000001", Some(reader_closer.clone()), None);
    assert_eq!(next(&mut sleeper, SECOND).await, Chunk::Retry(3000));
    assert!(matches!(
        next(&mut sleeper, SECOND).await,
        Chunk::Quote { .. }
    ));
    // From here the sleeper reads nothing.
    let stopped = Instant::now();
    assert_eq!(next(&mut reader, SECOND).await, Chunk::Retry(3000));
    let mut last_id = None;
    let mut cut_at = None;
    for _ in 0..200 {
        let Chunk::Quote { id, .. } = next(&mut reader, SECOND).await else {
            panic!("the reader gets quotes");
        };
        if let Some(last) = last_id {
            assert_eq!(id, last + 1, "every tick reaches the reader");
        }
        last_id = Some(id);
        if cut_at.is_none() && sleeper_closer.is_closed() {
            cut_at = Some(stopped.elapsed());
        }
    }
    let cut_at = cut_at.expect("the sleeper was cut");
    assert!(
        cut_at > 3 * SECOND && cut_at <= 3 * SECOND + 3 * INTERVAL,
        "cut {cut_at:?} after it stopped reading"
    );
    assert_eq!(hub.stalled(), 1);
    assert!(!reader_closer.is_closed());
    drop(sleeper);
    assert_eq!(hub.subscribers(), 1);
}

/// An outlet that takes at most `per_write` bytes per write, appending them to
/// `wire` as a socket would carry them, and none while `blocked` (a full socket).
#[derive(Debug)]
struct Narrow {
    per_write: usize,
    wire: Arc<Mutex<Vec<u8>>>,
    blocked: AtomicBool,
}

impl Outlet for Narrow {
    fn room(&self) -> Room {
        Room { head: 4, tail: 1 }
    }

    /// A framing of its own (`<len>|` in front, `;` behind), to show that the hub
    /// frames nothing itself.
    fn frame(&self, mut text: BytesMut) -> Bytes {
        let len = format!("{:03}|", text.len() - 4);
        text[..4].copy_from_slice(len.as_bytes());
        text.extend_from_slice(b";");
        text.freeze()
    }

    fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.blocked.load(Ordering::SeqCst) {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let n = bytes.len().min(self.per_write);
        self.wire.lock().unwrap().extend_from_slice(&bytes[..n]);
        Ok(n)
    }
}

/// On an outlet that takes part of each event, the fan-out writes what it takes
/// and the stream's task writes the rest, so that what reaches the wire is every
/// frame whole and in order (framed by the outlet, not the hub), every tick once.
#[tokio::test(start_paused = true)]
async fn an_outlet_that_takes_part_of_an_event_gets_the_rest_from_the_task() {
    let script = Script::busy(&["600519"]);
    let (hub, _state) = hub(&script, |_| {});
    let wire = Arc::new(Mutex::new(Vec::new()));
    let outlet: Arc<dyn Outlet> = Arc::new(Narrow {
        per_write: 40,
        wire: Arc::clone(&wire),
        blocked: AtomicBool::new(false),
    });
    let mut stream = subscribe(&hub, "600519", None, Some(outlet));
    // The task's chunks go on the same wire, in turn with the fan-out's writes.
    for _ in 0..60 {
        let chunk = tokio::time::timeout(SECOND, stream.next())
            .await
            .expect("the task has the rest in time")
            .unwrap();
        wire.lock().unwrap().extend_from_slice(&chunk);
    }
    assert!(hub.partial_writes() >= 20, "{}", hub.partial_writes());
    let wire = wire.lock().unwrap().clone();
    let mut rest = &wire[..];
    let mut ids = Vec::new();
    while !rest.is_empty() {
        let len: usize = std::str::from_utf8(&rest[..3]).unwrap().parse().unwrap();
        assert_eq!(
            rest[3],
            b'|',
            "a frame starts here: {:?}",
            String::from_utf8_lossy(rest)
        );
        let Some(end) = rest.get(4 + len) else {
            break; // the last frame, still being written
        };
        assert_eq!(*end, b';', "the frame ends where its length says");
        match read(&rest[4..4 + len]) {
            Chunk::Quote { id, .. } => ids.push(id),
            Chunk::Retry(_) | Chunk::Keepalive => {}
        }
        rest = &rest[4 + len + 1..];
    }
    assert!(ids.len() >= 20, "{ids:?}");
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "in order, none lost: {ids:?}"
    );
}

/// The next chunk of a stream on a [`Narrow`] outlet, within `wait` of paused time,
/// without the outlet's framing.
async fn next_framed(stream: &mut BoxStream<'static, Bytes>, wait: Duration) -> Chunk {
    let chunk = tokio::time::timeout(wait, stream.next())
        .await
        .expect("a chunk in time")
        .expect("the stream goes on");
    read(&chunk[4..chunk.len() - 1])
}

/// What the fan-out hands back goes out before any keepalive, never in its place: a
/// stream whose only code gets its first quote while its connection is full (the
/// outlet takes none of the event), long after its last send (a keepalive due, the
/// sweep's kick waiting), gets that quote from its task. A keepalive in its place
/// lost the quote for as long as the code did not change again (and cut a frame in
/// two after a part-written event).
#[tokio::test(start_paused = true)]
async fn a_due_keepalive_never_takes_the_place_of_an_event_handed_back() {
    let script = Script::busy(&[]);
    script.missing.lock().unwrap().insert("600000".into());
    let (hub, _state) = hub(&script, |_| {});
    let wire = Arc::new(Mutex::new(Vec::new()));
    let narrow = Arc::new(Narrow {
        per_write: usize::MAX,
        wire: Arc::clone(&wire),
        blocked: AtomicBool::new(false),
    });
    let outlet: Arc<dyn Outlet> = narrow.clone();
    let mut stream = subscribe(&hub, "600000", None, Some(outlet));
    assert_eq!(next_framed(&mut stream, SECOND).await, Chunk::Retry(3000));
    // No quote yet: the task rests, and the fan-out would write what comes.
    assert!(
        tokio::time::timeout(2 * INTERVAL, stream.next())
            .await
            .is_err()
    );
    // The connection is full, and stays unread past the keepalive period.
    narrow.blocked.store(true, Ordering::SeqCst);
    tokio::time::sleep(2 * SECOND).await;
    // The code's first quote: one change, then none.
    script.missing.lock().unwrap().clear();
    tokio::time::sleep(2 * INTERVAL).await;
    assert!(wire.lock().unwrap().is_empty(), "the outlet took nothing");
    narrow.blocked.store(false, Ordering::SeqCst);
    match next_framed(&mut stream, SECOND).await {
        Chunk::Quote { rows, .. } => assert_eq!(codes(&rows), ["600000"]),
        other => panic!("the quote handed back first: {other:?}"),
    }
    assert_eq!(next_framed(&mut stream, 2 * SECOND).await, Chunk::Keepalive);
}

/// A reload that lengthens `hub.keepalive_secs` leaves the streams opened before it
/// their own period: a quiet stream opened at 1 s still gets a keepalive about
/// every second after the keepalive is raised to 40 s (the sweep keeps pace with
/// the shortest period in use, not with the configured one alone).
#[tokio::test(start_paused = true)]
async fn a_reload_that_lengthens_the_keepalive_leaves_open_streams_theirs() {
    let script = Script::busy(&[]);
    script.missing.lock().unwrap().insert("605999".into());
    let (hub, state) = hub(&script, |_| {});
    let mut quiet = subscribe(&hub, "605999", None, None);
    assert_eq!(next(&mut quiet, SECOND).await, Chunk::Retry(3000));
    assert_eq!(next(&mut quiet, 2 * SECOND).await, Chunk::Keepalive);
    let mut config = Config::clone(&state.snapshot().config);
    config.hub.keepalive_secs = 40;
    config.hub.stall_timeout_secs = 120;
    state.reload(config).expect("the hub's timings reload");
    let mut last = Instant::now();
    for _ in 0..4 {
        assert_eq!(next(&mut quiet, 2 * SECOND).await, Chunk::Keepalive);
        assert!(
            last.elapsed() >= SECOND && last.elapsed() <= SECOND + SECOND / 3,
            "{:?}",
            last.elapsed()
        );
        last = Instant::now();
    }
    // A stream opened after the reload has the new period.
    let mut later = subscribe(&hub, "605999", None, None);
    assert_eq!(next(&mut later, SECOND).await, Chunk::Retry(3000));
    assert!(
        tokio::time::timeout(30 * SECOND, later.next())
            .await
            .is_err()
    );
}

/// Under the upstream's throttling the poll slows to what it allows, rather than
/// stopping or hammering: every 10 s while the allowance says so (a new code does
/// not bring a poll forward past it), for 30 s after a poll the upstream asked to
/// wait, and every 50 ms again once it is free. Subscribers keep their quotes and
/// get keepalives meanwhile.
#[tokio::test(start_paused = true)]
async fn the_poll_slows_to_what_the_upstream_allows_and_streams_go_on() {
    let script = Script::busy(&["600519"]);
    *script.allowance.lock().unwrap() = Allowance {
        spacing: 10 * SECOND,
        reason: Some("pace"),
    };
    let (hub, _state) = hub(&script, |_| {});
    let started = Instant::now();
    let mut a = subscribe(&hub, "600519", None, None);
    let (mut quotes, mut keepalives) = (0, 0);
    let mut b = None;
    while started.elapsed() < 35 * SECOND {
        match next(&mut a, 2 * SECOND).await {
            Chunk::Quote { .. } => quotes += 1,
            Chunk::Keepalive => keepalives += 1,
            Chunk::Retry(_) => {}
        }
        if b.is_none() && started.elapsed() >= 12 * SECOND {
            // New codes wake the loop, which still waits for the allowance.
            b = Some(subscribe(&hub, "000001", None, None));
        }
    }
    let at: Vec<Duration> = script.polls().iter().map(|t| *t - started).collect();
    assert_eq!(
        at,
        [0, 10, 20, 30].map(|s| s * SECOND),
        "one poll per allowance"
    );
    assert_eq!(quotes, 4, "the snapshot and one change per poll");
    assert!(keepalives >= 25, "keepalives in between: {keepalives}");
    assert_eq!(
        hub.pacing(),
        mdproxy_core::hub::Pacing {
            interval: 10 * SECOND,
            held_by: Some("pace")
        }
    );
    let mut b = b.unwrap();
    assert_eq!(next(&mut b, SECOND).await, Chunk::Retry(3000));

    // A poll whose requests the upstream held back for 30 s: nothing until then.
    *script.allowance.lock().unwrap() = Allowance::default();
    script.fail.store(true, Ordering::SeqCst);
    *script.hold.lock().unwrap() = Some(30 * SECOND);
    let polls = script.polls().len();
    tokio::time::sleep(10 * SECOND).await;
    let failed_at = script.polls()[polls];
    script.fail.store(false, Ordering::SeqCst);
    tokio::time::sleep(35 * SECOND).await;
    let after: Vec<Duration> = script.polls()[polls + 1..]
        .iter()
        .map(|t| *t - failed_at)
        .collect();
    assert_eq!(after.first(), Some(&(30 * SECOND)), "{after:?}");
    // Free again: every 50 ms.
    assert!(after.len() >= 150, "{}", after.len());
    assert_eq!(hub.pacing().held_by, None);
}

/// The loop stops with the last subscriber, polls nothing while no one is
/// subscribed, and starts again for the next.
#[tokio::test(start_paused = true)]
async fn polling_stops_with_the_last_subscriber() {
    let script = Script::busy(&["600519"]);
    let (hub, _state) = hub(&script, |_| {});
    let mut a = subscribe(&hub, "600519", None, None);
    assert_eq!(next(&mut a, SECOND).await, Chunk::Retry(3000));
    assert!(matches!(next(&mut a, SECOND).await, Chunk::Quote { .. }));
    assert!(hub.is_polling());
    drop(a);
    tokio::time::sleep(SECOND).await;
    assert!(!hub.is_polling() && hub.codes() == 0);
    let polls = script.polls().len();
    tokio::time::sleep(60 * SECOND).await;
    assert_eq!(script.polls().len(), polls, "no poll without subscribers");
    let mut b = subscribe(&hub, "000001", None, None);
    assert_eq!(next(&mut b, SECOND).await, Chunk::Retry(3000));
    assert!(matches!(next(&mut b, SECOND).await, Chunk::Quote { .. }));
}

/// The hub goes idle as soon as its last subscriber leaves, in session and out of
/// it, at its default intervals: out of session, a minute apart, it used to notice
/// only at its next wake, and the status page showed it polling for nobody.
#[tokio::test(start_paused = true)]
async fn the_hub_goes_idle_when_the_last_subscriber_leaves_mid_interval() {
    let closed = Config::default().hub.closed_interval_ms;
    for at in [MONDAY_10_00, support::SATURDAY_NOON] {
        let script = Script::busy(&["600519"]);
        let (hub, _state) = hub_at(&script, at, |_| {});
        let mut a = subscribe(&hub, "600519", None, None);
        assert_eq!(next(&mut a, SECOND).await, Chunk::Retry(3000));
        assert!(matches!(next(&mut a, SECOND).await, Chunk::Quote { .. }));
        let polls = script.polls().len();
        drop(a);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !hub.is_polling() && hub.subscribers() == 0,
            "still polling for nobody at {at}"
        );
        tokio::time::sleep(Duration::from_millis(2 * closed)).await;
        assert_eq!(script.polls().len(), polls, "polled for nobody at {at}");
    }
}

/// A stream opened with a `Last-Event-ID` starts with a whole snapshot, every code
/// and not only what changed since that id, and its ids continue past it: from the
/// tick when the id is behind it, from the id when it is ahead (another node's, or
/// this process's before a restart).
#[tokio::test(start_paused = true)]
async fn a_reconnect_gets_a_snapshot_and_ids_past_its_last() {
    let script = Script::busy(&[]);
    let (hub, _state) = hub(&script, |_| {});
    let reconnect = |last_event_id| {
        hub.subscribe(Subscription {
            token: 0,
            codes: "600519,000001,300750",
            pz: 20,
            last_event_id,
            connection: None,
            outlet: None,
        })
        .unwrap()
    };
    // Keeps the poll going while the others come and go.
    let _keep = reconnect(None);
    let mut first = reconnect(None);
    assert_eq!(next(&mut first, SECOND).await, Chunk::Retry(3000));
    let Chunk::Quote { id: seen, .. } = next(&mut first, SECOND).await else {
        panic!("a snapshot");
    };
    drop(first);
    // The quotes never change: only a snapshot brings them again.
    tokio::time::sleep(SECOND).await;
    let tick = hub.tick();
    assert!(tick > seen + 10);
    for (last, want) in [(seen, tick), (tick + 1_000, tick + 1_001)] {
        let mut again = reconnect(Some(last));
        assert_eq!(next(&mut again, SECOND).await, Chunk::Retry(3000));
        let Chunk::Quote { id, rows } = next(&mut again, SECOND).await else {
            panic!("a snapshot");
        };
        assert_eq!(codes(&rows), ["600519", "000001", "300750"], "every code");
        assert_eq!(id, want, "after Last-Event-ID {last}");
    }
    // The ids go on rising with the ticks.
    script.busy.lock().unwrap().insert("600519".into());
    let mut again = reconnect(Some(tick + 1_000));
    next(&mut again, SECOND).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        if let Chunk::Quote { id, .. } = next(&mut again, SECOND).await {
            ids.push(id);
        }
    }
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1) && ids[0] > tick + 1_000,
        "{ids:?}"
    );
}

/// Log lines written while the returned guard lives on this thread (and by the
/// tasks of this test's runtime, which runs on it).
fn capture() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    #[derive(Clone)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Sink(Arc::clone(&lines));
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || sink.clone())
        .finish();
    (lines, tracing::subscriber::set_default(subscriber))
}

fn count(lines: &Mutex<Vec<u8>>, message: &str) -> usize {
    String::from_utf8_lossy(&lines.lock().unwrap())
        .lines()
        .filter(|l| l.contains(message))
        .count()
}

/// Polls that fail, all three requests of each, for ten seconds (two hundred of
/// them) write one warning, not one per request or per poll; a minute on, one
/// reminder with the count; the first poll that works again, one line.
#[tokio::test(start_paused = true)]
async fn a_failing_poll_is_logged_once() {
    let (lines, _guard) = capture();
    let script = Script::busy(&["600519"]);
    script.fail.store(true, Ordering::SeqCst);
    let (hub, _state) = hub(&script, |_| {});
    let _stream = subscribe(&hub, "600519", None, None);
    tokio::time::sleep(10 * SECOND).await;
    assert!(script.polls().len() >= 190);
    assert_eq!(count(&lines, "quote poll failed"), 1);
    assert!(
        count(&lines, "error=\"failed\" failed=3 requests=3") == 1,
        "{}",
        String::from_utf8_lossy(&lines.lock().unwrap())
    );
    assert_eq!(count(&lines, "quote poll still failing"), 0);
    tokio::time::sleep(55 * SECOND).await;
    assert_eq!(count(&lines, "quote poll still failing"), 1);
    assert_eq!(count(&lines, "quote poll failed"), 1);
    script.fail.store(false, Ordering::SeqCst);
    tokio::time::sleep(SECOND).await;
    assert_eq!(count(&lines, "quote poll works again"), 1);
    let by_level: BTreeMap<&str, usize> = [" WARN ", " INFO "]
        .into_iter()
        .map(|level| (level, count(&lines, level)))
        .collect();
    assert_eq!(by_level[" WARN "], 2, "{by_level:?}");
}
