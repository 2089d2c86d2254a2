//! Configuration reload: on SIGHUP and when the file changes (polled), a valid file is
//! applied without dropping connections or the cache; an invalid one is refused with
//! a log line naming the key, and the old configuration stays.
//!
//! The file is polled (content hash every `server.reload_poll_ms`) rather than watched
//! with inotify: polling also sees editors that replace the file by renaming and
//! Kubernetes ConfigMaps that swap a symlink, and costs one small read a few seconds.
//! A changed file is loaded once two polls in a row read the same content: a file
//! caught half-written (truncated, then written) has changed again by the next poll.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ops::reload_log::ReloadLog;
use mdproxy_config::{Check, Config, Env, Problems};

/// Where environment overrides come from (injected so tests never touch the
/// environment): a lookup function, or a [`mdproxy_config::ProcessEnv`] that also
/// lists the variables set, so a misspelt one refuses the file.
pub type Lookup = Arc<dyn Env + Send + Sync>;

/// What an applied configuration reports: its generation and the keys that only a
/// restart can change.
pub struct Applied {
    pub generation: u64,
    pub needs_restart: Vec<&'static str>,
}

/// Applies a validated configuration to the running application.
pub type Apply = Arc<dyn Fn(Config) -> Result<Applied, ReloadError> + Send + Sync>;

/// Why a reload was refused; the running configuration stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not load: every problem, with its line or variable.
    #[error(transparent)]
    Invalid(#[from] Problems),
    /// The TLS files it names do not load as a pair.
    #[error(transparent)]
    Tls(#[from] crate::edge::tls::Refused),
    /// An upstream client for its `[upstream]` could not be built.
    #[error(transparent)]
    Upstream(#[from] crate::upstream::client::ClientError),
}

/// The checks other modules own that `check-config`, `serve` and a reload run with
/// the config's own (the TLS files are checked where they load): pure, but for the
/// disk tier's place (its directory's metadata and lock).
pub const CHECKS: &[Check] = &[
    crate::cache::disk::place::check,
    crate::ops::scheduler::check,
    crate::ops::probe::check,
    crate::telemetry::check,
];

/// Loads and checks `path` with overrides from `env`: the config's own keys, then
/// [`CHECKS`] (the scheduler's cron expressions and targets, the probe target,
/// `[telemetry]` with the `OTEL_*` variables), all reported together.
///
/// # Errors
/// [`Problems`], every one with its line or variable.
pub fn load(path: &Path, env: &dyn Env) -> Result<Config, Problems> {
    mdproxy_config::load(path, env, CHECKS)
}

/// Loads `path` and applies it; returns the generation applied.
///
/// # Errors
/// The reason the file was refused; the running configuration is unchanged.
pub fn reload(path: &Path, lookup: &Lookup, apply: &Apply) -> Result<u64, ReloadError> {
    let config = load(path, lookup.as_ref())?;
    let Applied {
        generation,
        needs_restart: restart,
    } = apply(config)?;
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
    Ok(generation)
}

fn fingerprint(path: &Path) -> Option<u64> {
    std::fs::read(path)
        .ok()
        .map(|bytes| twox_hash::XxHash3_64::oneshot(&bytes))
}

/// Watches `path` until `stop`, as a task of `tracker`: reloads on SIGHUP and on
/// every content change; each attempt goes to `log` (a refused file is logged too).
pub fn spawn(
    path: PathBuf,
    lookup: Lookup,
    apply: Apply,
    log: Arc<ReloadLog>,
    poll: Duration,
    stop: CancellationToken,
    tracker: &TaskTracker,
) {
    // Installed before the task starts: a SIGHUP that arrives early must find our
    // handler, not the default action (which ends the process).
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    // Read before the task starts, so a change made right after this call is seen.
    let mut seen = fingerprint(&path);
    // A change seen by the last poll, loaded if this poll reads it again.
    let mut settling = None;
    tracker.spawn(async move {
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
            if !forced {
                if now == seen {
                    settling = None;
                    continue;
                }
                if settling != Some(now) {
                    settling = Some(now);
                    continue;
                }
            }
            settling = None;
            seen = now;
            match reload(&path, &lookup, &apply) {
                Ok(generation) => log.record(true, format!("generation {generation} applied")),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "configuration refused; keeping the running one");
                    log.record(false, e.to_string());
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    /// Defect: a poll that caught the file half-written (truncated, then written)
    /// applied what was there so far when, with the required keys in the
    /// environment, it happened to be valid (`upstream_rps = 3` of a `30`). A change
    /// is applied once two polls in a row read the same content.
    #[tokio::test(start_paused = true)]
    async fn a_file_caught_half_written_is_not_applied() {
        let dir = std::env::temp_dir().join(format!("mdproxy-settle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mdproxy.toml");
        let file =
            |rps: u32| format!("[server]\nreload_poll_ms = 1000\n[limits]\nupstream_rps = {rps}\n");
        std::fs::write(&path, file(20)).unwrap();
        let env: BTreeMap<String, String> = [
            (
                "MDPROXY_UPSTREAM_BASE_URL",
                "https://api.example.com/api/v1",
            ),
            ("MDPROXY_UPSTREAM_TOKEN", "upstream-key"),
            ("MDPROXY_AUTH_TOKENS", "client-key"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&applied);
        let apply: Apply = Arc::new(move |config: Config| {
            let mut seen = seen.lock().unwrap();
            seen.push(config.limits.upstream_rps);
            Ok(Applied {
                generation: seen.len() as u64,
                needs_restart: Vec::new(),
            })
        });
        let (stop, tracker) = (CancellationToken::new(), TaskTracker::new());
        let poll = Duration::from_secs(1);
        let log = Arc::new(ReloadLog::default());
        spawn(
            path.clone(),
            Arc::new(env),
            apply,
            Arc::clone(&log),
            poll,
            stop.clone(),
            &tracker,
        );
        // Polls at 0 s, 1 s, 2 s...: each step below lands between two of them.
        let half = Duration::from_millis(500);
        tokio::time::sleep(half).await;
        let whole = file(30);
        std::fs::write(&path, &whole[..whole.len() - 2]).unwrap();
        tokio::time::sleep(poll).await;
        std::fs::write(&path, &whole).unwrap();
        tokio::time::sleep(poll).await;
        assert!(applied.lock().unwrap().is_empty(), "nothing settled yet");
        tokio::time::sleep(poll).await;
        assert_eq!(*applied.lock().unwrap(), [30], "only the whole file");
        tokio::time::sleep(poll * 3).await;
        assert_eq!(applied.lock().unwrap().len(), 1, "applied once");
        stop.cancel();
        tracker.close();
        tracker.wait().await;
        std::fs::remove_dir_all(&dir).ok();
    }
}
