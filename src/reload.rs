//! Configuration reload: on SIGHUP and when the file changes (polled), a valid file is
//! applied without dropping connections or the cache; an invalid one is refused with
//! a log line naming the key, and the old configuration stays.
//!
//! The file is polled (content hash every `server.reload_poll_ms`) rather than watched
//! with inotify: polling also sees editors that replace the file by renaming and
//! Kubernetes ConfigMaps that swap a symlink, and costs one small read a few seconds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::proxy::AppState;

/// Reads environment overrides (injected so tests never touch the environment).
pub type Lookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Loads `path` and applies it to `state`.
///
/// # Errors
/// The reason the file was refused; the running configuration is unchanged.
pub fn reload(state: &AppState, path: &Path, lookup: &Lookup) -> Result<(), String> {
    let config = Config::load(path, |k| lookup(k)).map_err(|e| e.to_string())?;
    let restart = state.reload(config)?;
    let generation = state.snapshot().generation;
    if restart.is_empty() {
        tracing::info!(path = %path.display(), generation, "configuration reloaded");
    } else {
        tracing::warn!(
            path = %path.display(),
            generation,
            needs_restart = ?restart,
            "configuration reloaded; these keys apply only after a restart"
        );
    }
    Ok(())
}

fn fingerprint(path: &Path) -> Option<u64> {
    std::fs::read(path)
        .ok()
        .map(|bytes| xxhash_rust::xxh3::xxh3_64(&bytes))
}

/// Watches `path` until `stop`: reloads on SIGHUP and on every content change.
pub fn spawn(
    state: AppState,
    path: PathBuf,
    lookup: Lookup,
    poll: Duration,
    stop: CancellationToken,
) -> JoinHandle<()> {
    // Installed before the task starts: a SIGHUP that arrives early must find our
    // handler, not the default action (which ends the process).
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    tokio::spawn(async move {
        let mut seen = fingerprint(&path);
        let mut ticker = tokio::time::interval(if poll.is_zero() {
            Duration::from_secs(3600)
        } else {
            poll
        });
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let hup = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hup = std::future::pending::<Option<()>>();
            let forced = tokio::select! {
                () = stop.cancelled() => return,
                _ = hup => true,
                _ = ticker.tick(), if !poll.is_zero() => false,
            };
            let now = fingerprint(&path);
            if !forced && now == seen {
                continue;
            }
            seen = now;
            if let Err(e) = reload(&state, &path, &lookup) {
                tracing::error!(path = %path.display(), error = %e, "configuration refused; keeping the running one");
            }
        }
    })
}
