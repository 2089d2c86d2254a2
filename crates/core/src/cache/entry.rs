//! One cached answer: the upstream's body as it came, what decided its lifetimes,
//! its validators and its compressed representations, and what it weighs in memory.
//! Whether it is fresh is the policy's decision ([`CachedBody::lifetimes_under`]).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::HeaderValue;

use crate::cache::encoding::{Coding, MIN_BYTES};
use crate::cache::freshness::{Lifetimes, Policy, Rule};

/// One cached answer: the upstream's body as it came, and what we know about it.
#[derive(Debug)]
pub struct CachedBody {
    /// The upstream's body, byte for byte; a hit clones this refcount only.
    pub body: Bytes,
    /// The status to answer with: 200, or 404 for a negatively cached "not found".
    pub status: u16,
    /// When the upstream produced it (per the proxy's clock).
    pub fetched_at: DateTime<Utc>,
    /// What decided its lifetimes.
    pub rule: Rule,
    /// Its lifetimes under the policy of `generation`.
    pub lifetimes: Lifetimes,
    /// The config generation `lifetimes` were computed under; after a reload they
    /// are recomputed from `rule` and `fetched_at`.
    pub generation: u64,
    /// Strong validator of `body` (`"<xxh3 hex>"`).
    pub etag: HeaderValue,
    /// The compressed representations, for a body large enough to have any
    /// ([`CachedBody::is_compressible`]; a "not found" or a short page has none
    /// and saves the allocation, a third of its entry). Boxed: they would triple
    /// the size of every value that carries an entry.
    copies: Option<Box<Copies>>,
    /// How long moka may keep it in memory (until its stale-if-error time).
    pub keep_for: Duration,
    /// Read from the cluster's shared store (another node's fill, or this node's
    /// before a restart), not fetched by this node.
    pub shared: bool,
    /// Read from this node's disk tier (so not written back to it).
    pub disk: bool,
}

/// `"<hash as 16 hex digits><suffix>"`, as an ETag: written by hand, since the
/// formatting machinery costs a miss more than the hash itself.
fn quoted_hex(hash: u64, suffix: &str) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = Vec::with_capacity(18 + suffix.len());
    text.push(b'"');
    text.extend(
        (0..16)
            .rev()
            .map(|nibble| HEX[((hash >> (4 * nibble)) & 0xf) as usize]),
    );
    text.extend_from_slice(suffix.as_bytes());
    text.push(b'"');
    HeaderValue::from_maybe_shared(Bytes::from(text))
        .expect("hex digits and a coding's suffix are a valid header value")
}

impl CachedBody {
    /// Wraps a body, hashing it once for its validator (a compressed copy's is
    /// quoted from the same hash when the copy is made).
    pub fn new(
        body: Bytes,
        status: u16,
        fetched_at: DateTime<Utc>,
        rule: Rule,
        lifetimes: Lifetimes,
        generation: u64,
    ) -> CachedBody {
        let hash = twox_hash::XxHash3_64::oneshot(&body);
        CachedBody::hashed(body, hash, status, fetched_at, rule, lifetimes, generation)
    }

    /// [`CachedBody::new`] for a body whose xxh3 is known (read back and checked by
    /// the disk tier): not hashed again.
    pub fn hashed(
        body: Bytes,
        hash: u64,
        status: u16,
        fetched_at: DateTime<Utc>,
        rule: Rule,
        lifetimes: Lifetimes,
        generation: u64,
    ) -> CachedBody {
        let keep_for = (lifetimes.error_until - fetched_at)
            .to_std()
            .unwrap_or(Duration::ZERO)
            // Room for a clock that runs ahead of moka's, and for a refresh to land.
            + Duration::from_secs(60);
        let copies = (body.len() >= MIN_BYTES).then(Copies::boxed);
        CachedBody {
            body,
            status,
            fetched_at,
            rule,
            lifetimes,
            generation,
            etag: quoted_hex(hash, ""),
            copies,
            keep_for,
            shared: false,
            disk: false,
        }
    }

