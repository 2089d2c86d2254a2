//! The log: its set-up (stderr, text or JSON lines, written by a background thread,
//! one line an event whatever a client sent), and rate-limited warnings: a warning
//! that repeats (every request for a stale key while the upstream is down) is written
//! at most once per interval per kind, with the number of occurrences it stands for,
//! instead of once per request.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Logs to stderr, filtered by `filter` (tokio-cron-scheduler's own chatter is
/// kept at `warn`, and the disk engine's off, unless the filter names them), as text or JSON lines. Lines are
/// written by a background thread (tracing-appender), so a slow stderr (a pipe to
/// journald under load) never blocks a worker in the middle of a request; when its
/// buffer is full, logging waits rather than dropping lines. The returned guard
/// flushes it. With `telemetry`, its layer exports the request spans; the log
/// leaves them out (its lines do not change).
///
/// A text line escapes the control characters of every value in it ([`Escaping`]):
/// a purge prefix, a request target or a header a client sent with `%0a` in it
/// cannot start a line of its own. JSON lines are escaped by JSON itself.
pub fn init(
    filter: &str,
    format: mdproxy_config::LogFormat,
    telemetry: Option<&crate::telemetry::Telemetry>,
) -> tracing_appender::non_blocking::WorkerGuard {
    let mut directives = filter.to_owned();
    if !directives.contains("tokio_cron_scheduler") {
        directives.push_str(",tokio_cron_scheduler=warn");
    }
    // The disk engine logs an error per failed block write; the disk tier says
    // once that the disk fails (and when it recovers) instead.
    if !directives.contains("foyer") {
        directives.push_str(",foyer_storage=off,foyer_memory=warn,foyer=warn");
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("warning: log filter {filter:?} is invalid ({e}); using info");
        tracing_subscriber::EnvFilter::new("info,tokio_cron_scheduler=warn,foyer_storage=off")
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
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        // Colours only on a terminal: journald and log files get plain text.
        mdproxy_config::LogFormat::Text => builder
            .with_writer(Escaping::new(writer, ansi))
            .with_ansi(ansi)
            .init(),
        mdproxy_config::LogFormat::Json => builder
            .with_writer(writer)
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    guard
}

/// Makes writers that write each text log line with its control characters escaped
/// (`\n`, `\r`, `\t`, `\x1b`, `\u{85}`...), the newline that ends it aside. One
/// place for every value a client or an admin controls (targets, purge prefixes,
/// request IDs, user agents, origins), wherever it is logged, and for `%` (Display)
/// fields, which tracing-subscriber writes raw. A line without control characters
/// (nearly all) is written as it came.
///
/// With colours on (a terminal) ESC is kept: the colours are made of it, and
/// tracing-subscriber already escapes it inside messages and quoted values.
#[derive(Debug)]
pub struct Escaping<M> {
    inner: M,
    keep_esc: bool,
}

impl<M> Escaping<M> {
    /// Escaping over `inner`'s writers; `ansi`: the lines carry colours.
    pub fn new(inner: M, ansi: bool) -> Escaping<M> {
        Escaping {
            inner,
            keep_esc: ansi,
        }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Escaping<M> {
    type Writer = EscapingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        EscapingWriter {
            inner: self.inner.make_writer(),
            keep_esc: self.keep_esc,
        }
    }
}

/// One event's writer of [`Escaping`]: the formatter hands it the whole line in one
/// `write_all`.
#[derive(Debug)]
pub struct EscapingWriter<W> {
    inner: W,
    keep_esc: bool,
}

impl<W: Write> Write for EscapingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match escaped(buf, self.keep_esc) {
            Some(line) => self.inner.write_all(&line)?,
            None => self.inner.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `line` with its control characters escaped, but for a last `\n` (and ESC when
/// `keep_esc`); `None` when it has none (or is not UTF-8: the formatter only writes
/// UTF-8, so that never happens).
fn escaped(line: &[u8], keep_esc: bool) -> Option<Vec<u8>> {
    let (body, end) = match line.split_last() {
        Some((b'\n', body)) => (body, &b"\n"[..]),
        _ => (line, &b""[..]),
    };
    let escapes = |c: char| c.is_control() && !(keep_esc && c == '\x1b');
    // The fast path looks at bytes: C0 and DEL are single bytes, C1 is 0xC2 0x80..=0x9F.
    if !body.iter().any(|&b| b < 0x20 || b == 0x7f || b == 0xc2) {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    if !text.chars().any(escapes) {
        return None;
    }
    let mut out = String::with_capacity(body.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            c if escapes(c) && c.is_ascii() => out.push_str(&format!(r"\x{:02x}", c as u32)),
            c if escapes(c) => out.push_str(&format!(r"\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    let mut out = out.into_bytes();
    out.extend_from_slice(end);
    Some(out)
}

/// [`init`] with traces on: the same log, filtered per layer (so the spans of
/// [`crate::telemetry::TARGET`] never reach it), beside the telemetry layer.
fn traced(
    filter: tracing_subscriber::EnvFilter,
    format: mdproxy_config::LogFormat,
    ansi: bool,
    writer: tracing_appender::non_blocking::NonBlocking,
    telemetry: &crate::telemetry::Telemetry,
) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let untraced = filter_fn(|meta| meta.target() != crate::telemetry::TARGET);
    let log = tracing_subscriber::fmt::layer();
    let log = match format {
        mdproxy_config::LogFormat::Text => log
            .with_writer(Escaping::new(writer, ansi))
            .with_ansi(ansi)
            .boxed(),
        mdproxy_config::LogFormat::Json => log
            .with_writer(writer)
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

    fn escape(line: &str, keep_esc: bool) -> String {
        let bytes = escaped(line.as_bytes(), keep_esc).unwrap_or_else(|| line.as_bytes().to_vec());
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn control_characters_in_a_line_are_escaped() {
        let forged = "INFO purged prefix=/stock/\nINFO forged=1\r\tx\x00\x7f\u{85}\x1b[31m\n";
        assert_eq!(
            escape(forged, false),
            r"INFO purged prefix=/stock/\nINFO forged=1\r\tx\x00\x7f\u{85}\x1b[31m".to_owned()
                + "\n"
        );
        assert_eq!(
            escape("\x1b[2mINFO\x1b[0m a\nb\n", true),
            "\x1b[2mINFO\x1b[0m a\\nb\n"
        );
        assert_eq!(escaped("INFO plain line, été\n".as_bytes(), false), None);
        assert_eq!(escaped("INFO 平安银行\n".as_bytes(), false), None);
        assert_eq!(
            escape("two newlines at the end\n\n", false),
            "two newlines at the end\\n\n"
        );
    }

    #[test]
    fn the_writer_writes_one_line_per_event() {
        let mut sink = Vec::new();
        let mut w = EscapingWriter {
            inner: &mut sink,
            keep_esc: false,
        };
        w.write_all(b"a=1\nforged\n").unwrap();
        w.write_all(b"b=2\n").unwrap();
        assert_eq!(sink, b"a=1\\nforged\nb=2\n");
    }

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
