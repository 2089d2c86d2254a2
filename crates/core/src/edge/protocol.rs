//! The HTTP settings of a listener (its limits) and the hyper-util builders they
//! make: one for HTTP/1.1, one for HTTP/2, and the auto-detecting one for what
//! neither the first bytes nor ALPN told.

use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;

use mdproxy_config::{HYPER_MAX_HEADERS, ServerConfig};

use super::streams::ConnExecutor;

/// What one listener allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; past it new ones are refused with a 503.
    pub max_connections: usize,
    /// Connections from one client address.
    pub max_per_client: usize,
    /// How long a client may take to send a request's headers (hyper starts the
    /// timer when it waits for a request, so it also ends idle keep-alives).
    pub header_read_timeout: Duration,
    /// How long a write to the client may make no progress before the
    /// connection is closed (`server.send_timeout_ms`).
    pub send_timeout: Duration,
    pub keep_alive: bool,
    pub max_headers: usize,
    /// Largest request head; hyper's read buffer (at least 8192).
    pub max_header_bytes: usize,
    /// Clear-text HTTP/1.1 `GET`s on the bare socket's keep-alive loop (where the
    /// listener has its streams), not hyper's (`server.bare_http1`).
    pub bare_http1: bool,
    /// Streams one HTTP/2 connection may have open at once.
    pub h2_max_streams: u32,
    /// Silence from an HTTP/2 client with streams open after which it is pinged
    /// (`server.h2_ping_secs`); `None`: never.
    pub h2_ping: Option<Duration>,
}

impl From<&ServerConfig> for ConnectionLimits {
    fn from(server: &ServerConfig) -> ConnectionLimits {
        let share =
            server.max_connections * server.max_connections_per_client_percent as usize / 100;
        ConnectionLimits {
            max_connections: server.max_connections,
            max_per_client: share.max(1),
            header_read_timeout: Duration::from_millis(server.header_read_timeout_ms),
            send_timeout: Duration::from_millis(server.send_timeout_ms),
            keep_alive: server.keep_alive,
            max_headers: server.max_headers,
            max_header_bytes: server.max_header_bytes,
            bare_http1: server.bare_http1,
            h2_max_streams: server.h2_max_streams,
            h2_ping: (server.h2_ping_secs > 0).then(|| Duration::from_secs(server.h2_ping_secs)),
        }
    }
}

impl ConnectionLimits {
    /// Limits for an internal listener (admin, simulator): `max` connections,
    /// `per_client` from one address, and its own header timeout (writes get the
    /// default send timeout, a minute).
    pub fn internal(
        max: usize,
        per_client: usize,
        header_read_timeout: Duration,
    ) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: max,
            max_per_client: per_client,
            header_read_timeout,
            send_timeout: Duration::from_secs(60),
            keep_alive: true,
            max_headers: HYPER_MAX_HEADERS,
            max_header_bytes: 16 * 1024,
            bare_http1: false,
            h2_max_streams: 32,
            h2_ping: None,
        }
    }
}

/// How long an HTTP/2 PING may go unanswered before the connection is closed.
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// The connection builder for `limits`: HTTP/1.1 and HTTP/2 on one listener.
pub(crate) fn builder(limits: &ConnectionLimits) -> auto::Builder<TokioExecutor> {
    builder_with(limits, TokioExecutor::new())
}

/// The connection builder for `limits` whose HTTP/2 streams go to `executor`.
fn builder_with<E>(limits: &ConnectionLimits, executor: E) -> auto::Builder<E> {
    let mut builder = auto::Builder::new(executor);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(limits.keep_alive)
        .max_buf_size(limits.max_header_bytes.max(8192));
    // Only when it differs from hyper's own: with a limit set, hyper fills arrays of
    // that many entries for every request it parses; without, it keeps them
    // uninitialised on the stack (the same limit, at no cost).
    if limits.max_headers != HYPER_MAX_HEADERS {
        builder.http1().max_headers(limits.max_headers);
    }
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_max_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        // Pings find peers that went away without closing (a laptop lid), when asked.
        .keep_alive_interval(limits.h2_ping)
        .keep_alive_timeout(H2_PING_TIMEOUT);
    builder
}

/// Which protocol a connection speaks, when known before hyper reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    H1,
    H2,
    Unknown,
}

/// The protocol TLS's ALPN chose for a connection; none chosen is HTTP/1.1 (HTTP/2
/// over TLS is chosen by ALPN, RFC 9113 §3.2). Never unknown: the auto builder's
/// wait for a first byte has no timer, and a client that says nothing after the
/// handshake would hold its slot for good.
pub(crate) fn by_alpn(alpn: Option<&[u8]>) -> Protocol {
    match alpn {
        Some(b"h2") => Protocol::H2,
        _ => Protocol::H1,
    }
}

/// The builder for each case. A connection whose protocol is known (ALPN, or its
/// first bytes peeked) is served by a single-protocol builder: the auto builder's
/// own detection reads the first bytes itself and hands them back to hyper, whose
/// HTTP/1 read buffer then grows to twice its size for the whole connection (16 KiB
/// instead of 8 per open stream). It serves only what stays undecided.
///
/// hyper's HTTP/1 read buffer is reused only when no request holds it: after
/// parsing a request, hyper reads the socket once more to notice an early close
/// before it polls the service's future, and a request still alive then (its URI and
/// header values share the buffer) makes hyper read into a new 8 KiB one (about 450
/// instructions of a 16,000-instruction hit under callgrind). So the edge answers
/// whatever it can inside the service call and lets the request go there, as the
/// load comparison's bare server does (see `Edge::handle`). `half_close(true)` would
/// also avoid that read, but a stream that hyper serves (over TLS, or on a
/// kept-alive connection) would then learn of its client's hang-up only when a
/// write fails, up to two keep-alives later.
///
/// A connection known to speak HTTP/2 gets a builder of its own instead
/// ([`for_h2`](Builders::for_h2)), whose executor keeps its streams in its task.
pub(crate) struct Builders {
    limits: ConnectionLimits,
    auto: auto::Builder<TokioExecutor>,
    h1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Builders {
    pub(crate) fn new(limits: &ConnectionLimits) -> Builders {
        let auto = builder(limits);
        Builders {
            limits: *limits,
            h1: auto.clone().http1_only(),
            h2: auto.clone().http2_only(),
            auto,
        }
    }

    /// The builder of one HTTP/2 connection whose streams run in its own task
    /// (see [`streams`](super::streams)).
    pub(crate) fn for_h2(&self, executor: ConnExecutor) -> auto::Builder<ConnExecutor> {
        builder_with(&self.limits, executor).http2_only()
    }

    /// The limits the builders were made with.
    pub(crate) fn limits(&self) -> &ConnectionLimits {
        &self.limits
    }

    pub(crate) fn pick(&self, protocol: Protocol) -> &auto::Builder<TokioExecutor> {
        match protocol {
            Protocol::H1 => &self.h1,
            Protocol::H2 => &self.h2,
            Protocol::Unknown => &self.auto,
        }
    }
}
