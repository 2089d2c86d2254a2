//! The compressed representations a cached answer may have beside its identity body
//! (gzip, brotli, zstd): each coding's name, ETag suffix, level (chosen by
//! measurement, docs/BENCHMARKS.md "Compression levels") and compressor. Which one a
//! client gets is the edge's choice (`edge::negotiate`).

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

/// Bodies shorter than this are not compressed (nginx's `gzip_min_length` default
/// is 20; a gzip header and trailer alone are 18 bytes, and small JSON gains little).
pub const MIN_BYTES: usize = 1024;

/// A content coding mdproxy stores beside the identity body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    Gzip,
    Brotli,
    Zstd,
}

// The levels, from `crates/mdproxy/examples/encoding_levels.rs` on our answers (docs/BENCHMARKS.md
// "Compression levels"): a fill makes the codings clients ask for (`cache::compress`),
// and a 657 KB daily K-line is refetched every 15 s in session, so time counts as
// much as size. Our JSON (prices, volumes) compresses to about a third whatever the
// coding; the levels below sit where the next one costs far more time than it saves
// bytes.

/// gzip level (of 1..=9): 4. The daily K-line in 8 ms to 35.3% where 6 takes 14 ms
/// for 34.7%; 1 is 2.6 ms but 54% (zlib-rs).
const GZIP_LEVEL: u32 = 4;

/// brotli quality (of 0..=11): 4. The daily K-line in 12 ms to 34.4%; 6 takes 37 ms
/// for 33.4%, and 11, the smallest (26.9%), takes almost a second.
const BROTLI_QUALITY: u32 = 4;

/// brotli window: 4 MiB (`lgwin` 22, the format's default), more than any body we cache
/// whole at the default `cache.max_bytes`, so every back-reference can reach.
const BROTLI_WINDOW: u32 = 22;

/// zstd level (of 1..=22): 6. The daily K-line in 9 ms to 33.0%, the smallest of the
/// three at the chosen levels and the quickest; 9 gains 0.9 points for 14 ms, 19
/// takes 177 ms.
const ZSTD_LEVEL: i32 = 6;

/// The level of a quick copy, made for a client that waits on a fill: the fastest of
/// each coding. On the 657 KB daily K-line, gzip 1 takes 2.6 ms where 4 takes 8.2,
/// zstd 1 2.0 where 6 takes 8.6, brotli 1 6.7 where 4 takes 11.9 (the table in
/// docs/BENCHMARKS.md "Compression levels"). An answer read again gets its copy at
/// the chosen level in the background (`cache::compress`); one never read again, as
/// in a flood of new keys, never pays for it.
pub const QUICK_LEVEL: i32 = 1;

impl Coding {
    /// Every coding, in the order of [`Coding::index`].
    pub const ALL: [Coding; 3] = [Coding::Gzip, Coding::Brotli, Coding::Zstd];

    /// The `Content-Encoding` token.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// Position in [`Coding::ALL`] (and in per-coding arrays).
    pub fn index(self) -> usize {
        match self {
            Coding::Gzip => 0,
            Coding::Brotli => 1,
            Coding::Zstd => 2,
        }
    }

    /// What the representation's ETag adds to the identity's hash: `"<hash>-gz"`.
    pub fn etag_suffix(self) -> &'static str {
        match self {
            Coding::Gzip => "-gz",
            Coding::Brotli => "-br",
            Coding::Zstd => "-zst",
        }
    }

    /// `body` in this coding at its chosen level; `None` when the compressor fails
    /// (it does not on memory buffers; the identity body is served then).
    pub fn compress(self, body: &[u8]) -> Option<Bytes> {
        self.compress_at(body, self.level())
    }

    /// The level mdproxy compresses at.
    pub fn level(self) -> i32 {
        match self {
            Coding::Gzip => GZIP_LEVEL as i32,
            Coding::Brotli => BROTLI_QUALITY as i32,
            Coding::Zstd => ZSTD_LEVEL,
        }
    }

    /// `body` in this coding at [`QUICK_LEVEL`], for a client that waits on it.
    pub fn compress_quick(self, body: &[u8]) -> Option<Bytes> {
        self.compress_at(body, QUICK_LEVEL)
    }

    /// What a quick copy's ETag adds to the identity's hash: `"<hash>-gz1"`. A
    /// quick copy and the one at the chosen level differ in their bytes, so they
    /// never share a strong validator.
    pub fn quick_etag_suffix(self) -> &'static str {
        match self {
            Coding::Gzip => "-gz1",
            Coding::Brotli => "-br1",
            Coding::Zstd => "-zst1",
        }
    }

    /// `body` in this coding at `level` (the measurement compares levels).
    pub fn compress_at(self, body: &[u8], level: i32) -> Option<Bytes> {
        let mut out = match self {
            Coding::Gzip => gzip(body, u32::try_from(level).unwrap_or(GZIP_LEVEL))?,
            Coding::Brotli => {
                let mut out = Vec::with_capacity(body.len() / 4);
                let params = brotli::enc::BrotliEncoderParams {
                    quality: level,
                    lgwin: BROTLI_WINDOW as i32,
                    size_hint: body.len(),
                    ..Default::default()
                };
                brotli::BrotliCompress(&mut &body[..], &mut out, &params).ok()?;
                out
            }
            Coding::Zstd => zstd(body, level)?,
        };
        // The cache weighs the length: spare capacity would be memory it does not see.
        if out.capacity() - out.len() > out.len() / 8 {
            out.shrink_to_fit();
        }
        Some(Bytes::from(out))
    }
}

