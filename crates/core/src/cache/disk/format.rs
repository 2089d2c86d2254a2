//! One answer as the disk tier stores it: a self-describing, checked record (format
//! tag, catalogue fingerprint, status, fetch and store times, rule, key, a table of
//! representations with their lengths and hashes, a header checksum) followed by the
//! representations' bytes. Decoding checks everything and says why it refuses; the
//! engine under it (foyer) only moves the bytes.

use std::sync::OnceLock;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use twox_hash::XxHash3_64;

use crate::cache::encoding::Coding;
use crate::cache::entry::CachedBody;
use crate::cache::freshness::{Policy, Rule};
use mdproxy_api::catalog::{FreshnessClass, catalog};
use mdproxy_market::Venue;

/// Format tag: bumped with any change of the layout below. A new representation is
/// a new [`Kind`] in the table and needs no bump: a reader skips kinds it does not
/// know.
pub const MAGIC: &[u8; 4] = b"MDD1";

/// The fixed part of the header: magic, header length u32, catalogue fingerprint
/// u64, status u16, fetched_at ms i64, stored_at µs i64, endpoint id u16, class u8,
/// flags u8, settling date i32, key length u16, representation count u8.
const FIXED: usize = 4 + 4 + 8 + 2 + 8 + 8 + 2 + 1 + 1 + 4 + 2 + 1;
/// One row of the representation table: kind u8, length u32, xxh3 u64.
const ROW: usize = 1 + 4 + 8;
/// The header's own checksum (xxh3 of everything before it).
const CHECKSUM: usize = 8;

/// A representation of the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The upstream's bytes as they came (required: its hash is the ETag).
    Identity = 0,
    /// Their gzip encoding (each compressed kind is stored when the entry has it
    /// made, as every fill does; a reader skips a kind it does not know).
    Gzip = 1,
    /// Their brotli encoding.
    Brotli = 2,
    /// Their zstd encoding.
    Zstd = 3,
}

impl Kind {
    /// The kind of a compressed representation.
    fn of(coding: Coding) -> Kind {
        match coding {
            Coding::Gzip => Kind::Gzip,
            Coding::Brotli => Kind::Brotli,
            Coding::Zstd => Kind::Zstd,
        }
    }

    /// The coding of a stored kind (`None`: the identity, or one this version
    /// does not know).
    fn coding(tag: u8) -> Option<Coding> {
        Coding::ALL.into_iter().find(|&c| Kind::of(c) as u8 == tag)
    }
}

/// Why a stored record is not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its bytes do not match their checksums.
    Corrupt,
    /// Shorter than its header says.
    Truncated,
    /// Another format version or another catalogue wrote it.
    Foreign,
}

impl Refused {
    /// Stable label (metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Corrupt => "corrupt",
            Refused::Truncated => "truncated",
            Refused::Foreign => "foreign",
        }
    }
}

/// The catalogue's fingerprint: endpoint ids and class indexes are stored as
/// numbers, so a record written under another catalogue is foreign.
fn fingerprint() -> u64 {
    static PRINT: OnceLock<u64> = OnceLock::new();
    *PRINT.get_or_init(|| {
        let mut text = String::new();
        for e in catalog().with_passthrough() {
            text.push_str(&e.path);
            text.push('\n');
        }
        for class in FreshnessClass::ALL {
            text.push_str(class.as_str());
            text.push('\n');
        }
        XxHash3_64::oneshot(text.as_bytes())
    })
}

/// The rule's flags byte: bit 0 expires at the next open, bit 1 a "not found",
/// bits 2-3 the venue (by [`Venue::ALL`]; records older than venues read China).
fn flags(rule: &Rule) -> u8 {
    let venue = Venue::ALL
        .iter()
        .position(|&v| v == rule.venue)
        .unwrap_or(0) as u8;
    u8::from(rule.until_open) | u8::from(rule.negative) << 1 | venue << 2
}

