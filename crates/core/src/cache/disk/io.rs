//! How the disk tier's engine reads and writes its block files: a read whose pages
//! are all in the page cache is copied on the task that asked for it (`preadv2` with
//! `RWF_NOWAIT`), as nginx reads its cache files; any other read, and every write,
//! goes to foyer's thread pool (its `psync` engine), so a read that would wait for
//! the device never holds a runtime thread.
//!
//! Handing a read to the pool costs two thread switches; on a disk whose blocks are
//! in the page cache that was about a fifth of mdproxy's time on disk hits, and
//! reading in place took them from 0.82–0.92 × nginx `sendfile on` to 1.00–1.03 ×
//! in one A/B of the same build (docs/BENCHMARKS.md, the disk tier's run 11).
//!
//! foyer 0.22 names the traits an engine implements but does not export them, nor
//! lends a partition's file: `vendor/foyer-storage` is foyer-storage 0.22.6 with
//! those exports and `AsFd` for its file system partition added (vendor/README.md),
//! so the in-place read borrows the file safely, by type.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[cfg(target_os = "linux")]
use foyer_storage::FsPartition;
use foyer_storage::{
    IoBuf, IoBufMut, IoEngine, IoEngineBuildContext, IoEngineConfig, IoHandle, Partition,
    PsyncIoEngineConfig,
};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

/// How the reads went, since start.
#[derive(Debug, Default)]
pub struct ReadPaths {
    /// Reads copied from the page cache on the asking task.
    pub in_place: AtomicU64,
    /// Reads handed to the thread pool: some page was not cached, or the file
    /// system cannot say so without waiting.
    pub pooled: AtomicU64,
    /// Cleared when the file system refuses `RWF_NOWAIT` (every read then goes to
    /// the pool, without asking again).
    supported: AtomicBool,
}

impl ReadPaths {
    pub fn new() -> Arc<ReadPaths> {
        Arc::new(ReadPaths {
            supported: AtomicBool::new(cfg!(target_os = "linux")),
            ..ReadPaths::default()
        })
    }

    /// Whether reads may still be tried in place.
    pub fn in_place_supported(&self) -> bool {
        self.supported.load(Ordering::Relaxed)
    }
}

/// The engine's failed writes: foyer 0.22 panics on several of its paths when a
/// write fails (a full file system, an I/O error), and a panicked flusher takes the
/// tier down until a restart. So a failed write is noted here and reported to foyer
/// as done: the records it held are lost (their reads fail the checksums and are
/// dropped, never served), the tier's writer stops handing over records, and the
/// probe starts them again once the disk takes writes.
#[derive(Debug, Default)]
pub struct WriteFaults {
    /// Whether a write failed since [`take`](Self::take) last looked.
    failed: AtomicBool,
    /// The first error since then.
    first: std::sync::Mutex<Option<String>>,
}

impl WriteFaults {
    fn note(&self, error: &foyer::Error) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            *self.first.lock().expect("the fault lock is never poisoned") = Some(error.to_string());
        }
    }

    /// The first write error since the last look, if a write failed.
    pub fn take(&self) -> Option<String> {
        self.failed.swap(false, Ordering::AcqRel).then(|| {
            self.first
                .lock()
                .expect("the fault lock is never poisoned")
                .take()
                .unwrap_or_default()
        })
    }
}

/// The engine's configuration, given to foyer's store builder.
#[derive(Debug)]
pub struct CachedFirstConfig {
    paths: Arc<ReadPaths>,
    faults: Arc<WriteFaults>,
}

impl CachedFirstConfig {
    pub fn new(paths: Arc<ReadPaths>, faults: Arc<WriteFaults>) -> CachedFirstConfig {
        CachedFirstConfig { paths, faults }
    }
}

impl From<CachedFirstConfig> for Box<dyn IoEngineConfig> {
    fn from(config: CachedFirstConfig) -> Self {
        Box::new(config)
    }
}

impl IoEngineConfig for CachedFirstConfig {
    fn build(
        self: Box<Self>,
        ctx: IoEngineBuildContext,
    ) -> BoxFuture<'static, foyer::Result<Arc<dyn IoEngine>>> {
        async move {
            let pool = Box::new(PsyncIoEngineConfig::new()).build(ctx).await?;
            let engine = CachedFirst {
                pool,
                paths: self.paths,
                faults: self.faults,
            };
            Ok(Arc::new(engine) as Arc<dyn IoEngine>)
        }
        .boxed()
    }
}