/// Compressor states kept from one compression to the next, at most [`KEPT`] of a
/// kind. A fresh deflate state is about 300 KB and a zstd context more: made for
/// each answer, their first writes fault fresh pages in and their release hands the
/// pages back to the kernel, which stops every other core to flush its TLB. That
/// cost a miss flood of 10 KB answers more than the rest of the miss together
/// (docs/BENCHMARKS.md "The miss path"). Only states at mdproxy's own levels (the
/// chosen one and [`QUICK_LEVEL`]) are kept, each in a pool of its own; another
/// level (the measurement's) gets a fresh one.
struct Kept<T> {
    idle: Mutex<Vec<T>>,
}

/// More than the compressions that run at once (one per core, `cache::compress`).
const KEPT: usize = 16;

impl<T> Kept<T> {
    const fn new() -> Kept<T> {
        Kept {
            idle: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<T>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self) -> Option<T> {
        self.lock().pop()
    }

    fn put(&self, state: T) {
        let mut idle = self.lock();
        if idle.len() < KEPT {
            idle.push(state);
        }
    }
}

static DEFLATE: Kept<flate2::Compress> = Kept::new();
static DEFLATE_QUICK: Kept<flate2::Compress> = Kept::new();
static ZSTD: Kept<zstd::bulk::Compressor<'static>> = Kept::new();
static ZSTD_QUICK: Kept<zstd::bulk::Compressor<'static>> = Kept::new();

/// The pool of kept deflate states at `level`, if it is one of ours.
fn deflate_pool(level: u32) -> Option<&'static Kept<flate2::Compress>> {
    match level {
        GZIP_LEVEL => Some(&DEFLATE),
        l if l as i32 == QUICK_LEVEL => Some(&DEFLATE_QUICK),
        _ => None,
    }
}

/// The pool of kept zstd contexts at `level`, if it is one of ours.
fn zstd_pool(level: i32) -> Option<&'static Kept<zstd::bulk::Compressor<'static>>> {
    match level {
        ZSTD_LEVEL => Some(&ZSTD),
        QUICK_LEVEL => Some(&ZSTD_QUICK),
        _ => None,
    }
}

/// `body` as a gzip member (RFC 1952) at `level`: the header `GzEncoder` writes
/// (no name, no time, OS unknown), raw deflate from a kept state, CRC-32 and length.
fn gzip(body: &[u8], level: u32) -> Option<Vec<u8>> {
    use flate2::{Compress, Compression, FlushCompress, Status};
    let pool = deflate_pool(level);
    let mut deflate = pool
        .and_then(Kept::take)
        .unwrap_or_else(|| Compress::new(Compression::new(level), false));
    // XFL: 2 for the slowest level, 4 for the fastest (as `GzEncoder` sets it).
    let xfl = match level {
        9.. => 2,
        0 | 1 => 4,
        _ => 0,
    };
    let mut out = Vec::with_capacity(body.len() / 3 + 64);
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255]);
    loop {
        let read = usize::try_from(deflate.total_in()).ok()?;
        // Deflate writes only into spare capacity: room for what is left, at most
        // a little more than it (stored blocks), then again if that was not enough.
        out.reserve((body.len() - read) / 2 + 1024);
        match deflate
            .compress_vec(&body[read..], &mut out, FlushCompress::Finish)
            .ok()?
        {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError => {}
        }
    }
    let mut crc = flate2::Crc::new();
    crc.update(body);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    // ISIZE: the length modulo 2^32.
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    if let Some(pool) = pool {
        deflate.reset();
        pool.put(deflate);
    }
    Some(out)
}

