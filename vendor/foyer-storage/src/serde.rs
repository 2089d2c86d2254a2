// Copyright 2026 foyer Project Authors
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

use std::{fmt::Debug, io::Write};

use foyer_common::{
    code::{Code, StorageKey, StorageValue},
    error::{Error, ErrorKind, Result},
};
use twox_hash::{XxHash32, XxHash64};

use crate::{compress::Compression, io::bytes::IoB};

/// mdproxy's patch (vendor/README.md): a value that is its stored bytes as read,
/// for a caller whose bytes carry checks of their own. The block engine loads it
/// without a copy (the value shares the engine's read buffer) and without the
/// entry's checksum: verifying every byte it will use is then the caller's job.
#[derive(Debug, Clone)]
pub struct SelfCheckedBytes(pub bytes::Bytes);

impl Code for SelfCheckedBytes {
    fn encode(&self, writer: &mut impl std::io::Write) -> Result<()> {
        writer.write_all(&self.0).map_err(Error::io_error)
    }

    fn decode(reader: &mut impl std::io::Read) -> Result<Self> {
        let mut bytes = Vec::new();
        reader.read_to_end(&mut bytes).map_err(Error::io_error)?;
        Ok(SelfCheckedBytes(bytes.into()))
    }

    fn estimated_size(&self) -> usize {
        self.0.len()
    }
}

/// mdproxy's patch: an engine's read buffer, lent to the [`SelfCheckedBytes`]
/// values that share it.
struct ReadBuffer(Box<dyn IoB>);

impl AsRef<[u8]> for ReadBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.0[..]
    }
}

#[derive(Debug)]
pub struct Checksummer;

impl Checksummer {
    pub fn checksum64(buf: &[u8]) -> u64 {
        XxHash64::oneshot(0, buf)
    }

    #[expect(unused)]
    pub fn checksum32(buf: &[u8]) -> u32 {
        XxHash32::oneshot(0, buf)
    }
}

#[derive(Debug)]
pub struct KvInfo {
    pub key_len: usize,
    pub value_len: usize,
}

/// A writer wrapper that count how many bytes has been written.
#[derive(Debug)]
pub struct TrackedWriter<W> {
    inner: W,
    written: usize,
}

impl<W> TrackedWriter<W> {
    pub fn new(inner: W) -> Self {
        Self { inner, written: 0 }
    }

    pub fn written(self) -> usize {
        self.written
    }
}

impl<W> Write for TrackedWriter<W>
where
    W: Write,
{
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).inspect(|len| self.written += len)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.inner.write_vectored(bufs).inspect(|len| self.written += len)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf).inspect(|_| self.written += buf.len())
    }

    #[cfg(feature = "nightly")]
    fn write_all_vectored(&mut self, bufs: &mut [std::io::IoSlice<'_>]) -> std::io::Result<()> {
        self.inner
            .write_all_vectored(bufs)
            .inspect(|_| self.written += bufs.iter().map(|slice| slice.len()).sum::<usize>())
    }
}

#[derive(Debug)]
pub struct EntrySerializer;

impl EntrySerializer {
    #[cfg_attr(feature = "tracing", fastrace::trace(name = "foyer::storage::serde::serialize"))]
    pub fn serialize<K, V, W>(key: &K, value: &V, compression: Compression, mut writer: W) -> Result<KvInfo>
    where
        K: StorageKey,
        V: StorageValue,
        W: Write,
    {
        // serialize value
        let value_len = Self::serialize_value(value, &mut writer, compression)?;

        // serialize key
        let key_len = Self::serialize_key(key, &mut writer)?;

        Ok(KvInfo { key_len, value_len })
    }

    fn serialize_key<K, W>(key: &K, writer: W) -> Result<usize>
    where
        K: StorageKey,
        W: Write,
    {
        let mut writer = TrackedWriter::new(writer);
        key.encode(&mut writer)?;
        Ok(writer.written())
    }

    fn serialize_value<V, W>(value: &V, writer: W, compression: Compression) -> Result<usize>
    where
        V: StorageValue,
        W: Write,
    {
        let mut writer = TrackedWriter::new(writer);
        match compression {
            Compression::None => {
                value.encode(&mut writer)?;
            }
            Compression::Zstd => {
                // Do not use `auto_finish()` here, for we will lost `ZeroWrite` error.
                let mut encoder = zstd::Encoder::new(&mut writer, 0).map_err(Error::io_error)?;
                value.encode(&mut encoder)?;
                encoder.finish().map_err(Error::io_error)?;
            }
            Compression::Lz4 => {
                let mut encoder = lz4::EncoderBuilder::new()
                    .checksum(lz4::ContentChecksum::NoChecksum)
                    .auto_flush(true)
                    .build(&mut writer)
                    .map_err(Error::io_error)?;
                value.encode(&mut encoder)?;
            }
        }
        Ok(writer.written())
    }

    pub fn estimated_size<'a, K, V>(key: &'a K, value: &'a V) -> usize
    where
        K: StorageKey,
        V: StorageValue,
    {
        key.estimated_size() + value.estimated_size()
    }
}

