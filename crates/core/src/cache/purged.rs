//! Purges made lately, ordered against the reads and fetches around them: an
//! answer read or fetched before a purge that covers it is not kept after it (a
//! fill, a disk read or a disk write in flight across the purge), in memory or on
//! disk.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::cache::purge::Purge;

/// Keys purged lately that are remembered. A fill lasts an upstream timeout and a
/// queued disk write seconds, so once this many are held those older than
/// [`MEMORY`] go (and all of them, if all are younger: a flood of purges).
const KEYS_KEPT: usize = 4096;
/// Endpoint and prefix purges remembered; past this the oldest goes.
const PATTERNS_KEPT: usize = 256;
/// How long a purge is surely remembered when room is made.
const MEMORY: Duration = Duration::from_secs(60);

/// The order of stamps taken in this process: unique, increasing.
static TICKETS: AtomicU64 = AtomicU64::new(1);

/// When an answer was read or its fetch began, or when a purge was done: a ticket
/// that orders it against every other stamp of the process, and the system clock
/// (microseconds since the Unix epoch; not the market clock a test may hold
/// still), which a disk record keeps across restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    ticket: u64,
    micros: i64,
}

impl Stamp {
    /// Now.
    pub fn now() -> Stamp {
        let ticket = TICKETS.fetch_add(1, Ordering::SeqCst);
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        Stamp { ticket, micros }
    }

    /// Microseconds since the Unix epoch.
    pub fn as_micros(self) -> i64 {
        self.micros
    }
}

/// When a purge was done: not yet while it is under way (it then covers every
/// answer, however recent).
#[derive(Clone, Copy, Debug)]
enum Done {
    UnderWay { since: Stamp },
    At(Stamp),
}

impl Done {
    fn covers(self, read: Stamp) -> bool {
        match self {
            Done::UnderWay { .. } => true,
            Done::At(done) => done.ticket > read.ticket,
        }
    }

    fn forgettable(self, now: Stamp) -> bool {
        let memory = i64::try_from(MEMORY.as_micros()).unwrap_or(i64::MAX);
        match self {
            Done::UnderWay { .. } => false,
            Done::At(done) => now.micros - done.micros >= memory,
        }
    }
}

/// The purges made lately. Memory and the disk tier share one.
///
/// A purge is noted before it drops anything and done once it has dropped all
/// ([`Purging`]): while it is under way it covers every answer, and once done,
/// those read before it was done. So an answer stored after the purge dropped
/// what it found, and checked after it was stored, is caught whichever came first.
#[derive(Debug, Default)]
pub struct Purged {
    /// Purges under way: while there are none, most answers were taken after the
    /// latest purge and are told so without a lock.
    under_way: AtomicUsize,
    /// The latest purge's ticket, when it was done.
    latest: AtomicU64,
    keys: Mutex<HashMap<String, Done>>,
    /// Each with the ticket it was noted at, which names it.
    patterns: Mutex<VecDeque<(u64, Done, Purge)>>,
}

/// A purge under way; done when dropped, after it dropped what it covers.
#[must_use = "a purge is done when this is dropped"]
#[derive(Debug)]
pub struct Purging<'a> {
    purged: &'a Purged,
    key: Option<String>,
    noted: Stamp,
}

