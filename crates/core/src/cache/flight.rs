//! Single flight per key: the fills under way, in a map sharded by key whose locks
//! are short, synchronous and never held across an await. Concurrent fills of one
//! key share one future, driven by the callers that wait on it and handed to a task
//! of its own only when the one that started it goes away; what a fill does is the
//! store's business.

use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, Shared, WeakShared};
use tokio_util::task::TaskTracker;

use crate::cache::entry::CachedBody;
use crate::telemetry::Link;
use crate::upstream::client::FetchError;

/// What a fill ended with: the entry, whether the upstream was asked for it
/// (`false`: a usable entry had landed meanwhile), and whether the store holds it.
#[derive(Clone, Debug)]
pub struct Filled {
    pub entry: Arc<CachedBody>,
    pub fetched: bool,
    pub kept: bool,
}

/// One fill under way, awaited by every caller of its key.
pub type Flight = Shared<BoxFuture<'static, Result<Filled, FetchError>>>;

/// Shards of the map. Misses of different keys take different locks; a lock is held
/// for a hash map lookup and, for the first caller of a key, an insert.
const SHARDS: usize = 64;

/// One fill in the map. The map holds it weakly: the callers that wait on it (and
/// the task a fill is handed to) keep it alive, and a fill no one holds any more
/// (dropped half-way as its runtime shuts down) is dropped with its work, whose
/// [`Ending`] then takes it out of the map, instead of the map keeping it and the
/// store it belongs to for good.
struct Registered {
    flight: WeakShared<BoxFuture<'static, Result<Filled, FetchError>>>,
    /// The span its waiters link to.
    link: Link,
    /// Which fill of the key it is: only its own [`Ending`] takes it out.
    id: u64,
}

/// One shard: the fills under way by key, hashed with foldhash as the shard is
/// chosen (SipHash here took about 600 instructions of a miss).
/// Keyed by the key its [`Ending`] holds too (one copy of the key a flight).
type Shard = foldhash::HashMap<Arc<str>, Registered>;

/// A shard and how many of its flights have ended.
#[derive(Default)]
struct Slot {
    fills: Mutex<Shard>,
    /// Raised under `fills`' lock as a flight ends (after its answer is stored).
    ended: AtomicU64,
}

/// Where the flights of a key stood before a caller read the store for it: how
/// many flights of its shard had ended ([`Flights::mark`]). A caller that finds
/// none ended since, as it starts its own, knows that no fill stored the key after
/// its read ([`Flights::ended_since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    shard: usize,
    ended: u64,
}

/// The fills under way, by key.
pub struct Flights {
    hasher: foldhash::fast::RandomState,
    slots: Box<[Slot]>,
    /// The next fill's [`Registered::id`].
    next_id: AtomicU64,
}

impl Default for Flights {
    fn default() -> Flights {
        Flights {
            hasher: foldhash::fast::RandomState::default(),
            slots: (0..SHARDS).map(|_| Slot::default()).collect(),
            next_id: AtomicU64::new(0),
        }
    }
}

