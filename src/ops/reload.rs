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

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ConfigError, Env};
use crate::stats::Stats;

/// Where environment overrides come from (injected so tests never touch the
/// environment): a lookup function, or a [`crate::config::ProcessEnv`] that also
/// lists the variables set, so a misspelt one refuses the file.
pub type Lookup = Arc<dyn Env + Send + Sync>;

/// What an applied configuration reports: its generation and the keys that only a
/// restart can change.
pub struct Applied {
    pub generation: u64,
    pub needs_restart: Vec<&'static str>,
}

/// Applies a validated configuration to the running application.
pub type Apply = Arc<dyn Fn(Config) -> Result<Applied, String> + Send + Sync>;

/// Loads and checks `path` with overrides from `env`: the config's own keys, then
/// the checks their owners make (the scheduler's cron expressions and targets,
/// `[telemetry]` with the `OTEL_*` variables), all reported together.
///
/// # Errors
/// A [`ConfigError`] listing every problem with its line or variable.
pub fn load(path: &Path, env: &dyn Env) -> Result<Config, ConfigError> {
    Config::load_checked(path, env, &|config| {
        let mut problems = crate::ops::scheduler::problems(&config.scheduler.jobs);
        problems.extend(crate::telemetry::problems(&config.telemetry, env));
        problems
    })
}

/// Loads `path` and applies it; returns the generation applied.
///
/// # Errors
/// The reason the file was refused; the running configuration is unchanged.
pub fn reload(path: &Path, lookup: &Lookup, apply: &Apply) -> Result<u64, String> {
    let config = load(path, lookup.as_ref()).map_err(|e| e.to_string())?;
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
        .map(|bytes| xxhash_rust::xxh3::xxh3_64(&bytes))
}

/// Watches `path` until `stop`, as a task of `tracker`: reloads on SIGHUP and on
/// every content change; a refused file is logged and counted in `stats`.
pub fn spawn(
    path: PathBuf,
    lookup: Lookup,
    apply: Apply,
    stats: Arc<Stats>,
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
            if !forced && now == seen {
                continue;
            }
            seen = now;
            match reload(&path, &lookup, &apply) {
                Ok(generation) => stats.reloaded(true, format!("generation {generation} applied")),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "configuration refused; keeping the running one");
                    stats.reloaded(false, e);
                }
            }
        }
    });
}