/// Reads in place what the page cache holds; hands the rest, and the writes, to
/// `pool`, noting the writes that fail in `faults`.
#[derive(Debug)]
struct CachedFirst {
    pool: Arc<dyn IoEngine>,
    paths: Arc<ReadPaths>,
    faults: Arc<WriteFaults>,
}

impl IoEngine for CachedFirst {
    fn read(&self, mut buf: Box<dyn IoBufMut>, partition: &dyn Partition, offset: u64) -> IoHandle {
        if self.paths.in_place_supported() {
            match read_partition(partition, &mut buf, offset) {
                Cached::All => {
                    self.paths.in_place.fetch_add(1, Ordering::Relaxed);
                    let buf = buf.into_iob();
                    return async move { (buf, Ok(())) }.boxed().into();
                }
                Cached::Unsupported(errno) => {
                    if self.paths.supported.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            errno,
                            "the disk tier's file system cannot read without waiting \
                             (RWF_NOWAIT); every disk read goes to the thread pool"
                        );
                    }
                }
                Cached::Not => {}
            }
        }
        self.paths.pooled.fetch_add(1, Ordering::Relaxed);
        self.pool.read(buf, partition, offset)
    }

    fn write(&self, buf: Box<dyn IoBuf>, partition: &dyn Partition, offset: u64) -> IoHandle {
        let written = self.pool.write(buf, partition, offset);
        let faults = Arc::clone(&self.faults);
        async move {
            let (buf, result) = written.await;
            if let Err(e) = &result {
                faults.note(e);
            }
            (buf, Ok(()))
        }
        .boxed()
        .into()
    }
}

/// What a read without waiting found (elsewhere than on Linux, always
/// `Unsupported`).
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum Cached {
    /// All of `buf` was read from the page cache.
    All,
    /// Some page was not cached (or the read failed, or was cut short): read it
    /// again, waiting.
    Not,
    /// The file system (or the kernel) does not take `RWF_NOWAIT`: this errno.
    Unsupported(i32),
}

/// [`read_cached`] of `partition`'s file at the file offset of `offset`, when it is
/// a partition of the file system device (the one mdproxy builds), which lends its
/// file for as long as it is borrowed; any other kind of partition is read by the
/// pool (`Not`), its descriptor never taken on trust.
#[cfg(target_os = "linux")]
fn read_partition(partition: &dyn Partition, buf: &mut [u8], offset: u64) -> Cached {
    use std::os::fd::AsFd;
    let any: &dyn std::any::Any = partition;
    let Some(fs) = any.downcast_ref::<FsPartition>() else {
        return Cached::Not;
    };
    let (_, at) = fs.translate(offset);
    read_cached(fs.as_fd(), buf, at)
}

#[cfg(not(target_os = "linux"))]
fn read_partition(_partition: &dyn Partition, _buf: &mut [u8], _offset: u64) -> Cached {
    Cached::Unsupported(0)
}

