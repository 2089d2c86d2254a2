//! What the tier has written over its life, records and their bytes, kept in a small
//! file beside the engine's (replaced whole: written aside, then renamed), so that
//! the estimate of how many records it holds survives a restart: the engine does
//! not count its index, and the mean record of one run alone (a few small answers
//! after a restart, over blocks full of K-lines) says nothing of what is on disk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The file's name in `cache.disk_path`.
const FILE: &str = "mdproxy-tally.json";

/// Records written between two saves (and one at the writer's stop).
const SAVE_EVERY: u64 = 256;

/// The engine's page: it writes every entry from a page's start.
const PAGE: u64 = 4096;

/// The engine's own header before each entry (foyer's `EntryHeader`, with room).
const ENTRY_HEADER: u64 = 32;

/// The room an entry of `key_and_record` bytes takes in the engine's blocks: its
/// header, key and value, rounded up to whole pages.
pub fn on_disk(key_and_record: usize) -> u64 {
    (key_and_record as u64 + ENTRY_HEADER).div_ceil(PAGE) * PAGE
}

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    records: u64,
    bytes: u64,
}

/// Records and bytes written to the tier, this run and those before.
#[derive(Debug)]
pub struct Tally {
    path: PathBuf,
    records: AtomicU64,
    bytes: AtomicU64,
    unsaved: AtomicU64,
}

impl Tally {
    /// The tally of the tier at `dir`: what the file says, or nothing for a new tier
    /// (or a file that does not read: the estimate starts over).
    pub fn open(dir: &Path) -> Tally {
        let path = dir.join(FILE);
        let saved: Saved = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Tally {
            path,
            records: AtomicU64::new(saved.records),
            bytes: AtomicU64::new(saved.bytes),
            unsaved: AtomicU64::new(0),
        }
    }

    /// Writes the tally to its file (aside, then renamed); a failure only costs the
    /// estimate's accuracy after a restart.
    pub fn save(&self) {
        self.unsaved.store(0, Ordering::Relaxed);
        let saved = Saved {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        };
        let aside = self.path.with_extension("json.tmp");
        let written = serde_json::to_vec(&saved)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&aside, bytes))
            .and_then(|()| std::fs::rename(&aside, &self.path));
        if let Err(e) = written {
            tracing::debug!(error = %e, "disk tier: the tally was not saved");
        }
    }

    /// Counts `records` written, taking `room` bytes of the engine's blocks in all;
    /// saves now and then.
    pub fn add_many(&self, records: u64, room: u64) {
        if records == 0 {
            return;
        }
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(room, Ordering::Relaxed);
        if self.unsaved.fetch_add(records, Ordering::Relaxed) + records >= SAVE_EVERY {
            self.save();
        }
    }

    /// The mean room a record took over the tier's life, if any was written.
    pub fn mean_record(&self) -> Option<u64> {
        let records = self.records.load(Ordering::Relaxed);
        (records > 0).then(|| (self.bytes.load(Ordering::Relaxed) / records).max(1))
    }

    /// About how many records `used` bytes of the tier's files hold: `used` over the
    /// mean record, never more than the records written (the files hold the
    /// engine's block indexes too, and the small files beside them).
    pub fn estimate(&self, used: u64) -> u64 {
        let records = self.records.load(Ordering::Relaxed);
        self.mean_record()
            .map_or(0, |mean| (used / mean).min(records))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry takes whole pages, its header included.
    #[test]
    fn an_entry_takes_whole_pages() {
        assert_eq!(on_disk(1), PAGE);
        assert_eq!(on_disk(4096 - 32), PAGE);
        assert_eq!(on_disk(4096 - 31), 2 * PAGE);
    }

    /// The tally reads back after a restart, and a missing or broken file starts
    /// over.
    #[test]
    fn the_tally_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("mdproxy-tally-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tally = Tally::open(&dir);
        assert_eq!(tally.mean_record(), None);
        tally.add_many(10, 10_000);
        tally.add_many(1, 12_000);
        tally.save();
        let again = Tally::open(&dir);
        assert_eq!(again.mean_record(), Some(2_000));
        // The files hold indexes besides: never more records than were written.
        assert_eq!(again.estimate(1 << 30), 11);
        assert_eq!(again.estimate(10_000), 5);
        std::fs::write(dir.join(FILE), b"not json").unwrap();
        assert_eq!(Tally::open(&dir).mean_record(), None);
        std::fs::remove_dir_all(&dir).ok();
    }
}