/// `body` as a zstd frame at `level`, from a kept context.
fn zstd(body: &[u8], level: i32) -> Option<Vec<u8>> {
    let pool = zstd_pool(level);
    let mut context = match pool.and_then(Kept::take) {
        Some(context) => context,
        None => zstd::bulk::Compressor::new(level).ok()?,
    };
    let out = context.compress(body).ok()?;
    if let Some(pool) = pool {
        pool.put(context);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn decompress(coding: Coding, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(bytes)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Brotli => {
                brotli::Decompressor::new(bytes, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::stream::decode_all(bytes).unwrap(),
        }
        out
    }

    /// The gzip made from a kept deflate state is the member `GzEncoder` writes
    /// (its header, its trailer, its size), at every level, and a state kept from a
    /// long body compresses the next, short and empty ones as a fresh one does.
    #[test]
    fn a_kept_deflate_state_writes_what_gzencoder_writes() {
        use std::io::Write;
        let long = "{\"success\":true,\"data\":[1,2,3]}".repeat(5000);
        let random: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for level in [1, 4, 6, 9] {
            for body in [long.as_bytes(), &random, b"short", b""] {
                let mut reference =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
                reference.write_all(body).unwrap();
                let reference = reference.finish().unwrap();
                let ours = Coding::Gzip.compress_at(body, level as i32).unwrap();
                let at = format!("level {level}, {} bytes", body.len());
                // The same header and trailer (CRC-32, length); the deflate blocks
                // between may be cut where the encoder flushed, within a few bytes.
                assert_eq!(ours[..10], reference[..10], "{at}");
                assert_eq!(
                    ours[ours.len() - 8..],
                    reference[reference.len() - 8..],
                    "{at}"
                );
                assert!(ours.len() <= reference.len() + 16, "{at}: {}", ours.len());
                assert_eq!(decompress(Coding::Gzip, &ours), body, "{at}");
            }
        }
    }

    /// A kept zstd context compresses one body after another as a fresh one does,
    /// at the chosen level and the quick one, whichever came before.
    #[test]
    fn a_kept_zstd_context_compresses_each_body_alone() {
        let long = "{\"success\":true,\"data\":[4,5,6]}".repeat(5000);
        for body in [long.as_bytes(), b"short", long.as_bytes()] {
            let packed = Coding::Zstd.compress(body).unwrap();
            assert_eq!(packed, zstd::bulk::compress(body, ZSTD_LEVEL).unwrap());
            assert_eq!(decompress(Coding::Zstd, &packed), body);
            let quick = Coding::Zstd.compress_quick(body).unwrap();
            assert_eq!(quick, zstd::bulk::compress(body, QUICK_LEVEL).unwrap());
        }
    }

    /// A quick copy is the fastest level of its coding, decodes to the body, and
    /// has a validator of its own.
    #[test]
    fn a_quick_copy_decodes_and_is_told_apart() {
        let body = "{\"code\":\"600519\",\"price\":1712.5,\"volume\":31337}".repeat(300);
        for coding in Coding::ALL {
            let quick = coding.compress_quick(body.as_bytes()).unwrap();
            assert_eq!(decompress(coding, &quick), body.as_bytes(), "{coding:?}");
            assert_ne!(coding.quick_etag_suffix(), coding.etag_suffix());
            assert!(coding.quick_etag_suffix().starts_with(coding.etag_suffix()));
        }
        let at_one = Coding::Gzip.compress_at(body.as_bytes(), 1).unwrap();
        assert_eq!(
            Coding::Gzip.compress_quick(body.as_bytes()).unwrap(),
            at_one
        );
    }

    /// Each coding round-trips to the body and is much smaller on repetitive JSON.
    #[test]
    fn every_coding_decompresses_to_the_body() {
        let body = "{\"success\":true,\"data\":[1,2,3]}".repeat(200);
        for coding in Coding::ALL {
            let packed = coding.compress(body.as_bytes()).unwrap();
            assert!(
                packed.len() < body.len() / 4,
                "{coding:?}: {}",
                packed.len()
            );
            assert_eq!(decompress(coding, &packed), body.as_bytes(), "{coding:?}");
            assert_eq!(Coding::ALL[coding.index()], coding);
        }
    }
}
