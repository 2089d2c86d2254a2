//! The disk tier's writer task: records from the queue into the engine, settled
//! batch by batch. A batch is counted as written (`writes`, the tally) only once the
//! engine has written it and no write failed meanwhile; a batch a failed write
//! took is counted as lost, and writes stop until the disk takes them again
//! ([`super::health`]).

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Disk, Queued, Record, format, tally};

/// Records handed to the engine and not yet settled.
#[derive(Debug, Default)]
struct Batch {
    records: u64,
    /// Their bytes as written.
    bytes: u64,
    /// The room they take in the engine's blocks.
    room: u64,
}

impl Disk {
    /// The writer task: records from the queue into the engine until `stop`, then
    /// what is still queued, then the engine closed (its buffers written) and the directory let go.
    pub(super) async fn write_until(self, mut rx: mpsc::Receiver<Queued>, stop: CancellationToken) {
        // The engine drops what does not fit its write buffer, unseen: past half a
        // buffer handed over (or when the queue is empty), the writer waits for the
        // engine to write it (our queue fills meanwhile, and what overflows it is
        // counted).
        let mut batch = Batch::default();
        loop {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(queued) => {
                        self.hand(&queued, &mut batch);
                        self.inner.pending.fetch_sub(1, Ordering::Relaxed);
                        if batch.bytes >= self.inner.buffer as u64 / 2 || rx.is_empty() {
                            self.settle(&mut batch).await;
                        }
                    }
                    None => break,
                },
                () = stop.cancelled() => {
                    rx.close();
                    while let Ok(queued) = rx.try_recv() {
                        self.hand(&queued, &mut batch);
                        self.inner.pending.fetch_sub(1, Ordering::Relaxed);
                        if batch.bytes >= self.inner.buffer as u64 / 2 {
                            self.settle(&mut batch).await;
                        }
                    }
                    break;
                }
            }
        }
        self.settle(&mut batch).await;
        self.inner.tally.save();
        if let Err(e) = self.inner.engine.close().await {
            tracing::warn!(error = %e, "disk tier did not close cleanly");
        }
        self.inner.hold.release();
    }

    /// Hands one record to the engine, unless purged since it was queued, too
    /// large, or the disk stopped taking writes.
    fn hand(&self, queued: &Queued, batch: &mut Batch) {
        let s = &*self.inner;
        let Queued {
            key,
            entry,
            stamp,
            bytes,
        } = queued;
        s.pending_bytes.fetch_sub(*bytes, Ordering::Relaxed);
        if !s.writable.load(Ordering::Relaxed) {
            s.stats.write_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.purged_since(key, *stamp) {
            s.stats.purged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let record = format::encode(key, entry, stamp.as_micros(), s.max_record);
        if record.len() > s.max_record {
            s.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return;
        }
        batch.records += 1;
        batch.bytes += record.len() as u64;
        batch.room += tally::on_disk(key.len() + record.len());
        // The engine takes a record as an entry of its memory cache: handed over,
        // then let go there (it keeps its own reference until written).
        let held = s.pieces.insert(key.to_owned(), Record(record));
        s.engine.enqueue(held.piece(), true);
        drop(held);
        drop(s.pieces.remove(key));
    }

    /// Waits until the engine has written what was handed, then counts the batch:
    /// written, or lost to a write that failed (which stops writes, with one
    /// warning, until the probe finds the disk taking them again).
    async fn settle(&self, batch: &mut Batch) {
        let s = &*self.inner;
        let handed = std::mem::take(batch);
        s.engine.wait().await;
        match s.write_faults.take() {
            None => {
                s.stats.writes.fetch_add(handed.records, Ordering::Relaxed);
                s.stats
                    .written_bytes
                    .fetch_add(handed.bytes, Ordering::Relaxed);
                s.tally.add_many(handed.records, handed.room);
            }
            Some(error) => {
                s.stats
                    .write_failures
                    .fetch_add(handed.records, Ordering::Relaxed);
                self.stop_writes(&error);
            }
        }
    }
}
