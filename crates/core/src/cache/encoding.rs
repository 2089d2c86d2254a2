//! The compressed representations a cached answer may have beside its identity body
//! (gzip, brotli, zstd): each coding's name, ETag suffix, level (chosen by
//! measurement, docs/BENCHMARKS.md "Compression levels") and compressor. Which one a
//! client gets is the edge's choice (`edge::negotiate`).

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

/// gzip level (of 1..=9): 4. The daily K-line in 14 ms to 35.1% where zlib's
/// default 6 takes 50 ms for 34.2%; 1 is 4 ms but 42%.
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

    /// `body` in this coding at `level` (the measurement compares levels).
    pub fn compress_at(self, body: &[u8], level: i32) -> Option<Bytes> {
        use std::io::Write;
        let mut out = Vec::with_capacity(body.len() / 4);
        match self {
            Coding::Gzip => {
                let level = u32::try_from(level).unwrap_or(GZIP_LEVEL);
                let mut encoder =
                    flate2::write::GzEncoder::new(out, flate2::Compression::new(level));
                encoder.write_all(body).ok()?;
                out = encoder.finish().ok()?;
            }
            Coding::Brotli => {
                let params = brotli::enc::BrotliEncoderParams {
                    quality: level,
                    lgwin: BROTLI_WINDOW as i32,
                    size_hint: body.len(),
                    ..Default::default()
                };
                brotli::BrotliCompress(&mut &body[..], &mut out, &params).ok()?;
            }
            Coding::Zstd => {
                out = zstd::bulk::compress(body, level).ok()?;
            }
        }
        Some(Bytes::from(out))
    }
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