impl Flights {
    fn index(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        self.lock(self.index(key))
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        // A panic while the lock is held can only come from the map itself; its
        // contents stay consistent, so a poisoned lock is taken over.
        self.slots[index]
            .fills
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the flights of `key` stand, to be taken before the store is read for
    /// it. A flight ends only after its answer is stored, and the count is read
    /// with acquire ordering: a read made after the mark sees the answer of every
    /// flight the mark counts as ended.
    pub fn mark(&self, key: &str) -> Mark {
        let shard = self.index(key);
        Mark {
            shard,
            ended: self.slots[shard].ended.load(Ordering::Acquire),
        }
    }

    /// Whether a flight of `mark`'s shard has ended since it was taken (any key of
    /// the shard counts: a false "yes" costs a read of the store, never a wrong
    /// answer). Asked in [`join_or_start`](Self::join_or_start)'s `start`, under
    /// the shard's lock, it is exact until the lock is let go: no flight of the
    /// shard ends meanwhile.
    pub fn ended_since(&self, mark: Mark) -> bool {
        self.slots[mark.shard].ended.load(Ordering::Acquire) != mark.ended
    }

    /// The fill of `key` under way, or the one `start` makes (given its id and the
    /// key, for its [`Ending`]), registered for the callers that come while it runs; `true` when
    /// this caller started it; and the link to the fill's span. `start` runs under
    /// the shard's lock: it must only build the future (the work starts when the
    /// flight is first polled).
    pub fn join_or_start(
        &self,
        key: &str,
        start: impl FnOnce(u64, Arc<str>) -> (Flight, Link),
    ) -> (Flight, bool, Link) {
        let mut shard = self.shard(key);
        if let Some(registered) = shard.get(key)
            && let Some(flight) = registered.flight.upgrade()
        {
            return (flight, false, registered.link.clone());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let key: Arc<str> = key.into();
        let (flight, link) = start(id, Arc::clone(&key));
        let weak = flight
            .downgrade()
            .expect("a flight not yet polled has not ended");
        let registered = Registered {
            flight: weak,
            link: link.clone(),
            id,
        };
        shard.insert(key, registered);
        (flight, true, link)
    }

    /// Ends the flight `id` of `key`, if it is still the one registered: later
    /// callers start a new one. Counted as ended either way (a flight no longer
    /// registered may still have stored its answer).
    pub fn end(&self, key: &str, id: u64) {
        let index = self.index(key);
        let mut shard = self.lock(index);
        if shard.get(key).is_some_and(|r| r.id == id) {
            shard.remove(key);
        }
        self.slots[index].ended.fetch_add(1, Ordering::Release);
    }

    /// How many wait on the fill of `key` now: its callers (the one that started
    /// it too) and the task it was handed to, if its starter went away.
    pub fn waiters(&self, key: &str) -> usize {
        self.upgraded(key)
            .and_then(|flight| flight.strong_count())
            // Less the clone just upgraded.
            .map_or(0, |n| n.saturating_sub(1))
    }

    /// Whether a fill of `key` is under way.
    pub fn contains(&self, key: &str) -> bool {
        self.upgraded(key).is_some()
    }

    /// The flight of `key`, if one is under way, upgraded under the shard's lock and
    /// handed out of it: if every other holder lets go meanwhile, dropping this clone
    /// drops the work, whose [`Ending`] locks the same shard; under the lock that
    /// would be a deadlock of the thread, and of every key of the shard.
    fn upgraded(&self, key: &str) -> Option<Flight> {
        let shard = self.shard(key);
        let flight = shard.get(key).and_then(|r| r.flight.upgrade());
        drop(shard);
        flight
    }
}

/// Which task drives a fill while the caller that started it waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FillTask {
    /// The starter's own ([`Driven`]): its task has nothing else to do meanwhile
    /// (an HTTP/1.1 connection carries one request at a time; background work runs
    /// in a task of its own), and a miss crosses one task fewer.
    #[default]
    Starters,
    /// A task of its own: the starter's task is shared (an HTTP/2 connection's
    /// streams all run in its task), so its fills go to every worker of the runtime
    /// rather than queue on that one task. Measured (64 misses at a time on one
    /// HTTP/2 connection, four rounds against the build whose fills all had tasks
    /// of their own): 1.04 / 0.94 / 0.93 / 0.95 as fast when they ran on the
    /// connection's task, 1.03 / 0.95 / 1.20 / 0.98 on tasks of their own.
    Own,
}

/// The client request a fill is made for: its ID and trace, for the upstream, and
/// which task drives the fill while it waits (by default the starter's, as for an
/// MCP tool call's fills).
#[derive(Clone, Debug, Default)]
pub struct ClientFill {
    pub context: crate::telemetry::context::Context,
    pub task: FillTask,
}

/// The starting caller's wait on its flight. A fill has no task of its own: the
/// callers that wait on it drive it (whichever is polled when it can go on; the
/// starter alone on a miss no one else asked, which then crosses one task fewer:
/// no spawn, no hand-over of the answer). Dropped before the fill ends (a client
/// gone), this hands the fill to a task of `tracker`, so a fill once started always
/// ends: its answer is kept, the upstream's reply is read, and the flight leaves
/// the map for the callers that joined it.
pub struct Driven {
    flight: Flight,
    tracker: TaskTracker,
    done: bool,
}

impl Driven {
    /// The wait of the caller that started `flight`.
    pub fn new(flight: Flight, tracker: TaskTracker) -> Driven {
        Driven {
            flight,
            tracker,
            done: false,
        }
    }
}

impl Future for Driven {
    type Output = Result<Filled, FetchError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = Pin::new(&mut self.flight).poll(cx);
        self.done = polled.is_ready();
        polled
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        // Output taken (`done`) or made for a caller that joined: nothing to drive.
        if self.done || self.flight.peek().is_some() {
            return;
        }
        // Outside a runtime (it is being torn down) there is nothing to run it on.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let flight = self.flight.clone();
            self.tracker.spawn_on(
                async move {
                    let _ = flight.await;
                },
                &runtime,
            );
        }
    }
}

/// Ends a key's flight when dropped: when its work finishes, and also when the work
/// is dropped half-way (a panic, the runtime shutting down), so that no key keeps a
/// flight that will never end.
pub struct Ending {
    flights: Arc<Flights>,
    key: Arc<str>,
    id: u64,
}