/// The record of `entry` under `key`, stored at `stored_at_us` (wall-clock
/// microseconds: purge rules compare against it), no longer than `room` where the
/// body allows: the compressed copies made go along (in [`Coding::ALL`] order)
/// while they fit; one left out is made again on first demand. A fill makes only
/// the codings clients ask for (`cache::compress`), so a record carries what its
/// readers will want: a browser's disk hit is served its copy with no compression
/// (a K-line's costs 3 to 9 ms of CPU to make), for about a third more disk.
pub fn encode(key: &str, entry: &CachedBody, stored_at_us: i64, room: usize) -> Bytes {
    let key = &key.as_bytes()[..key.len().min(usize::from(u16::MAX))];
    let mut reps: Vec<(Kind, &Bytes)> = vec![(Kind::Identity, &entry.body)];
    let mut len = FIXED + key.len() + ROW + CHECKSUM + entry.body.len();
    for coding in Coding::ALL {
        if let Some(bytes) = entry.encoded_now(coding)
            && len + ROW + bytes.len() <= room
        {
            len += ROW + bytes.len();
            reps.push((Kind::of(coding), bytes));
        }
    }
    let header_len = FIXED + key.len() + ROW * reps.len() + CHECKSUM;
    let body_len: usize = reps.iter().map(|(_, b)| b.len()).sum();
    let mut out = BytesMut::with_capacity(header_len + body_len);
    out.put_slice(MAGIC);
    out.put_u32(header_len as u32);
    out.put_u64(fingerprint());
    out.put_u16(entry.status);
    out.put_i64(entry.fetched_at.timestamp_millis());
    out.put_i64(stored_at_us);
    out.put_u16(entry.rule.endpoint_id as u16);
    out.put_u8(entry.rule.class.index() as u8);
    out.put_u8(flags(&entry.rule));
    out.put_i32(entry.rule.settles.map_or(0, |d| d.num_days_from_ce()));
    out.put_u16(key.len() as u16);
    out.put_u8(reps.len() as u8);
    out.put_slice(key);
    for (kind, bytes) in &reps {
        out.put_u8(*kind as u8);
        out.put_u32(bytes.len() as u32);
        out.put_u64(if *kind == Kind::Identity {
            entry.hash()
        } else {
            XxHash3_64::oneshot(bytes)
        });
    }
    let sum = XxHash3_64::oneshot(&out);
    out.put_u64(sum);
    for (_, bytes) in &reps {
        out.put_slice(bytes);
    }
    out.freeze()
}

/// A record read back: the entry (lifetimes under `policy`, marked as read from
/// disk) and when it was stored.
pub struct Decoded {
    pub entry: CachedBody,
    pub stored_at_us: i64,
}

/// How much of a record [`decode`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Everything: the header's checksum and every representation's hash.
    Full,
    /// The header's checksum, lengths and key: for a record that never left memory
    /// (still in the engine's write buffer), whose bytes are the ones encoded.
    Header,
}

