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

/// gzip level (of 1..=9): 6, zlib's default. On our JSON 9 saves under 1% more for
/// twice the time, and 1 is 15% larger.
const GZIP_LEVEL: u32 = 6;

/// brotli quality (of 0..=11): 6. The K-lines come out about 20% smaller than gzip's
/// in about the time gzip 6 takes; 9 to 11 save a few percent more at 3 to 40 times
/// the cost, which a 657 KB daily K-line refetched every 15 s in session cannot pay.
const BROTLI_QUALITY: u32 = 6;

/// brotli window: 4 MiB (`lgwin` 22, the format's default), more than any body we cache
/// whole at the default `cache.max_bytes`, so every back-reference can reach.
const BROTLI_WINDOW: u32 = 22;

/// zstd level (of 1..=22): 6: smaller than gzip 6 at a fraction of its time; past 9
/// the time grows faster than the saving.
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
            assert!(packed.len() < body.len() / 4, "{coding:?}: {}", packed.len());
            assert_eq!(decompress(coding, &packed), body.as_bytes(), "{coding:?}");
            assert_eq!(Coding::ALL[coding.index()], coding);
        }
    }
}