impl Ending {
    /// A guard that ends the flight `id` of `key` in `flights`.
    pub fn new(flights: Arc<Flights>, key: Arc<str>, id: u64) -> Ending {
        Ending { flights, key, id }
    }

    /// The key whose flight it ends.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        self.flights.end(&self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn ready(n: u8) -> (Flight, Link) {
        let flight = async move { Err(FetchError::Failed(u16::from(n))) }
            .boxed()
            .shared();
        (flight, Link::default())
    }

    #[test]
    fn one_flight_per_key_until_it_ends() {
        let flights = Flights::default();
        let (_a, first, _) = flights.join_or_start("a", |_, _| ready(1));
        let (_joined, second, _) =
            flights.join_or_start("a", |_, _| unreachable!("a is under way"));
        let (_b, other, _) = flights.join_or_start("b", |_, _| ready(2));
        assert!(first && !second && other);
        assert!(flights.contains("a"));
        assert_eq!(flights.waiters("a"), 2);
        flights.end("a", 0);
        assert!(!flights.contains("a"));
        let (_again, again, _) = flights.join_or_start("a", |_, _| ready(3));
        assert!(again, "a new flight after the end");
        flights.end("a", 0);
        assert!(
            flights.contains("a"),
            "an earlier flight's end leaves the new one"
        );
    }

    /// A mark counts the flights of its key's shard that ended: one started is not
    /// counted, one ended is, whether or not it was still the one registered.
    #[test]
    fn a_mark_sees_the_flights_of_its_shard_end() {
        let flights = Flights::default();
        let mark = flights.mark("a");
        assert!(!flights.ended_since(mark));
        let (_a, _, _) = flights.join_or_start("a", |_, _| ready(1));
        assert!(!flights.ended_since(mark), "started, not ended");
        flights.end("a", 0);
        assert!(flights.ended_since(mark));
        let later = flights.mark("a");
        assert!(!flights.ended_since(later));
        flights.end("a", 7);
        assert!(
            flights.ended_since(later),
            "an end not registered counts too"
        );
    }

    #[test]
    fn the_guard_ends_the_flight_even_when_the_work_is_dropped() {
        let flights = Arc::new(Flights::default());
        let (_flight, _, _) = flights.join_or_start("k", |_, _| ready(1));
        let guard = Ending::new(Arc::clone(&flights), "k".into(), 0);
        let work = async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        };
        drop(work);
        assert!(!flights.contains("k"));
    }

    /// A flight of `key` in `flights` whose work never ends, with its guard.
    fn never_ending(flights: &Arc<Flights>, key: &str) -> Flight {
        let (flight, _, _) = flights.join_or_start(key, |id, key| {
            let ending = Ending::new(Arc::clone(flights), key, id);
            let work = async move {
                let _ending = ending;
                std::future::pending::<Result<Filled, FetchError>>().await
            };
            (work.boxed().shared(), Link::default())
        });
        flight
    }

    /// A flight let go by its last holder while another thread asks about it: the
    /// clone upgraded for the question may be the last, and dropping it drops the
    /// work, whose guard locks the shard; dropped under the lock, it hung that
    /// thread. Two threads race for a bounded number of rounds and must both end.
    #[test]
    fn a_flight_let_go_while_it_is_asked_about_ends_without_a_deadlock() {
        const ROUNDS: usize = 100_000;
        let flights = Arc::new(Flights::default());
        let asker = {
            let flights = Arc::clone(&flights);
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let _ = flights.contains("k");
                    let _ = flights.waiters("k");
                }
            })
        };
        let holder = {
            let flights = Arc::clone(&flights);
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    drop(never_ending(&flights, "k"));
                }
            })
        };
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send((asker.join().is_ok(), holder.join().is_ok()));
        });
        let ended = finished.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(ended, Ok((true, true)), "both threads ended");
        assert!(!flights.contains("k"));
    }

    /// The map does not keep a fill alive: once no caller (nor a task it was handed
    /// to) holds it, its work is dropped, and its guard takes it out of the map. A
    /// map that held it would have kept it, and the store its work holds, for good.
    #[test]
    fn a_flight_no_one_holds_is_dropped_with_its_work() {
        let flights = Arc::new(Flights::default());
        let flight = never_ending(&flights, "k");
        assert!(flights.contains("k"));
        drop(flight);
        assert!(!flights.contains("k"));
        assert!(flights.shard("k").is_empty(), "its entry is gone");
        assert_eq!(
            Arc::strong_count(&flights),
            1,
            "the work and its guard are gone"
        );
    }
}