    /// The xxh3 of the body, as the ETag quotes it (`"<16 hex digits>"`; read back
    /// rather than kept: the entry stays as small as before).
    pub fn hash(&self) -> u64 {
        let quoted = self.etag.as_bytes();
        std::str::from_utf8(&quoted[1..quoted.len() - 1])
            .ok()
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .expect("the ETag is made from the hash")
    }

    /// Takes a representation in `coding` made before (read back from disk),
    /// unless one is already there or the body is too small to be served
    /// compressed.
    pub fn set_encoded(&mut self, coding: Coding, bytes: Bytes) {
        let made = self.made(coding, Some(bytes));
        if let Some(copies) = &self.copies {
            let _ = copies.encoded[coding.index()].set(made);
        }
    }

    /// Its lifetimes under `policy`: as stored when it was filled under the policy's
    /// generation, recomputed from its rule and fetch time after a reload (so new
    /// TTLs also apply to answers already cached).
    pub fn lifetimes_under(&self, policy: &Policy) -> Lifetimes {
        if self.generation == policy.generation() {
            self.lifetimes
        } else {
            policy.lifetimes(self.rule, self.fetched_at)
        }
    }

    /// Whether it may stand in for the upstream's failure at `now` under `policy`:
    /// a 200 within its stale-if-error window (a cached "not found" never does).
    pub fn may_stand_in(&self, policy: &Policy, now: DateTime<Utc>) -> bool {
        self.status == 200
            && self
                .lifetimes_under(policy)
                .decide(now)
                .is_usable_on_error()
    }

    /// Whether it is fresh at `now` under `policy`.
    pub fn is_fresh_under(&self, policy: &Policy, now: DateTime<Utc>) -> bool {
        self.lifetimes_under(policy).decide(now) == crate::cache::freshness::Freshness::Fresh
    }

    /// Whether the body is large enough to be compressed ([`MIN_BYTES`]).
    pub fn is_compressible(&self) -> bool {
        self.body.len() >= MIN_BYTES
    }

    /// The representation in `coding`, compressed on first call (on the calling
    /// thread: the blocking pool's, see `cache::compress`) and kept; `None` when the
    /// body is too small to gain from it (or the compressor failed).
    pub fn encoded(&self, coding: Coding) -> Option<&Bytes> {
        self.make(coding);
        self.encoded_now(coding)
    }

    /// Makes the representation in `coding` unless it is made (on the calling
    /// thread, as [`encoded`](Self::encoded)); whether this call made it (of two
    /// calls at once, one did).
    pub fn make(&self, coding: Coding) -> bool {
        let mut made = false;
        if let Some(copies) = &self.copies {
            copies.encoded[coding.index()].get_or_init(|| {
                made = true;
                self.made(coding, coding.compress(&self.body))
            });
            // The copy at the chosen level replaces a quick one.
            let mut quick = copies.quick();
            if quick.as_ref().is_some_and(|q| q.coding == coding) {
                *quick = None;
            }
        }
        made
    }

    /// Makes a copy in `coding` at its quick level, on the calling thread (the
    /// blocking pool's), unless the body is too small or a copy in `coding` is made
    /// (at either level); whether this call made it. One quick copy per entry: it is
    /// for the client whose request started the fill.
    pub fn make_quick(&self, coding: Coding) -> bool {
        let Some(copies) = &self.copies else {
            return false;
        };
        if self.encoded_now(coding).is_some() || self.has_quick(coding) {
            return false;
        }
        let Some(bytes) = coding.compress_quick(&self.body) else {
            return false;
        };
        let etag = quoted_hex(self.hash(), coding.quick_etag_suffix());
        let mut quick = copies.quick();
        if quick.is_some() || self.encoded_now(coding).is_some() {
            return false;
        }
        *quick = Some(Box::new(Quick {
            coding,
            bytes,
            etag,
        }));
        true
    }

    /// Claims the background compression of `coding` for the caller: true for the
    /// first claim of the entry's life, false after it (and always for a body too
    /// small to compress).
    pub fn claim_making(&self, coding: Coding) -> bool {
        let bit = 1 << coding.index();
        self.copies
            .as_ref()
            .is_some_and(|copies| copies.started.fetch_or(bit, Ordering::Relaxed) & bit == 0)
    }

