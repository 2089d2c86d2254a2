//! When an answer's compressed representations are made: by the fill that stores it,
//! for the coding of the client that started it ([`Want::Asked`], a quick copy) or,
//! for work no client waits on and the disk read that promotes a record, for the
//! codings clients asked for lately ([`Want::Lately`]); else in the background after
//! the first request that asks for one, or asks again for an answer that has only a
//! quick copy; always on the blocking pool, and only as many at once as there are
//! cores.
//!
//! A quick copy is the coding's fastest level (`Coding::compress_quick`): the client
//! waiting on a miss gets it a third of the time sooner, and an answer never asked
//! for again, as in a flood of new keys, never pays for the chosen level, as nginx
//! compresses every response at its `gzip_comp_level` 1. The next request for the
//! answer is served the quick copy and has the one at the chosen level made, which
//! every request after it gets (docs/BENCHMARKS.md "The miss path").
//!
//! Making all three for every fill cost about 35 ms of CPU per large K-line and
//! four times the fill time of the disk benchmark, for codings no client asked for
//! (docs/BENCHMARKS.md "The disk tier beside nginx's disk cache"). A browser asks for
//! one coding (zstd, then brotli, then gzip, `edge::negotiate`), so a fill now makes
//! the one or two that the clients of the last [`DEMAND_WINDOW`] were given.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::cache::encoding::Coding;
use crate::cache::entry::CachedBody;

/// How long a coding stays wanted after a request last chose it: a fill made in that
/// time makes it too.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Which compressed copies a fill makes before it stores its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Those clients chose within [`DEMAND_WINDOW`]: for work no client waits on
    /// (a background refresh, prewarming), so that the hits after it find them.
    Lately,
    /// The one the client whose request started the fill takes, if any, as a
    /// quick copy. Others are made on the first hit that asks
    /// (`Compressor::start`), as is this one at its chosen level: a flood of keys
    /// asked once by clients that take no coding compresses nothing, as nginx's
    /// `gzip` does not, where making every coding wanted lately cost a 10 KB miss
    /// more than the rest of it (docs/BENCHMARKS.md "The miss path").
    Asked(Option<Coding>),
}

/// Which codings clients ask for, and the permits of the compressions under way.
/// One per cache.
#[derive(Debug)]
pub struct Compressor {
    /// Per coding, by [`Coding::index`]: whole seconds since `epoch`, plus one, of
    /// the last request that chose it (0: none yet).
    asked: [AtomicU64; 3],
    epoch: Instant,
    /// Compressions running at once: the blocking pool would start one thread for
    /// each, and a burst of misses would hold a compressor's tables per thread.
    permits: Arc<Semaphore>,
}

impl Default for Compressor {
    fn default() -> Compressor {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        Compressor {
            asked: Default::default(),
            epoch: Instant::now(),
            permits: Arc::new(Semaphore::new(cores)),
        }
    }
}

impl Compressor {
    /// A request chose `coding`. Written once a second at most: hits on every core
    /// read the same line rather than bounce it.
    pub fn note(&self, coding: Coding) {
        let now = self.epoch.elapsed().as_secs() + 1;
        let asked = &self.asked[coding.index()];
        if asked.load(Ordering::Relaxed) != now {
            asked.store(now, Ordering::Relaxed);
        }
    }

    /// Whether a request chose `coding` within [`DEMAND_WINDOW`].
    pub fn is_wanted(&self, coding: Coding) -> bool {
        let asked = self.asked[coding.index()].load(Ordering::Relaxed);
        let now = self.epoch.elapsed().as_secs() + 1;
        asked != 0 && now.saturating_sub(asked) <= DEMAND_WINDOW.as_secs()
    }

