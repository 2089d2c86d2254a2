//! One cached answer: the upstream's body as it came, what decided its lifetimes,
//! its validators and its compressed representation, and what it weighs in memory.
//! Whether it is fresh is the policy's decision ([`CachedBody::lifetimes_under`]).

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::HeaderValue;

use crate::cache::freshness::{Lifetimes, Policy, Rule};

/// Bodies shorter than this are not worth compressing (nginx's `gzip_min_length`
/// default is 20; a gzip header and trailer alone are 18 bytes, and small JSON
/// gains little).
pub const GZIP_MIN_BYTES: usize = 1024;

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
    /// Validator of the gzip representation.
    pub etag_gzip: HeaderValue,
    /// The gzip representation, made on first demand, once per entry.
    gzip: OnceLock<Option<Bytes>>,
    /// How long moka may keep it in memory (until its stale-if-error time).
    pub keep_for: Duration,
    /// Read from the cluster's shared store (another node's fill, or this node's
    /// before a restart), not fetched by this node.
    pub shared: bool,
    /// Read from this node's disk tier (so not written back to it).
    pub disk: bool,
}

impl CachedBody {
    /// Wraps a body, computing its validators once.
    pub fn new(
        body: Bytes,
        status: u16,
        fetched_at: DateTime<Utc>,
        rule: Rule,
        lifetimes: Lifetimes,
        generation: u64,
    ) -> CachedBody {
        let hash = xxhash_rust::xxh3::xxh3_64(&body);
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
        let header =
            |s: String| HeaderValue::from_str(&s).expect("hex digits are a valid header value");
        let keep_for = (lifetimes.error_until - fetched_at)
            .to_std()
            .unwrap_or(Duration::ZERO)
            // Room for a clock that runs ahead of moka's, and for a refresh to land.
            + Duration::from_secs(60);
        CachedBody {
            body,
            status,
            fetched_at,
            rule,
            lifetimes,
            generation,
            etag: header(format!("\"{hash:016x}\"")),
            etag_gzip: header(format!("\"{hash:016x}-gz\"")),
            gzip: OnceLock::new(),
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

    /// The gzip representation if it was already made (nothing is compressed).
    pub fn gzip_if_made(&self) -> Option<&Bytes> {
        self.gzip.get().and_then(Option::as_ref)
    }

    /// Takes a gzip representation made before (read back from disk), unless one
    /// is already there.
    pub fn set_gzip(&mut self, gzip: Bytes) {
        let _ = self.gzip.set(Some(gzip));
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

    /// Whether it is fresh at `now` under `policy`.
    pub fn is_fresh_under(&self, policy: &Policy, now: DateTime<Utc>) -> bool {
        self.lifetimes_under(policy).decide(now) == crate::cache::freshness::Freshness::Fresh
    }

    /// The gzip representation, compressed on first call and kept; `None` when the
    /// body is too small to gain from it.
    pub fn gzip(&self) -> Option<&Bytes> {
        if self.body.len() < GZIP_MIN_BYTES {
            return None;
        }
        self.gzip
            .get_or_init(|| {
                use std::io::Write;
                let mut encoder = flate2::write::GzEncoder::new(
                    Vec::with_capacity(self.body.len() / 4),
                    flate2::Compression::default(),
                );
                encoder.write_all(&self.body).ok()?;
                encoder.finish().ok().map(Bytes::from)
            })
            .as_ref()
    }
}

/// Bookkeeping bytes counted per entry beside body and key (the `CachedBody`, its
/// two ETag header values, the `Arc`, moka's node and the key's copy in its index):
/// an estimate that keeps many tiny entries from escaping the bound.
const ENTRY_OVERHEAD: u64 = 512;

/// The gzip copy is made on first demand, after the entry is weighed, so its room
/// is reserved up front: JSON compresses to well under a third of its size.
const GZIP_SHARE: u64 = 3;

/// What an entry holds in memory: key, body, the gzip copy it may get, bookkeeping.
pub fn weight(key: &str, value: &CachedBody) -> u64 {
    let body = value.body.len() as u64;
    let gzip = if value.body.len() >= GZIP_MIN_BYTES {
        body / GZIP_SHARE
    } else {
        0
    };
    key.len() as u64 + body + gzip + ENTRY_OVERHEAD
}