    /// Whether the copy in `coding` held is a quick one.
    pub fn has_quick(&self, coding: Coding) -> bool {
        self.with_quick(|q| q.coding == coding).unwrap_or(false)
    }

    /// The copy in `coding` a response carries, with its validator: the one at the
    /// chosen level, else a quick one; `None` when neither is made.
    pub fn copy(&self, coding: Coding) -> Option<(Bytes, HeaderValue)> {
        let copies = self.copies.as_ref()?;
        if let Some(Some(made)) = copies.encoded[coding.index()].get() {
            return Some((made.bytes.clone(), made.etag.clone()));
        }
        let quick = copies.quick();
        let quick = quick.as_ref().filter(|q| q.coding == coding)?;
        Some((quick.bytes.clone(), quick.etag.clone()))
    }

    /// `f` of the quick copy held, if any.
    fn with_quick<T>(&self, f: impl FnOnce(&Quick) -> T) -> Option<T> {
        self.copies.as_ref()?.quick().as_deref().map(f)
    }

    /// The representation in `coding` if it is made already (never compresses).
    pub fn encoded_now(&self, coding: Coding) -> Option<&Bytes> {
        self.copies.as_ref()?.encoded[coding.index()]
            .get()?
            .as_ref()
            .map(|made| &made.bytes)
    }

    /// A copy in `coding` with its validator (`"<hash>-gz"`, `-br`, `-zst`), quoted
    /// when the copy is made: most entries never have one, and a fill makes no
    /// header value it may never send.
    fn made(&self, coding: Coding, bytes: Option<Bytes>) -> Option<Encoded> {
        bytes.map(|bytes| Encoded {
            etag: quoted_hex(self.hash(), coding.etag_suffix()),
            bytes,
        })
    }

    /// How many compressed representations are made (they are only ever added).
    pub fn copies_made(&self) -> usize {
        Coding::ALL
            .into_iter()
            .filter(|&c| self.encoded_now(c).is_some())
            .count()
    }

    /// Bytes of the body and of the compressed representations held (a quick one
    /// too).
    pub fn bytes_held(&self) -> u64 {
        self.settled_bytes() + self.quick_bytes()
    }

    /// Bytes of the body and of the copies at the chosen levels: what it holds
    /// once a quick copy is let go, and what a disk record of it carries.
    pub fn settled_bytes(&self) -> u64 {
        let copies: u64 = Coding::ALL
            .into_iter()
            .filter_map(|c| self.encoded_now(c))
            .map(|b| b.len() as u64)
            .sum();
        self.body.len() as u64 + copies
    }

    fn quick_bytes(&self) -> u64 {
        self.with_quick(|q| q.bytes.len() as u64).unwrap_or(0)
    }

    /// What a quick copy weighs while it is held: its bytes and its bookkeeping.
    fn quick_weight(&self) -> u64 {
        self.with_quick(|q| q.bytes.len() as u64 + QUICK_OVERHEAD)
            .unwrap_or(0)
    }

    /// Makes every compressed representation now, on the calling thread (tests and
    /// measurements; a fill makes only the codings clients ask for, on the blocking
    /// pool: `cache::compress`).
    pub fn encode_all(&self) {
        for coding in Coding::ALL {
            let _ = self.encoded(coding);
        }
    }
}

/// An entry's compressed representations.
#[derive(Debug)]
struct Copies {
    /// By [`Coding::index`]: each one's bytes and validator, made once per entry
    /// when clients ask for that coding (see `cache::compress`; `None` inside: the
    /// compressor failed).
    encoded: [OnceLock<Option<Encoded>>; 3],
    /// A copy at its coding's quick level, made for the client that waited on the
    /// fill (`cache::compress`), until the copy at the chosen level replaces it.
    quick: Mutex<Option<Box<Quick>>>,
    /// By [`Coding::index`], a bit: a background compression was started for
    /// that coding (`Compressor::start`), so requests that find the copy missing
    /// meanwhile start no other.
    started: AtomicU8,
}

impl Copies {
    fn boxed() -> Box<Copies> {
        Box::new(Copies {
            encoded: Default::default(),
            quick: Mutex::new(None),
            started: AtomicU8::new(0),
        })
    }

