//! The log: its set-up (stderr, text or JSON lines, written by a background thread),
//! and rate-limited warnings: a warning that repeats (every request for a stale key
//! while the upstream is down) is written at most once per interval per kind, with
//! the number of occurrences it stands for, instead of once per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Logs to stderr, filtered by `filter` (tokio-cron-scheduler's own chatter is
/// kept at `warn` unless the filter names it), as text or JSON lines. Lines are
/// written by a background thread (tracing-appender), so a slow stderr (a pipe to
/// journald under load) never blocks a worker in the middle of a request; when its
/// buffer is full, logging waits rather than dropping lines. The returned guard
/// flushes it. With `telemetry`, its layer exports the request spans; the log
/// leaves them out (its lines do not change).
pub fn init(
    filter: &str,
    format: crate::config::LogFormat,
    telemetry: Option<&crate::telemetry::Telemetry>,
) -> tracing_appender::non_blocking::WorkerGuard {
    let mut directives = filter.to_owned();
    if !directives.contains("tokio_cron_scheduler") {
        directives.push_str(",tokio_cron_scheduler=warn");
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("warning: log filter {filter:?} is invalid ({e}); using info");
        tracing_subscriber::EnvFilter::new("info,tokio_cron_scheduler=warn")
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("mdproxy-log")
        .finish(std::io::stderr());
    if let Some(telemetry) = telemetry {
        traced(filter, format, ansi, writer, telemetry);
        return guard;
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        // Colours only on a terminal: journald and log files get plain text.
        crate::config::LogFormat::Text => builder.with_ansi(ansi).init(),
        crate::config::LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    guard
}

/// [`init`] with traces on: the same log, filtered per layer (so the spans of
/// [`crate::telemetry::TARGET`] never reach it), beside the telemetry layer.
fn traced(
    filter: tracing_subscriber::EnvFilter,
    format: crate::config::LogFormat,
    ansi: bool,
    writer: tracing_appender::non_blocking::NonBlocking,
    telemetry: &crate::telemetry::Telemetry,
) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let untraced = filter_fn(|meta| meta.target() != crate::telemetry::TARGET);
    let log = tracing_subscriber::fmt::layer().with_writer(writer);
    let log = match format {
        crate::config::LogFormat::Text => log.with_ansi(ansi).boxed(),
        crate::config::LogFormat::Json => log
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .with(log.with_filter(filter.and(untraced)))
        .init();
}

/// A warning kind: what happened and why (both static labels).
pub type Kind = (&'static str, &'static str);

/// Remembers when each kind was last written and how many were held back since.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    kinds: Mutex<HashMap<Kind, (Instant, u64)>>,
}

impl Throttle {
    /// At most one line per kind per `interval`.
    pub fn new(interval: Duration) -> Throttle {
        Throttle {
            interval,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(n)` when a line for `kind` may be written now, `n` being how many were
    /// held back since the last one; `None` when this one is held back.
    pub fn admit(&self, kind: Kind) -> Option<u64> {
        let now = Instant::now();
        let mut kinds = self.kinds.lock().expect("throttle lock is never poisoned");
        match kinds.get_mut(&kind) {
            Some((last, held)) if now.duration_since(*last) < self.interval => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                *last = now;
                Some(std::mem::take(held))
            }
            None => {
                kinds.insert(kind, (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_kind_per_interval_with_a_count() {
        let t = Throttle::new(Duration::from_secs(3600));
        assert_eq!(t.admit(("stale", "timeout")), Some(0));
        assert_eq!(t.admit(("stale", "timeout")), None);
        assert_eq!(t.admit(("stale", "timeout")), None);
        assert_eq!(t.admit(("stale", "unreachable")), Some(0), "another kind");
        let t = Throttle::new(Duration::ZERO);
        assert_eq!(t.admit(("a", "b")), Some(0));
        assert_eq!(t.admit(("a", "b")), Some(0));
    }
}