/// Reads a record stored under `key`, checking its tag, catalogue, header
/// checksum, lengths and key, and (with [`Check::Full`]) its bodies' hashes.
///
/// # Errors
/// Why the record must not be served.
pub fn decode(
    record: &Bytes,
    key: &str,
    policy: &Policy,
    check: Check,
) -> Result<Decoded, Refused> {
    if record.len() < 4 {
        return Err(Refused::Truncated);
    }
    if &record[..4] != MAGIC {
        return Err(Refused::Foreign);
    }
    if record.len() < FIXED + CHECKSUM {
        return Err(Refused::Truncated);
    }
    let mut h = &record[4..FIXED];
    let header_len = h.get_u32() as usize;
    if header_len < FIXED + CHECKSUM {
        return Err(Refused::Corrupt);
    }
    if record.len() < header_len {
        return Err(Refused::Truncated);
    }
    let (header, sum) = record[..header_len].split_at(header_len - CHECKSUM);
    if XxHash3_64::oneshot(header)
        != u64::from_be_bytes(sum.try_into().map_err(|_| Refused::Corrupt)?)
    {
        return Err(Refused::Corrupt);
    }
    if h.get_u64() != fingerprint() {
        return Err(Refused::Foreign);
    }
    let status = h.get_u16();
    let fetched_ms = h.get_i64();
    let stored_at_us = h.get_i64();
    let endpoint_id = usize::from(h.get_u16());
    let class = h.get_u8();
    let flags = h.get_u8();
    let settles = h.get_i32();
    let key_len = usize::from(h.get_u16());
    let count = usize::from(h.get_u8());
    if header_len != FIXED + key_len + ROW * count + CHECKSUM {
        return Err(Refused::Corrupt);
    }
    let mut rest = &header[FIXED..];
    if &rest[..key_len] != key.as_bytes() {
        // The engine found another key's record under this one's hash.
        return Err(Refused::Foreign);
    }
    rest = &rest[key_len..];
    let class = *FreshnessClass::ALL
        .get(usize::from(class))
        .ok_or(Refused::Foreign)?;
    if endpoint_id >= catalog().with_passthrough().count() {
        return Err(Refused::Foreign);
    }
    let settles = match settles {
        0 => None,
        days => Some(NaiveDate::from_num_days_from_ce_opt(days).ok_or(Refused::Corrupt)?),
    };
    let fetched_at = DateTime::<Utc>::from_timestamp_millis(fetched_ms).ok_or(Refused::Corrupt)?;
    let mut at = header_len;
    let mut identity = None;
    let mut encoded = Vec::new();
    for _ in 0..count {
        let kind = rest.get_u8();
        let len = rest.get_u32() as usize;
        let hash = rest.get_u64();
        let bytes = record.get(at..at + len).ok_or(Refused::Truncated)?;
        if check == Check::Full && XxHash3_64::oneshot(bytes) != hash {
            return Err(Refused::Corrupt);
        }
        let bytes = record.slice(at..at + len);
        at += len;
        match kind {
            0 => identity = Some((bytes, hash)),
            // A representation a later version added: skipped.
            tag => encoded.extend(Kind::coding(tag).map(|c| (c, bytes))),
        }
    }
    if at != record.len() {
        return Err(Refused::Corrupt);
    }
    let (body, hash) = identity.ok_or(Refused::Corrupt)?;
    let rule = Rule {
        endpoint_id,
        class,
        until_open: flags & 1 != 0,
        negative: flags & 2 != 0,
        settles,
        venue: *Venue::ALL
            .get(usize::from(flags >> 2 & 3))
            .ok_or(Refused::Corrupt)?,
    };
    let lifetimes = policy.lifetimes(rule, fetched_at);
    let mut entry = CachedBody::hashed(
        body,
        hash,
        status,
        fetched_at,
        rule,
        lifetimes,
        policy.generation(),
    );
    for (coding, bytes) in encoded {
        entry.set_encoded(coding, bytes);
    }
    entry.disk = true;
    Ok(Decoded {
        entry,
        stored_at_us,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mdproxy_config::Config;

    /// A final K-line of `body`, fetched 2026-03-03, and the default policy.
    pub(crate) fn entry(body: &'static str) -> (CachedBody, Policy) {
        let policy = Policy::new(&Config::default(), 0);
        let kline = catalog().by_path("/stock/kline").unwrap();
        let rule = Rule {
            endpoint_id: kline.id,
            class: kline.class,
            until_open: false,
            negative: false,
            settles: NaiveDate::from_ymd_opt(2026, 3, 3),
            venue: Venue::China,
        };
        let at = DateTime::<Utc>::from_timestamp_millis(1_772_500_000_123).unwrap();
        let lifetimes = policy.lifetimes(rule, at);
        (
            CachedBody::new(
                Bytes::from_static(body.as_bytes()),
                200,
                at,
                rule,
                lifetimes,
                0,
            ),
            policy,
        )
    }

    #[test]
    fn a_record_reads_back_as_it_was_written() {
        let (e, policy) = entry("{\"success\":true,\"data\":[1,2,3]}");
        let record = encode("/stock/kline?code=600519", &e, 42, usize::MAX);
        let d = decode(&record, "/stock/kline?code=600519", &policy, Check::Full).unwrap();
        assert_eq!(d.stored_at_us, 42);
        assert_eq!(d.entry.body, e.body);
        assert_eq!(d.entry.etag, e.etag);
        assert_eq!(d.entry.fetched_at, e.fetched_at);
        assert_eq!(d.entry.rule, e.rule);
        assert_eq!(d.entry.lifetimes, e.lifetimes);
        assert!(d.entry.disk);
    }

    /// Every flipped byte, every cut and another key are refused, never served.
    #[test]
    fn damaged_short_and_foreign_records_are_refused() {
        let (e, policy) = entry("{\"success\":true,\"data\":[1,2,3]}");
        let key = "/stock/kline?code=600519";
        let record = encode(key, &e, 42, usize::MAX);
        for i in 0..record.len() {
            let mut bad = record.to_vec();
            bad[i] ^= 0x20;
            assert!(
                decode(&Bytes::from(bad), key, &policy, Check::Full).is_err(),
                "byte {i} flipped"
            );
        }
        for len in 0..record.len() {
            assert!(
                decode(&record.slice(..len), key, &policy, Check::Header).is_err(),
                "cut at {len}"
            );
        }
        assert_eq!(
            decode(&record, "/stock/kline?code=600518", &policy, Check::Full).err(),
            Some(Refused::Foreign)
        );
        let mut other = record.to_vec();
        other[3] = b'9';
        assert_eq!(
            decode(&Bytes::from(other), key, &policy, Check::Full).err(),
            Some(Refused::Foreign)
        );
    }

    #[test]
    fn every_compressed_copy_travels_with_the_body() {
        let text: &'static str = Box::leak("{\"a\":1}".repeat(400).into_boxed_str());
        let (e, policy) = entry(text);
        e.encode_all();
        let record = encode("k", &e, 1, usize::MAX);
        let d = decode(&record, "k", &policy, Check::Full).unwrap();
        for coding in Coding::ALL {
            assert!(e.encoded_now(coding).is_some(), "{coding:?}");
            assert_eq!(
                d.entry.encoded_now(coding),
                e.encoded_now(coding),
                "{coding:?}"
            );
        }
    }

    #[test]
    fn the_venue_travels_with_the_rule() {
        let (mut e, policy) = entry("{}");
        for venue in Venue::ALL {
            e.rule.venue = venue;
            let record = encode("k", &e, 1, usize::MAX);
            let d = decode(&record, "k", &policy, Check::Full).unwrap();
            assert_eq!(d.entry.rule, e.rule);
        }
    }

    #[test]
    fn a_large_body_carries_the_copies_made() {
        let text: &'static str = Box::leak("{\"a\":1}".repeat(100_000).into_boxed_str());
        let (e, policy) = entry(text);
        let _ = e.encoded(Coding::Zstd);
        let d = decode(&encode("k", &e, 1, usize::MAX), "k", &policy, Check::Full).unwrap();
        assert_eq!(d.entry.body, e.body);
        assert_eq!(
            d.entry.encoded_now(Coding::Zstd),
            e.encoded_now(Coding::Zstd)
        );
        assert!(d.entry.encoded_now(Coding::Gzip).is_none());
        assert!(d.entry.encoded_now(Coding::Brotli).is_none());
    }

    #[test]
    fn copies_that_do_not_fit_stay_behind() {
        let text: &'static str = Box::leak("{\"a\":1}".repeat(400).into_boxed_str());
        let (e, policy) = entry(text);
        e.encode_all();
        let whole = encode("k", &e, 1, usize::MAX).len();
        let room = whole - e.encoded_now(Coding::Zstd).unwrap().len();
        let record = encode("k", &e, 1, room);
        assert!(record.len() <= room);
        let d = decode(&record, "k", &policy, Check::Full).unwrap();
        assert!(d.entry.encoded_now(Coding::Gzip).is_some());
        assert!(d.entry.encoded_now(Coding::Zstd).is_none());
        // No room for any copy: the body alone, still served.
        let copies: usize = Coding::ALL
            .iter()
            .map(|&c| ROW + e.encoded_now(c).unwrap().len())
            .sum();
        let bare = encode("k", &e, 1, whole - copies);
        assert_eq!(bare.len(), whole - copies);
        let d = decode(&bare, "k", &policy, Check::Full).unwrap();
        assert_eq!(d.entry.body, e.body);
        assert!(
            Coding::ALL
                .iter()
                .all(|&c| d.entry.encoded_now(c).is_none())
        );
    }

    /// What reads bytes from the disk, fuzzed: whatever the engine hands back, the
    /// decoder never panics, and a record is served only when every check passes
    /// (`PROPTEST_CASES` sets how many inputs; scripts/test runs many).
    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        /// A record of `body` under `key`, as the tier writes it.
        fn record(key: &str, body: &[u8], stored_at_us: i64) -> (Bytes, Policy) {
            let (mut e, policy) = entry("");
            e = CachedBody::new(
                Bytes::copy_from_slice(body),
                200,
                e.fetched_at,
                e.rule,
                e.lifetimes,
                0,
            );
            (encode(key, &e, stored_at_us, usize::MAX), policy)
        }

        proptest! {
            /// Any bytes at all are refused or read; nothing panics.
            #[test]
            fn any_bytes_are_refused_or_read(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
                let (_, policy) = entry("");
                for check in [Check::Full, Check::Header] {
                    let _ = decode(&Bytes::from(bytes.clone()), "k", &policy, check);
                }
            }

            /// A valid record's header followed by any bytes: still no panic.
            #[test]
            fn a_valid_header_over_any_tail_is_refused_or_read(
                body in proptest::collection::vec(any::<u8>(), 0..200),
                tail in proptest::collection::vec(any::<u8>(), 0..64),
                cut in any::<proptest::sample::Index>(),
            ) {
                let (whole, policy) = record("k", &body, 7);
                let mut bytes = whole[..cut.index(whole.len() + 1)].to_vec();
                bytes.extend_from_slice(&tail);
                let _ = decode(&Bytes::from(bytes), "k", &policy, Check::Header);
            }

            /// Any record reads back as it was written, under its own key only.
            #[test]
            fn a_record_reads_back_under_its_key(
                key in "[ -~]{0,80}",
                body in proptest::collection::vec(any::<u8>(), 0..300),
                stored_at_us in any::<i64>(),
            ) {
                let (whole, policy) = record(&key, &body, stored_at_us);
                let read = decode(&whole, &key, &policy, Check::Full).unwrap();
                prop_assert_eq!(&read.entry.body[..], &body[..]);
                prop_assert_eq!(read.stored_at_us, stored_at_us);
                let other = format!("{key}x");
                prop_assert!(decode(&whole, &other, &policy, Check::Full).is_err());
            }

            /// One byte changed to any other value, anywhere: never served with every
            /// check on (the engine's own checksum covers the bodies in the other mode).
            #[test]
            fn a_changed_byte_is_never_served(
                body in proptest::collection::vec(any::<u8>(), 1..300),
                at in any::<proptest::sample::Index>(),
                xor in 1..=255u8,
            ) {
                let (whole, policy) = record("k", &body, 7);
                let mut bad = whole.to_vec();
                bad[at.index(whole.len())] ^= xor;
                prop_assert!(decode(&Bytes::from(bad), "k", &policy, Check::Full).is_err());
            }
        }
    }
}
