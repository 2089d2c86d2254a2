//! The cluster's share of a fill: an answer in the shared store (another node's
//! fill, or this node's before a restart) is used before the upstream is asked, and
//! one node per key asks the upstream while the others wait for its publication.
//! Also the entry's format in Redis: a fixed header (status, fetch time, rule) and
//! the body as it came; lifetimes are recomputed by the reader's policy, from a
//! fetch time never later than the reader's clock. Knows the other nodes only
//! through the store and lock traits (a single node shares nothing).

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, Datelike, NaiveDate, Utc};

use crate::cache::entry::CachedBody;
use crate::cache::freshness::{Lifetimes, Policy, Rule};
use mdproxy_api::catalog::{FreshnessClass, catalog};
use mdproxy_fleet::{FillLock, Lease, SharedStore};
use mdproxy_market::Venue;

/// Format tag of a stored entry, bumped with any change of the layout below or of
/// the catalogue's ids and classes (MDE2: 93 endpoints, 11 classes, settling).
const MAGIC: &[u8; 4] = b"MDE2";
/// MAGIC, status u16, fetched_at ms i64, endpoint id u16, class u8, flags u8 (bit 0
/// until the open, bit 1 negative, bits 2-3 the venue: an older node's entries read
/// as China's, as they were), the settling date as days since 0001-01-01 i32 (0:
/// never).
const HEADER: usize = 4 + 2 + 8 + 2 + 1 + 1 + 4;

/// An entry as stored in Redis.
pub fn encode(entry: &CachedBody) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER + entry.body.len());
    out.put_slice(MAGIC);
    out.put_u16(entry.status);
    out.put_i64(entry.fetched_at.timestamp_millis());
    out.put_u16(entry.rule.endpoint_id as u16);
    out.put_u8(entry.rule.class.index() as u8);
    let venue = Venue::ALL
        .iter()
        .position(|v| *v == entry.rule.venue)
        .expect("every venue is in ALL") as u8;
    out.put_u8(
        u8::from(entry.rule.until_open) | (u8::from(entry.rule.negative) << 1) | (venue << 2),
    );
    out.put_i32(entry.rule.settles.map_or(0, |d| d.num_days_from_ce()));
    out.put_slice(&entry.body);
    out.freeze()
}

/// An entry read from Redis, its lifetimes computed under `policy` at `now`;
/// `None` for bytes of another format (a node of another version wrote them). A
/// fetch time after `now` (another node's clock runs ahead, or bytes nobody should
/// trust) is taken as `now`: an entry is never fresher than one fetched this
/// instant.
pub fn decode(stored: Bytes, policy: &Policy, now: DateTime<Utc>) -> Option<CachedBody> {
    let header = stored.get(..HEADER)?;
    if &header[..4] != MAGIC {
        return None;
    }
    let status = u16::from_be_bytes([header[4], header[5]]);
    let millis = i64::from_be_bytes(header[6..14].try_into().ok()?);
    let endpoint_id = usize::from(u16::from_be_bytes([header[14], header[15]]));
    if endpoint_id >= catalog().with_passthrough().count() {
        return None;
    }
    let class = *FreshnessClass::ALL.get(usize::from(header[16]))?;
    let settles = match i32::from_be_bytes(header[18..22].try_into().ok()?) {
        0 => None,
        days => Some(NaiveDate::from_num_days_from_ce_opt(days)?),
    };
    let rule = Rule {
        endpoint_id,
        class,
        until_open: header[17] & 1 != 0,
        negative: header[17] & 2 != 0,
        settles,
        venue: *Venue::ALL.get(usize::from((header[17] >> 2) & 3))?,
    };
    let fetched_at = DateTime::<Utc>::from_timestamp_millis(millis)?.min(now);
    let lifetimes = policy.lifetimes(rule, fetched_at);
    let mut entry = CachedBody::new(
        stored.slice(HEADER..),
        status,
        fetched_at,
        rule,
        lifetimes,
        policy.generation(),
    );
    entry.shared = true;
    Some(entry)
}