    /// Makes the representations of `entry` that are wanted and not made yet (the
    /// one a client asked for as a quick copy), on the blocking pool once a permit
    /// is free, and waits for them: the fill (and a disk read's promotion) stores
    /// the entry with them, and its waiters get them.
    pub async fn make_wanted(&self, entry: &Arc<CachedBody>, want: Want) {
        if !entry.is_compressible() {
            return;
        }
        let wanted = |c: &Coding| match want {
            Want::Lately => self.is_wanted(*c),
            Want::Asked(coding) => coding == Some(*c),
        };
        let missing: Vec<Coding> = Coding::ALL
            .into_iter()
            .filter(|c| wanted(c) && entry.encoded_now(*c).is_none() && !entry.has_quick(*c))
            .collect();
        let quick = matches!(want, Want::Asked(_));
        if missing.is_empty() {
            return;
        }
        // The semaphore is never closed.
        let Ok(permit) = Arc::clone(&self.permits).acquire_owned().await else {
            return;
        };
        let entry = Arc::clone(entry);
        let made = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            for coding in missing {
                if quick {
                    entry.make_quick(coding);
                } else {
                    entry.make(coding);
                }
            }
        })
        .await;
        if let Err(e) = made {
            // Not made now: a request that wants one has it made then.
            tracing::warn!(error = %e, "compressing an answer failed");
        }
    }

    /// Takes every permit: compressions wait until it is dropped (tests stop a
    /// promotion between its disk read and its insert so).
    #[cfg(test)]
    pub(crate) async fn hold_all(&self) -> tokio::sync::OwnedSemaphorePermit {
        let all = u32::try_from(self.permits.available_permits()).unwrap_or(u32::MAX);
        Arc::clone(&self.permits)
            .acquire_many_owned(all)
            .await
            .expect("never closed")
    }

    /// Starts making `coding` of `entry` on the blocking pool, for a request that
    /// was just given the identity body or a quick copy instead; `None` when every
    /// permit is taken (a later request asks again), when one was started for the
    /// entry before (the requests that find the copy missing meanwhile hold no
    /// permit and no blocking thread waiting for it), or there is no runtime to run
    /// it on. The task ends with whether it made the copy (`false`: another had, or
    /// the body is too small).
    pub fn start(&self, entry: &Arc<CachedBody>, coding: Coding) -> Option<JoinHandle<bool>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        if !entry.claim_making(coding) {
            return None;
        }
        let entry = Arc::clone(entry);
        Some(runtime.spawn_blocking(move || {
            let _permit = permit;
            entry.make(coding)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str) -> Arc<CachedBody> {
        let body: &'static str = Box::leak(body.to_owned().into_boxed_str());
        Arc::new(crate::cache::store::tests::body(body))
    }

    /// Only the codings asked for are made, each once; none before any request.
    #[tokio::test]
    async fn makes_what_was_asked_for() {
        let compressor = Compressor::default();
        let big = "{\"success\":true,\"data\":[1,2,3]}".repeat(100);
        let e = entry(&big);
        compressor.make_wanted(&e, Want::Lately).await;
        assert!(Coding::ALL.iter().all(|&c| e.encoded_now(c).is_none()));
        compressor.note(Coding::Zstd);
        compressor.note(Coding::Zstd);
        assert!(compressor.is_wanted(Coding::Zstd));
        assert!(!compressor.is_wanted(Coding::Gzip));
        compressor.make_wanted(&e, Want::Lately).await;
        assert!(e.encoded_now(Coding::Zstd).is_some());
        assert!(e.encoded_now(Coding::Gzip).is_none());
        assert!(e.encoded_now(Coding::Brotli).is_none());
        // A body too small to compress is left alone.
        let small = entry("{}");
        compressor.make_wanted(&small, Want::Lately).await;
        assert!(small.encoded_now(Coding::Zstd).is_none());
    }

    /// A fill a client waits on makes that client's coding as a quick copy (with a
    /// validator of its own) and nothing else; the copy at the chosen level, made
    /// when the answer is asked for again, replaces it, in what is served and in
    /// what is weighed.
    #[tokio::test]
    async fn a_waiting_client_gets_a_quick_copy_until_the_answer_is_read_again() {
        let compressor = Compressor::default();
        let e = entry(&"{\"code\":\"600519\",\"price\":1712.5}".repeat(400));
        compressor
            .make_wanted(&e, Want::Asked(Some(Coding::Gzip)))
            .await;
        assert!(e.has_quick(Coding::Gzip));
        assert!(
            e.encoded_now(Coding::Gzip).is_none(),
            "not at the chosen level"
        );
        assert!(e.copy(Coding::Zstd).is_none(), "only the coding asked for");
        let (quick, etag) = e.copy(Coding::Gzip).expect("served the quick copy");
        assert_eq!(quick, Coding::Gzip.compress_quick(&e.body).unwrap());
        assert_eq!(etag, format!("\"{:016x}-gz1\"", e.hash()).as_str());
        assert_eq!(e.bytes_held(), (e.body.len() + quick.len()) as u64);
        // Whether it is small enough to keep is judged without the quick copy.
        use crate::cache::entry::{QUICK_OVERHEAD, settled_weight, weight};
        assert_eq!(
            settled_weight("k", &e) + quick.len() as u64 + QUICK_OVERHEAD,
            weight("k", &e),
            "the quick copy weighs its bytes and its bookkeeping"
        );
        // Asked again: nothing more to make now.
        compressor
            .make_wanted(&e, Want::Asked(Some(Coding::Gzip)))
            .await;
        assert!(!e.make_quick(Coding::Gzip));

        let made = compressor.start(&e, Coding::Gzip).unwrap().await.unwrap();
        assert!(made);
        assert!(!e.has_quick(Coding::Gzip), "replaced");
        let (chosen, etag) = e.copy(Coding::Gzip).unwrap();
        assert_eq!(chosen, Coding::Gzip.compress(&e.body).unwrap());
        assert_eq!(etag, format!("\"{:016x}-gz\"", e.hash()).as_str());
        assert!(
            chosen.len() < quick.len(),
            "the chosen level is the smaller"
        );
        assert_eq!(e.bytes_held(), (e.body.len() + chosen.len()) as u64);
        assert_eq!(settled_weight("k", &e), weight("k", &e));
        // Started once for the entry's life: later requests start nothing.
        assert!(compressor.start(&e, Coding::Gzip).is_none());
        // Once the chosen level is made, no quick copy is made beside it.
        assert!(!e.make_quick(Coding::Gzip));
        // A body too small to compress gets none.
        let small = entry("{}");
        compressor
            .make_wanted(&small, Want::Asked(Some(Coding::Gzip)))
            .await;
        assert!(small.copy(Coding::Gzip).is_none());
    }

    /// A request given the identity body has the coding made in the background.
    #[tokio::test]
    async fn a_request_has_its_coding_made_soon() {
        let compressor = Compressor::default();
        let e = entry(&"{\"x\":1234567}".repeat(200));
        let made = compressor
            .start(&e, Coding::Gzip)
            .expect("a permit is free")
            .await
            .unwrap();
        assert!(made);
        assert!(e.encoded_now(Coding::Gzip).is_some());
        assert!(e.encoded_now(Coding::Zstd).is_none());
        // Started again (a second request before the first was given the copy):
        // nothing is started twice.
        assert!(compressor.start(&e, Coding::Gzip).is_none());
    }
}