impl Purged {
    /// Notes a purge of `key`, under way until the answer is dropped.
    pub fn key(&self, key: &str) -> Purging<'_> {
        let noted = self.begin();
        let mut keys = lock(&self.keys);
        if keys.len() >= KEYS_KEPT {
            keys.retain(|_, done| !done.forgettable(noted));
            if keys.len() >= KEYS_KEPT {
                keys.retain(|_, done| matches!(done, Done::UnderWay { .. }));
            }
        }
        keys.insert(key.to_owned(), Done::UnderWay { since: noted });
        Purging {
            purged: self,
            key: Some(key.to_owned()),
            noted,
        }
    }

    /// Notes `purge` (a key goes to [`Purged::key`]), under way until what it
    /// covers is dropped.
    pub fn matching(&self, purge: &Purge) -> Purging<'_> {
        if let Purge::Key(key) = purge {
            return self.key(key);
        }
        let noted = self.begin();
        let mut patterns = lock(&self.patterns);
        if patterns.len() >= PATTERNS_KEPT {
            patterns.retain(|(_, done, _)| !done.forgettable(noted));
            while patterns.len() >= PATTERNS_KEPT {
                patterns.pop_front();
            }
        }
        patterns.push_back((noted.ticket, Done::UnderWay { since: noted }, purge.clone()));
        Purging {
            purged: self,
            key: None,
            noted,
        }
    }

    /// Whether a purge covering `key` is under way or was done after `read`.
    pub fn since(&self, key: &str, read: Stamp) -> bool {
        if self.under_way.load(Ordering::SeqCst) == 0
            && self.latest.load(Ordering::SeqCst) <= read.ticket
        {
            return false;
        }
        let keyed = lock(&self.keys)
            .get(key)
            .is_some_and(|done| done.covers(read));
        keyed
            || lock(&self.patterns)
                .iter()
                .any(|(_, done, purge)| done.covers(read) && purge.matches(key))
    }

    fn begin(&self) -> Stamp {
        self.under_way.fetch_add(1, Ordering::SeqCst);
        Stamp::now()
    }

    fn done(&self, purging: &Purging<'_>) {
        let done = Stamp::now();
        match &purging.key {
            Some(key) => {
                if let Some(held) = lock(&self.keys).get_mut(key)
                    && matches!(held, Done::UnderWay { since } if since.ticket == purging.noted.ticket)
                {
                    *held = Done::At(done);
                }
            }
            None => {
                if let Some((_, held, _)) = lock(&self.patterns)
                    .iter_mut()
                    .find(|(noted, _, _)| *noted == purging.noted.ticket)
                {
                    *held = Done::At(done);
                }
            }
        }
        self.latest.fetch_max(done.ticket, Ordering::SeqCst);
        self.under_way.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Purging<'_> {
    fn drop(&mut self) {
        self.purged.done(self);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_covers_what_was_read_before_it_was_done_and_nothing_after() {
        let purged = Purged::default();
        let before = Stamp::now();
        assert!(!purged.since("/stock/detail?code=600519", before));
        let key = purged.key("/stock/detail?code=600519");
        let prefix = purged.matching(&Purge::Prefix("/news/".into()));
        // Under way: even a read begun after it was noted is covered (it may have
        // found what the purge had not dropped yet).
        let during = Stamp::now();
        assert!(purged.since("/stock/detail?code=600519", during));
        assert!(purged.since("/news/flash?limit=5", during));
        assert!(!purged.since("/stock/detail?code=000001", during));
        drop((key, prefix));
        assert!(purged.since("/stock/detail?code=600519", during));
        assert!(purged.since("/news/flash?limit=5", before));
        let after = Stamp::now();
        assert!(!purged.since("/stock/detail?code=600519", after));
        assert!(!purged.since("/news/flash?limit=5", after));
    }

    #[test]
    fn room_is_made_without_forgetting_a_purge_under_way() {
        let purged = Purged::default();
        let before = Stamp::now();
        let held = purged.key("/held");
        for i in 0..KEYS_KEPT + 10 {
            drop(purged.key(&format!("/k/{i}")));
        }
        // All made within the minute: the map was full of them and let the done
        // ones go, but not the one under way, nor the newest.
        assert!(purged.since("/held", Stamp::now()));
        assert!(purged.since(&format!("/k/{}", KEYS_KEPT + 9), before));
        drop(held);
        for i in 0..PATTERNS_KEPT + 10 {
            drop(purged.matching(&Purge::Prefix(format!("/p/{i}/"))));
        }
        let patterns = lock(&purged.patterns).len();
        assert!(patterns <= PATTERNS_KEPT, "{patterns} kept");
        assert!(purged.since(&format!("/p/{}/x", PATTERNS_KEPT + 9), before));
        assert!(!purged.since("/p/x", Stamp::now()));
    }
}
