//! Whether the disk tier's disk takes writes: its directory still the one opened,
//! room on its file system for the engine's next writes, a probe file written and
//! synced, and no write of the engine failed. A failure stops writes with one
//! warning (reads go on: what is on disk stays readable); the probe, every
//! [`PROBE_EVERY`], starts them again with one notice once all of that holds.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Disk;

/// How often the disk is checked (a failing one tried again).
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(10);

/// The probe file's name in `cache.disk_path`.
pub(super) const PROBE_FILE: &str = "mdproxy-probe";

impl Disk {
    /// Checks the disk every [`PROBE_EVERY`] until `stop`.
    pub(super) async fn probe_until(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(PROBE_EVERY) => {}
                () = stop.cancelled() => return,
            }
            self.check().await;
        }
    }

    /// One check of the disk (also run by tests instead of waiting for the timer):
    /// stops writes with one warning when it fails, starts them again with one
    /// notice when it passes after a failure.
    pub async fn check(&self) {
        let s = &*self.inner;
        let (path, margin) = (s.path.clone(), 2 * s.buffer as u64);
        let probed = tokio::task::spawn_blocking(move || probe(&path, margin))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        let failed = if s.hold.still_there() {
            // A write of the engine that failed since the last look counts too.
            s.write_faults.take().map_or(probed, Err)
        } else {
            Err("the directory was deleted or replaced: the tier's files went with it (restart to use the new one)".into())
        };
        match failed {
            Err(error) => self.stop_writes(&error),
            Ok(()) => {
                *s.failure
                    .lock()
                    .expect("the failure lock is never poisoned") = None;
                if !s.writable.swap(true, Ordering::AcqRel) {
                    tracing::info!(path = %s.path.display(), "disk tier writable again: writes resume");
                }
            }
        }
    }

    /// Why writes are stopped, while they are.
    pub fn failure(&self) -> Option<String> {
        self.inner
            .failure
            .lock()
            .expect("the failure lock is never poisoned")
            .clone()
    }

    /// Stops writes, with a warning if they were going on.
    pub(super) fn stop_writes(&self, error: &str) {
        let s = &*self.inner;
        *s.failure
            .lock()
            .expect("the failure lock is never poisoned") = Some(error.to_owned());
        if s.writable.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                path = %s.path.display(),
                error,
                "disk tier failing: serving what it holds and memory, writes stop until the disk takes them again"
            );
        }
    }
}

/// Whether `dir` takes the engine's next writes: `margin` bytes free on its file
/// system (a probe of a few KiB would pass on a full one, whose truncated probe
/// file frees the block it rewrites), then a probe file written and synced.
pub(super) fn probe(dir: &Path, margin: u64) -> Result<(), String> {
    use std::io::Write;
    let stat = rustix::fs::statvfs(dir).map_err(|e| format!("cannot read the file system: {e}"))?;
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    if free < margin {
        return Err(format!(
            "the file system is full: {free} bytes free, the engine's next writes need {margin}"
        ));
    }
    let mut file = std::fs::File::create(dir.join(PROBE_FILE)).map_err(|e| e.to_string())?;
    file.write_all(&[0u8; 4096]).map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())
}
