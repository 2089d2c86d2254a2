//! Which embedded engine should hold mdproxy's disk tier? Writes a working set of real
//! K-line bodies (sampled from the simulator by `scripts/disk-engines.sh`) into foyer's
//! block engine, fjall (an LSM tree with key-value separation) and redb (a copy-on-write
//! B-tree), then reopens each and reads random keys from several threads. Prints one
//! JSON line per engine and round: write MB/s, open time, reads/s, p50/p99, RSS, bytes
//! on disk.
//!
//!   disk-engines ENGINE DIR BODIES_DIR TOTAL_MIB READS THREADS

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// The bodies, and the keys of the working set (one per body copy).
struct Set {
    bodies: Vec<Bytes>,
    count: usize,
}

impl Set {
    fn key(&self, i: usize) -> String {
        // Keys as mdproxy makes them: a path and a canonical query.
        format!(
            "/stock/kline?code={:06}&fqt=none&period=day&to=2025-12-{:02}",
            i / 28,
            i % 28 + 1
        )
    }

    /// Body `i`: a sampled body with its index in front, so every value is distinct.
    fn value(&self, i: usize) -> Bytes {
        let body = &self.bodies[i % self.bodies.len()];
        let mut v = Vec::with_capacity(body.len() + 8);
        v.extend_from_slice(&(i as u64).to_be_bytes());
        v.extend_from_slice(body);
        Bytes::from(v)
    }

    fn expected_len(&self, i: usize) -> usize {
        self.bodies[i % self.bodies.len()].len() + 8
    }
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn du_mib(dir: &Path) -> f64 {
    fn walk(p: &Path) -> u64 {
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            return 0;
        };
        if meta.is_dir() {
            std::fs::read_dir(p)
                .map(|it| it.flatten().map(|e| walk(&e.path())).sum())
                .unwrap_or(0)
        } else {
            use std::os::unix::fs::MetadataExt;
            meta.blocks() * 512
        }
    }
    walk(dir) as f64 / 1048576.0
}

/// One engine behind a common face.
trait Engine: Send + Sync {
    fn put(&self, key: &str, value: Bytes);
    fn get(&self, key: &str) -> Option<Bytes>;
    /// Waits until what was put is on disk.
    fn sync(&self);
}

type Foyer = foyer::Store<String, Bytes, foyer::DefaultHasher, foyer::HybridCacheProperties>;

struct FoyerEngine {
    store: Foyer,
    memory: foyer::Cache<String, Bytes, foyer::DefaultHasher, foyer::HybridCacheProperties>,
    rt: tokio::runtime::Handle,
}

impl FoyerEngine {
    async fn open(dir: &Path, capacity: usize) -> FoyerEngine {
        use foyer::DeviceBuilder;
        let memory = foyer::CacheBuilder::new(16)
            .with_shards(4)
            .build::<foyer::HybridCacheProperties>();
        let metrics = Arc::new(foyer_noop_metrics());
        let device = foyer::FsDeviceBuilder::new(dir)
            .with_capacity(capacity)
            .build()
            .unwrap();
        let store = foyer::StoreBuilder::new("bench", memory.clone(), metrics)
            .with_engine_config(
                foyer::BlockEngineConfig::new(device)
                    .with_block_size(16 << 20)
                    .with_flushers(2)
                    .with_buffer_pool_size(64 << 20)
                    .with_submit_queue_size_threshold(256 << 20)
                    .with_tombstone_log(true),
            )
            .with_recover_mode(foyer::RecoverMode::Quiet)
            .build()
            .await
            .unwrap();
        FoyerEngine {
            store,
            memory,
            rt: tokio::runtime::Handle::current(),
        }
    }
}

fn foyer_noop_metrics() -> foyer_common::metrics::Metrics {
    foyer_common::metrics::Metrics::noop()
}

impl Engine for FoyerEngine {
    fn put(&self, key: &str, value: Bytes) {
        let entry = self.memory.insert(key.to_owned(), value);
        self.store.enqueue(entry.piece(), true);
        drop(self.memory.remove(key));
    }
    fn sync(&self) {
        self.rt.block_on(self.store.wait());
    }
    fn get(&self, key: &str) -> Option<Bytes> {
        let store = self.store.clone();
        let key = key.to_owned();
        self.rt.block_on(async move {
            match store.load(&key).await.ok()? {
                foyer::Load::Entry { value, .. } => Some(value),
                foyer::Load::Piece { piece, .. } => Some(piece.value().clone()),
                _ => None,
            }
        })
    }
}

struct FjallEngine {
    db: fjall::Database,
    bodies: fjall::Keyspace,
}

impl FjallEngine {
    fn open(dir: &Path) -> FjallEngine {
        let db = fjall::Database::builder(dir).open().unwrap();
        let bodies = db
            .keyspace("bodies", || {
                fjall::KeyspaceCreateOptions::default()
                    .with_kv_separation(Some(fjall::KvSeparationOptions::default()))
            })
            .unwrap();
        FjallEngine { db, bodies }
    }
}