/// What stands in for a failed fill of `key`: `own`, this node's answer, or else
/// a stale answer of the shared store, a `200` still within its stale-if-error
/// time at `now`. A failing upstream never loses an answer the fleet holds when
/// this node has none (it restarted, or evicted its copy). `None` when neither
/// has one (or Redis is away); the look is bounded by `cluster.timeout_ms`.
pub async fn stand_in(
    own: Option<(Arc<CachedBody>, Lifetimes)>,
    store: &dyn SharedStore,
    key: &str,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Option<(Arc<CachedBody>, Lifetimes)> {
    if own.is_some() || !store.is_up() {
        return own;
    }
    let entry = decode(store.get(key).await.ok()??, policy, now)?;
    let lifetimes = entry.lifetimes_under(policy);
    entry
        .may_stand_in(policy, now)
        .then(|| (Arc::new(entry), lifetimes))
}

/// What the cluster says about a key this node is about to fill.
pub enum Share {
    /// A fresh answer from the shared store: no upstream request.
    Found(CachedBody),
    /// This node asks the upstream, holding the cluster's lease when it got one
    /// (without one, Redis is away or another node's fill never came); `found`:
    /// the store held an answer that may stand in for a failure (a stale 200).
    Fetch { lease: Option<Lease>, found: bool },
}

/// Looks in the shared store, then takes the fill lease or waits (up to `lease`)
/// for the node that holds it. `now` is the reader's clock; `fresh` tells whether
/// a stored answer will do.
pub async fn before_fill(
    (store, lock): (&dyn SharedStore, &dyn FillLock),
    key: &str,
    policy: &Arc<Policy>,
    lease: Duration,
    now: impl Fn() -> DateTime<Utc>,
    fresh: impl Fn(&CachedBody) -> bool,
) -> Share {
    let read = |stored: Option<Bytes>| stored.and_then(|bytes| decode(bytes, policy, now()));
    let found = |stored: Option<Bytes>| read(stored).filter(|entry| fresh(entry));
    // Registered before the first look: a fill announced after it wakes this
    // waiter, and one announced before it is already in the store.
    let waiter = lock.waiter(key);
    let standing = match store.get(key).await {
        Ok(stored) => match read(stored) {
            Some(entry) if fresh(&entry) => return Share::Found(entry),
            entry => entry.is_some_and(|e| e.may_stand_in(policy, now())),
        },
        Err(_) => {
            return Share::Fetch {
                lease: None,
                found: false,
            };
        }
    };
    let fetch = |lease| Share::Fetch {
        lease,
        found: standing,
    };
    // Another node is asking the upstream: its publication wakes us within
    // milliseconds of its fill; a node that died lets the lease run out. After a
    // failed fill the waiters take the lease in turn (one upstream request at a
    // time, not one per node), a few rounds at most.
    for _ in 0..ROUNDS {
        match lock.try_lock(key, lease).await {
            Ok(Some(held)) => return fetch(Some(held)),
            Ok(None) => {}
            Err(_) => return fetch(None),
        }
        waiter.wait(lease).await;
        waiter.rearm();
        let stored = store.get(key).await.ok().flatten();
        if let Some(entry) = found(stored) {
            return Share::Found(entry);
        }
    }
    fetch(None)
}

/// Rounds of "take the lease or wait for its holder" before a node asks the
/// upstream on its own.
const ROUNDS: usize = 3;

/// After this node's fill: stores the answer for the cluster, gives the lease back
/// and announces the fill (a failed one too, so the waiting nodes stop waiting).
pub async fn after_fill(
    (store, lock): (&dyn SharedStore, &dyn FillLock),
    key: &str,
    entry: Option<&CachedBody>,
    lease: Option<Lease>,
) {
    if let Some(entry) = entry {
        store.put(key, encode(entry), entry.keep_for).await;
    }
    // Released before the announcement, so a woken waiter can take it at once.
    if let Some(lease) = lease {
        lock.release(lease).await;
    }
    lock.announce(key).await;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::freshness::Rule;
    use mdproxy_config::Config;

    pub(crate) fn entry(fetched_at: DateTime<Utc>, policy: &Policy) -> CachedBody {
        let rule = Rule {
            endpoint_id: 0,
            class: FreshnessClass::ALL[0],
            until_open: false,
            negative: false,
            settles: None,
            venue: Venue::China,
        };
        let lifetimes = policy.lifetimes(rule, fetched_at);
        CachedBody::new(
            Bytes::from_static(b"{}"),
            200,
            fetched_at,
            rule,
            lifetimes,
            policy.generation(),
        )
    }

    /// An entry goes through the store as it was.
    #[test]
    fn an_entry_survives_the_store() {
        let policy = Policy::new(&Config::default(), 0);
        let now = DateTime::parse_from_rfc3339("2026-03-02T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let stored = entry(now - chrono::Duration::seconds(5), &policy);
        let read = decode(encode(&stored), &policy, now).unwrap();
        assert_eq!(read.fetched_at, stored.fetched_at);
        assert_eq!(read.body, stored.body);
        assert!(read.shared);
        assert!(decode(Bytes::from_static(b"MDE1...."), &policy, now).is_none());
    }

    /// Defect: a shared entry whose fetch time lay in the future (another node's
    /// clock ahead of ours, or bytes nobody should trust) was fresh until that
    /// future plus its lifetime: 73 years of `max-age`. It is read as fetched now.
    #[test]
    fn a_fetch_time_in_the_future_is_read_as_now() {
        let policy = Policy::new(&Config::default(), 0);
        let now = DateTime::parse_from_rfc3339("2026-03-02T03:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let here = entry(now, &policy);
        for ahead in [
            chrono::Duration::seconds(30),
            chrono::Duration::days(365 * 73),
        ] {
            let read = decode(encode(&entry(now + ahead, &policy)), &policy, now).unwrap();
            assert_eq!(read.fetched_at, now, "{ahead}");
            assert_eq!(
                read.lifetimes.fresh_until, here.lifetimes.fresh_until,
                "{ahead}"
            );
        }
    }
}