/// Reads all of `buf` at `offset` of `fd` if the page cache holds it, never waiting
/// for the device. The file must be buffered: with `O_DIRECT` (foyer's
/// `with_direct`, which mdproxy does not set) the read would go to the device and
/// wait.
#[cfg(target_os = "linux")]
fn read_cached(fd: std::os::fd::BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> Cached {
    use rustix::io::{Errno, ReadWriteFlags};
    let len = buf.len();
    let read = rustix::io::preadv2(
        fd,
        &mut [std::io::IoSliceMut::new(buf)],
        offset,
        ReadWriteFlags::NOWAIT,
    );
    match read {
        Ok(n) if n == len => Cached::All,
        Ok(_) => Cached::Not,
        // A kernel before 4.14 or a file system without it (tmpfs, some network
        // file systems) refuses the flag.
        Err(e @ (Errno::OPNOTSUPP | Errno::NOSYS)) => Cached::Unsupported(e.raw_os_error()),
        Err(_) => Cached::Not,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;

    use bytes::Bytes;

    use super::super::Record;
    use super::*;

    /// A directory of the build, removed when dropped (a disk, as the tier's: a
    /// temporary directory may be tmpfs, which has no `RWF_NOWAIT`).
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
                "../../target/io-tests/{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A file of `len` bytes in `dir`, written back to the disk.
    fn file(dir: &Dir, len: usize) -> (std::fs::File, Vec<u8>) {
        let path = dir.0.join("file");
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        (std::fs::File::open(&path).unwrap(), bytes)
    }

    /// Drops the file's pages from the page cache: written back first, since a
    /// dirty page (the machine busy writing) cannot be dropped.
    fn evict(f: &std::fs::File) {
        f.sync_all().unwrap();
        rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    }

    /// A cached range is read whole in place; a range past the end is not; once
    /// the pages are dropped the read does not wait for them but says so.
    #[test]
    fn reads_in_place_only_what_the_page_cache_holds() {
        let dir = Dir::new("cached");
        let (f, bytes) = file(&dir, 256 << 10);
        let mut buf = vec![0u8; 64 << 10];
        let first = read_cached(f.as_fd(), &mut buf, 4096);
        if let Cached::Unsupported(errno) = first {
            // A file system without RWF_NOWAIT: the engine sends everything to the
            // pool (`a_store_reads_through_the_pool_what_is_not_cached` covers it).
            eprintln!("RWF_NOWAIT unsupported here (errno {errno})");
            return;
        }
        assert_eq!(first, Cached::All);
        assert_eq!(buf, bytes[4096..4096 + (64 << 10)]);
        // Cached but short: the end of the file.
        let mut past = vec![0u8; 4096];
        assert_eq!(
            read_cached(f.as_fd(), &mut past, (256 << 10) - 100),
            Cached::Not
        );

        // The kernel may hold a page a moment longer than asked (one still in a
        // core's batch of pages waiting for its lists): asked again, a bounded
        // number of times, until it lets them go.
        let mut again = vec![0u8; 64 << 10];
        let mut read = Cached::All;
        for _ in 0..50 {
            evict(&f);
            read = read_cached(f.as_fd(), &mut again, 4096);
            if read == Cached::Not {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(read, Cached::Not);
    }

    /// Through foyer: records read back from cached blocks are read in place, the
    /// same records with their blocks dropped from the page cache go to the pool,
    /// and both come back whole.
    #[tokio::test]
    async fn a_store_reads_through_the_pool_what_is_not_cached() {
        let dir = Dir::new("store");
        let paths = ReadPaths::new();
        let memory: foyer::Cache<u64, Record> = foyer::CacheBuilder::new(16).build();
        let device = foyer::DeviceBuilder::build(
            foyer::FsDeviceBuilder::new(&dir.0).with_capacity(16 << 20),
        )
        .unwrap();
        let store = foyer::StoreBuilder::new(
            "io-test",
            memory.clone(),
            Arc::new(foyer_common::metrics::Metrics::noop()),
        )
        .with_io_engine_config(CachedFirstConfig::new(Arc::clone(&paths), Arc::default()))
        .with_engine_config(foyer::BlockEngineConfig::new(device).with_block_size(1 << 20))
        .build()
        .await
        .unwrap();
        let values: Vec<Bytes> = (0..8u8)
            .map(|i| (0..100_000).map(|j| i ^ (j % 253) as u8).collect())
            .collect();
        for (i, v) in values.iter().enumerate() {
            store.enqueue(memory.insert(i as u64, Record(v.clone())).piece(), true);
        }
        store.wait().await;
        memory.clear();
        // The engine read its new blocks' headers at start: count from here.
        let (in_place, pooled) = (
            paths.in_place.load(Ordering::Relaxed),
            paths.pooled.load(Ordering::Relaxed),
        );

        let load = |k: u64| {
            let store = store.clone();
            async move {
                match store.load(&k).await.unwrap() {
                    foyer::Load::Entry { value, .. } => value.0,
                    other => panic!("record {k}: {other:?}"),
                }
            }
        };
        for (i, v) in values.iter().enumerate() {
            assert_eq!(&load(i as u64).await, v);
        }
        let supported = paths.in_place_supported();
        if supported {
            // One read a record.
            assert_eq!(paths.in_place.load(Ordering::Relaxed) - in_place, 8);
            assert_eq!(
                paths.pooled.load(Ordering::Relaxed),
                pooled,
                "all was cached"
            );
        }

        // The first read after the drop goes to the pool; the kernel's read-ahead
        // for it may bring the next records back into the cache. The drop is asked
        // again (a bounded number of times) while the kernel keeps every page: it
        // may hold some a moment longer than asked.
        let pooled = paths.pooled.load(Ordering::Relaxed);
        for _ in 0..50 {
            for block in std::fs::read_dir(&dir.0).unwrap() {
                let path = block.unwrap().path();
                if path.is_file() {
                    evict(&std::fs::File::open(&path).unwrap());
                }
            }
            for (i, v) in values.iter().enumerate() {
                assert_eq!(&load(i as u64).await, v);
            }
            if paths.pooled.load(Ordering::Relaxed) > pooled {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(
            paths.pooled.load(Ordering::Relaxed) > pooled,
            "reads of dropped pages go to the pool"
        );
        if !supported {
            assert_eq!(paths.in_place.load(Ordering::Relaxed), 0);
        }
        store.close().await.unwrap();
    }
}
