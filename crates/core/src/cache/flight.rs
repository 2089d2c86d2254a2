//! Single flight per key: the fills under way, in a map sharded by key whose locks
//! are short, synchronous and never held across an await. Concurrent fills of one
//! key share one future, driven by its callers and handed to a task of its own
//! only when the one that started it goes away; what a fill does is the store's
//! business.

use std::collections::HashMap;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, Shared};
use tokio_util::task::TaskTracker;

use crate::cache::entry::CachedBody;
use crate::telemetry::Link;
use crate::upstream::client::FetchError;

/// What a fill ended with: the entry, and whether the upstream was asked for it
/// (`false`: a usable entry had landed meanwhile).
#[derive(Clone, Debug)]
pub struct Filled {
    pub entry: Arc<CachedBody>,
    pub fetched: bool,
}

/// One fill under way, awaited by every caller of its key.
pub type Flight = Shared<BoxFuture<'static, Result<Filled, FetchError>>>;

/// Shards of the map. Misses of different keys take different locks; a lock is held
/// for a hash map lookup and, for the first caller of a key, an insert.
const SHARDS: usize = 64;

/// One shard: the fills under way by key, each with the span its waiters link to.
type Shard = HashMap<String, (Flight, Link)>;

/// The fills under way, by key.
pub struct Flights {
    hasher: foldhash::fast::RandomState,
    shards: Box<[Mutex<Shard>]>,
}

impl Default for Flights {
    fn default() -> Flights {
        Flights {
            hasher: foldhash::fast::RandomState::default(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Flights {
    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one(key) % SHARDS as u64) as usize;
        // A panic while the lock is held can only come from the map itself; its
        // contents stay consistent, so a poisoned lock is taken over.
        self.shards[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The fill of `key` under way, or the one `start` makes, registered for the
    /// callers that come while it runs; `true` when this caller started it; and the
    /// link to the fill's span. `start` runs under the shard's lock: it must only
    /// build the future (the work starts when the flight is first polled).
    pub fn join_or_start(
        &self,
        key: &str,
        start: impl FnOnce() -> (Flight, Link),
    ) -> (Flight, bool, Link) {
        let mut shard = self.shard(key);
        if let Some((flight, link)) = shard.get(key) {
            return (flight.clone(), false, link.clone());
        }
        let (flight, link) = start();
        shard.insert(key.to_owned(), (flight.clone(), link.clone()));
        (flight, true, link)
    }

    /// Ends the flight of `key`: later callers start a new one.
    pub fn end(&self, key: &str) {
        self.shard(key).remove(key);
    }

    /// How many callers wait on the fill of `key` now (the one that started it too).
    pub fn waiters(&self, key: &str) -> usize {
        self.shard(key)
            .get(key)
            .and_then(|(flight, _)| flight.strong_count())
            // The map holds one of the clones.
            .map_or(0, |n| n.saturating_sub(1))
    }

    /// Whether a fill of `key` is under way.
    pub fn contains(&self, key: &str) -> bool {
        self.shard(key).contains_key(key)
    }
}

/// The starting caller's wait on its flight: the fill runs on that caller's task,
/// with no task of its own, while the caller waits for it (a miss then crosses one
/// task fewer: no spawn, no hand-over of the answer). Dropped before the fill ends
/// (a client gone, a request timed out), it hands the fill to a task of `tracker`,
/// so a fill once started always ends: its answer is kept, the upstream's reply is
/// read, and the flight leaves the map for the callers that joined it.
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
    key: String,
}

impl Ending {
    /// A guard that ends `key`'s flight in `flights`.
    pub fn new(flights: Arc<Flights>, key: String) -> Ending {
        Ending { flights, key }
    }

    /// The key whose flight it ends.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        self.flights.end(&self.key);
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
        let (_, first, _) = flights.join_or_start("a", || ready(1));
        let (_, second, _) = flights.join_or_start("a", || unreachable!("a is under way"));
        let (_, other, _) = flights.join_or_start("b", || ready(2));
        assert!(first && !second && other);
        assert!(flights.contains("a"));
        flights.end("a");
        assert!(!flights.contains("a"));
        let (_, again, _) = flights.join_or_start("a", || ready(3));
        assert!(again, "a new flight after the end");
    }

    #[test]
    fn the_guard_ends_the_flight_even_when_the_work_is_dropped() {
        let flights = Arc::new(Flights::default());
        let _ = flights.join_or_start("k", || ready(1));
        let guard = Ending::new(Arc::clone(&flights), "k".into());
        let work = async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        };
        drop(work);
        assert!(!flights.contains("k"));
    }
}