#[derive(Debug)]
pub struct EntryDeserializer;

impl EntryDeserializer {
    #[cfg_attr(feature = "tracing", fastrace::trace(name = "foyer::storage::serde::deserialize"))]
    pub fn deserialize<K, V>(
        buffer: &[u8],
        ken_len: usize,
        value_len: usize,
        compression: Compression,
        checksum: Option<u64>,
    ) -> Result<(K, V)>
    where
        K: StorageKey,
        V: StorageValue,
    {
        if buffer.len() < value_len + ken_len {
            return Err(Error::new(ErrorKind::OutOfRange, "fail to deserialize entry")
                .with_context("valid", format!("{:?}", 0..buffer.len()))
                .with_context("get", format!("{:?}", 0..value_len + ken_len)));
        }

        // calculate checksum if needed
        if let Some(expected) = checksum {
            let get = Checksummer::checksum64(&buffer[..value_len + ken_len]);
            if expected != get {
                return Err(Error::new(ErrorKind::ChecksumMismatch, "fail to deserialize entry")
                    .with_context("expected", expected)
                    .with_context("get", get));
            }
        }

        // deserialize value
        let buf = &buffer[..value_len];
        let value = Self::deserialize_value(buf, compression)?;

        // deserialize key
        let buf = &buffer[value_len..value_len + ken_len];
        let key = Self::deserialize_key(buf)?;

        Ok((key, value))
    }

    /// mdproxy's patch: deserializes the entry at `start` of a read buffer as
    /// [`deserialize`](Self::deserialize) does, checking `checksum`, except for an
    /// uncompressed [`SelfCheckedBytes`] value, which shares the buffer and is not
    /// checked against it.
    pub fn deserialize_read<K, V>(
        buffer: Box<dyn IoB>,
        start: usize,
        ken_len: usize,
        value_len: usize,
        compression: Compression,
        checksum: u64,
    ) -> Result<(K, V)>
    where
        K: StorageKey,
        V: StorageValue,
    {
        use std::any::{Any, TypeId};

        let end = start + value_len + ken_len;
        if TypeId::of::<V>() != TypeId::of::<SelfCheckedBytes>()
            || compression != Compression::None
            || buffer.len() < end
        {
            let entry = buffer.get(start..).unwrap_or_default();
            return Self::deserialize(entry, ken_len, value_len, compression, Some(checksum));
        }
        // The key is decoded before anything has checked it: only a `String` key whose
        // length prefix agrees with the header's `ken_len` (a damaged prefix would size
        // an allocation and abort the process), and any failure takes the checked path,
        // which drops a damaged entry as the published crate does.
        let key_bytes = &buffer[start + value_len..end];
        let key = match Self::string_key_agrees::<K>(key_bytes).then(|| Self::deserialize_key::<K>(key_bytes)) {
            Some(Ok(key)) => key,
            _ => {
                let entry = buffer.get(start..).unwrap_or_default();
                return Self::deserialize(entry, ken_len, value_len, compression, Some(checksum));
            }
        };
        let shared = bytes::Bytes::from_owner(ReadBuffer(buffer)).slice(start..start + value_len);
        let value: Box<dyn Any> = Box::new(SelfCheckedBytes(shared));
        let value = value
            .downcast::<V>()
            .map_err(|_| Error::new(ErrorKind::Parse, "the value type was compared"))?;
        Ok((key, *value))
    }

    /// mdproxy's patch: whether `K` is a `String` whose encoding in `bytes` (its
    /// length, then its bytes) says it is exactly as long as `bytes`.
    fn string_key_agrees<K: 'static>(bytes: &[u8]) -> bool {
        const PREFIX: usize = std::mem::size_of::<usize>();
        std::any::TypeId::of::<K>() == std::any::TypeId::of::<String>()
            && bytes.len() >= PREFIX
            && bytes[..PREFIX] == (bytes.len() - PREFIX).to_le_bytes()
    }

    #[cfg_attr(
        feature = "tracing",
        fastrace::trace(name = "foyer::storage::serde::deserialize_key")
    )]
    fn deserialize_key<K>(buf: &[u8]) -> Result<K>
    where
        K: StorageKey,
    {
        K::decode(&mut &buf[..])
    }

    #[cfg_attr(
        feature = "tracing",
        fastrace::trace(name = "foyer::storage::serde::deserialize_value")
    )]
    fn deserialize_value<V>(buf: &[u8], compression: Compression) -> Result<V>
    where
        V: StorageValue,
    {
        match compression {
            Compression::None => V::decode(&mut &buf[..]),
            Compression::Zstd => {
                let mut decoder = zstd::Decoder::new(buf).map_err(Error::io_error)?;
                V::decode(&mut decoder)
            }
            Compression::Lz4 => {
                let mut decoder = lz4::Decoder::new(buf).map_err(Error::io_error)?;
                V::decode(&mut decoder)
            }
        }
    }
}