impl Engine for FjallEngine {
    fn put(&self, key: &str, value: Bytes) {
        self.bodies.insert(key, &value[..]).unwrap();
    }
    fn sync(&self) {
        self.db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    fn get(&self, key: &str) -> Option<Bytes> {
        self.bodies
            .get(key)
            .unwrap()
            .map(|v| Bytes::copy_from_slice(&v))
    }
}

const TABLE: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new("bodies");

struct RedbEngine {
    db: redb::Database,
    /// Writes gathered into one transaction (a commit per body is an fsync per body).
    pending: std::sync::Mutex<Vec<(String, Bytes)>>,
}

impl RedbEngine {
    fn open(dir: &Path) -> RedbEngine {
        std::fs::create_dir_all(dir).unwrap();
        let db = redb::Database::create(dir.join("bodies.redb")).unwrap();
        RedbEngine {
            db,
            pending: Default::default(),
        }
    }
    fn commit(&self) {
        let batch = std::mem::take(&mut *self.pending.lock().unwrap());
        let tx = self.db.begin_write().unwrap();
        {
            let mut t = tx.open_table(TABLE).unwrap();
            for (k, v) in &batch {
                t.insert(k.as_str(), &v[..]).unwrap();
            }
        }
        tx.commit().unwrap();
    }
}

impl Engine for RedbEngine {
    fn put(&self, key: &str, value: Bytes) {
        let n = {
            let mut p = self.pending.lock().unwrap();
            p.push((key.to_owned(), value));
            p.len()
        };
        if n >= 64 {
            self.commit();
        }
    }
    fn sync(&self) {
        self.commit();
    }
    fn get(&self, key: &str) -> Option<Bytes> {
        use redb::ReadableDatabase;
        let tx = self.db.begin_read().unwrap();
        let t = tx.open_table(TABLE).ok()?;
        t.get(key)
            .unwrap()
            .map(|v| Bytes::copy_from_slice(v.value()))
    }
}

fn load_bodies(dir: &Path) -> Vec<Bytes> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| Bytes::from(std::fs::read(p).unwrap()))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let engine = args[1].clone();
    let dir = PathBuf::from(&args[2]);
    let bodies = load_bodies(Path::new(&args[3]));
    let total: usize = args[4].parse::<usize>().unwrap() << 20;
    let reads: usize = args[5].parse().unwrap();
    let threads: usize = args[6].parse().unwrap();
    let mean = bodies.iter().map(Bytes::len).sum::<usize>() / bodies.len();
    let count = total / (mean + 8);
    let set = Arc::new(Set { bodies, count });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let capacity = total + total / 4 + (64 << 20);
    let rss_before = rss_mib();

    let open = |rt: &tokio::runtime::Runtime| -> Arc<dyn Engine> {
        match engine.as_str() {
            "foyer" => Arc::new(rt.block_on(FoyerEngine::open(&dir, capacity))),
            "fjall" => Arc::new(FjallEngine::open(&dir)),
            "redb" => Arc::new(RedbEngine::open(&dir)),
            other => panic!("unknown engine {other}"),
        }
    };

    // Write the working set from one thread, as cache fills trickle in.
    let e = open(&rt);
    let started = Instant::now();
    let mut written = 0usize;
    let mut since_sync = 0usize;
    // foyer drops what overflows its write buffer (32 MiB a flusher here): it is
    // paced at half of that, as mdproxy's writer paces it; fjall and redb block
    // instead, and sync (fsync) every 128 MiB.
    let sync_every: usize = if engine == "foyer" { 16 << 20 } else { 128 << 20 };
    for i in 0..set.count {
        let v = set.value(i);
        written += v.len();
        since_sync += v.len();
        e.put(&set.key(i), v);
        if since_sync > sync_every {
            e.sync();
            since_sync = 0;
        }
    }
    e.sync();
    let write_secs = started.elapsed().as_secs_f64();
    drop(e);
    if engine == "foyer" {
        // Its flushers and reclaimers are tasks of this runtime: let them wind down.
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    }
    let du = du_mib(&dir);

    // Reopen (the index rebuilt or read back).
    let started = Instant::now();
    let e = open(&rt);
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    let rss_open = rss_mib();

    // Random reads from `threads` threads.
    let per = reads / threads;
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (e, set) = (Arc::clone(&e), Arc::clone(&set));
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t as u64 + 7);
                let mut lat = Vec::with_capacity(per);
                let mut missing = 0;
                for _ in 0..per {
                    let i = rng.usize(..set.count);
                    let t0 = Instant::now();
                    match e.get(&set.key(i)) {
                        Some(v) => assert_eq!(v.len(), set.expected_len(i)),
                        None => missing += 1,
                    }
                    lat.push(t0.elapsed());
                }
                (lat, missing)
            })
        })
        .collect();
    let mut lat: Vec<Duration> = Vec::new();
    let mut missing = 0;
    for h in handles {
        let (l, m) = h.join().unwrap();
        lat.extend(l);
        missing += m;
    }
    let secs = started.elapsed().as_secs_f64();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)].as_secs_f64() * 1e3;
    println!(
        "{{\"engine\":\"{engine}\",\"entries\":{},\"mean_body\":{mean},\"written_mib\":{:.0},\"write_mib_s\":{:.0},\"disk_mib\":{du:.0},\"open_ms\":{open_ms:.1},\"reads_s\":{:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"missing\":{missing},\"rss_open_mib\":{:.0},\"rss_end_mib\":{:.0},\"rss_start_mib\":{rss_before:.0}}}",
        set.count,
        written as f64 / 1048576.0,
        written as f64 / 1048576.0 / write_secs,
        lat.len() as f64 / secs,
        pct(0.5),
        pct(0.99),
        rss_open,
        rss_mib(),
    );
    drop(e);
    let _ = std::fs::remove_dir_all(&dir);
}