    fn quick(&self) -> MutexGuard<'_, Option<Box<Quick>>> {
        self.quick.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One compressed representation at its coding's chosen level.
#[derive(Debug)]
struct Encoded {
    bytes: Bytes,
    /// Its strong validator (`"<hash>-gz"`, `-br`, `-zst`).
    etag: HeaderValue,
}

/// A copy at its coding's quick level (`Coding::compress_quick`).
#[derive(Debug)]
struct Quick {
    coding: Coding,
    bytes: Bytes,
    /// Its strong validator (`"<hash>-gz1"`, `-br1`, `-zst1`).
    etag: HeaderValue,
}

/// Bookkeeping bytes counted per entry beside body and key (the `CachedBody`, its
/// ETag header value, the `Arc`, moka's node and the key's copy in its index):
/// an estimate that keeps many tiny entries from escaping the bound.
pub const ENTRY_OVERHEAD: u64 = 640;

/// Bookkeeping bytes of the compressed copies' slots, held by an entry whose body
/// is large enough to be compressed.
pub const COPIES_OVERHEAD: u64 = std::mem::size_of::<Copies>() as u64;

/// Bookkeeping bytes of a quick copy beside its bytes, while it is held: its box,
/// its validator's text and the bytes' shared header (an estimate).
pub const QUICK_OVERHEAD: u64 = 128;

/// What an entry holds in memory: key, body, the compressed representations made
/// so far, bookkeeping. One made later (for a request, in the background) has the
/// store weigh the entry again (`Cache::make_soon`).
pub fn weight(key: &str, value: &CachedBody) -> u64 {
    settled_weight(key, value) + value.quick_weight()
}

/// [`weight`] without a quick copy, which gives way to a smaller one: what decides
/// whether an answer is small enough to keep (a quick gzip copy is half again the
/// size of the chosen level's, and must not keep out an answer that fits).
pub fn settled_weight(key: &str, value: &CachedBody) -> u64 {
    let copies = if value.copies.is_some() {
        COPIES_OVERHEAD
    } else {
        0
    };
    key.len() as u64 + value.settled_bytes() + ENTRY_OVERHEAD + copies
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ETag written by hand is the formatted one: every digit, any suffix.
    #[test]
    fn the_etag_is_the_hash_in_sixteen_hex_digits() {
        for hash in [0, 1, 0xdead_beef, u64::MAX, 0x0123_4567_89ab_cdef] {
            for suffix in ["", "-gzip", "-br", "-zstd"] {
                let formatted = format!("\"{hash:016x}{suffix}\"");
                assert_eq!(quoted_hex(hash, suffix), formatted.as_str());
            }
        }
    }

    /// A body too small to compress (a "not found", a short page) holds no slots
    /// for copies and weighs that much less, even given a copy read back from disk;
    /// a large body has its slots from the start.
    #[test]
    fn only_a_body_that_can_be_compressed_holds_slots_for_copies() {
        let small = crate::cache::store::tests::body("{\"success\":false}");
        assert!(small.copies.is_none());
        assert!(!small.claim_making(Coding::Gzip), "nothing to make");
        assert!(!small.make(Coding::Gzip) && !small.make_quick(Coding::Gzip));
        assert_eq!(small.copy(Coding::Gzip), None);
        assert_eq!(
            settled_weight("k", &small),
            1 + small.body.len() as u64 + ENTRY_OVERHEAD
        );

        let mut from_disk = crate::cache::store::tests::body("{\"success\":false}");
        from_disk.set_encoded(Coding::Zstd, Bytes::from_static(b"zstd bytes"));
        assert!(from_disk.copies.is_none() && from_disk.copy(Coding::Zstd).is_none());

        let large: &'static str = "x".repeat(MIN_BYTES).leak();
        let large = crate::cache::store::tests::body(large);
        assert!(large.copies.is_some());
        assert!(large.claim_making(Coding::Gzip) && !large.claim_making(Coding::Gzip));
        assert_eq!(
            settled_weight("k", &large),
            1 + MIN_BYTES as u64 + ENTRY_OVERHEAD + COPIES_OVERHEAD
        );
    }
}
