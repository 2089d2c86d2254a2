//! Listeners and connections: the accept loop, TLS (when configured), hyper-util's
//! auto builder (HTTP/1.1 with keep-alive, header read timeout and header limits,
//! and HTTP/2 over TLS by ALPN or in clear text by prior knowledge), the connection
//! limits (in all and per client address, answered `503` at once rather than left in
//! the backlog), and graceful shutdown (each connection drained, then closed when the
//! grace runs out, by its [`Closer`]). What a request means is the handler's
//! business.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

use crate::closing::Closer;
use crate::config::{HYPER_MAX_HEADERS, ServerConfig};
use crate::edge::body::Body;
use crate::edge::sse::{self, Taken};
use crate::edge::tls::Tls;
use crate::error::Error;
use crate::hub::Outlet;

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
    pub keep_alive: bool,
    pub max_headers: usize,
    /// Largest request head; hyper's read buffer (at least 8192).
    pub max_header_bytes: usize,
    /// Streams one HTTP/2 connection may have open at once.
    pub h2_max_streams: u32,
}

impl From<&ServerConfig> for ConnectionLimits {
    fn from(server: &ServerConfig) -> ConnectionLimits {
        let share =
            server.max_connections * server.max_connections_per_client_percent as usize / 100;
        ConnectionLimits {
            max_connections: server.max_connections,
            max_per_client: share.max(1),
            header_read_timeout: Duration::from_millis(server.header_read_timeout_ms),
            keep_alive: server.keep_alive,
            max_headers: server.max_headers,
            max_header_bytes: server.max_header_bytes,
            h2_max_streams: server.h2_max_streams,
        }
    }
}

impl ConnectionLimits {
    /// Limits for an internal listener (admin, simulator): `max` connections,
    /// `per_client` from one address, and its own header timeout.
    pub fn internal(
        max: usize,
        per_client: usize,
        header_read_timeout: Duration,
    ) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: max,
            max_per_client: per_client,
            header_read_timeout,
            keep_alive: true,
            max_headers: HYPER_MAX_HEADERS,
            max_header_bytes: 16 * 1024,
            h2_max_streams: 32,
        }
    }
}

/// The connection a request came on: the client's address (for the access log)
/// and the handle that closes it (the hub uses it to disconnect a subscriber that
/// stopped reading).
#[derive(Clone, Debug)]
pub struct Connection {
    pub peer: SocketAddr,
    pub close: Closer,
    /// The bare socket of a stream request, which the hub may write to itself.
    pub outlet: Option<Arc<dyn Outlet>>,
}

/// Answers a request whose response is written on the bare socket.
pub type StreamHandler =
    Arc<dyn Fn(Request<()>, Arc<Connection>) -> BoxFuture<'static, Response<Body>> + Send + Sync>;

/// Long-lived event streams served without hyper (see [`sse`]): plain HTTP/1.1
/// `GET`s of `path`, answered by `handler` (the same handler as every request).
#[derive(Clone)]
pub struct Streams {
    pub path: String,
    pub handler: StreamHandler,
}

/// How long a refused connection is given to send its request and take the 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Refusals answered at once; past this many in flight a new connection is dropped
/// without an answer (a flood must not turn the answers into the next flood).
const MAX_REFUSALS_IN_FLIGHT: usize = 1_024;

/// Open connections, in all and per client address, and the handles that drain and
/// close them at shutdown; one lock, taken when a connection comes and when it goes.
#[derive(Default)]
struct Occupancy {
    table: Mutex<Table>,
    refusing: AtomicUsize,
    /// Told when the last open connection goes.
    emptied: Notify,
}

#[derive(Default)]
struct Table {
    /// Every open connection's closer, by its id (their number is the total).
    open: HashMap<u64, Closer>,
    per_client: HashMap<IpAddr, usize>,
    next: u64,
}

/// One admitted connection; frees its slot when dropped.
struct Slot {
    occupancy: Arc<Occupancy>,
    ip: IpAddr,
    id: u64,
}

impl Occupancy {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("occupancy lock is never poisoned")
    }

    /// A slot for a connection from `ip`, closed by `close`, or why not.
    fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        limits: &ConnectionLimits,
        close: Closer,
    ) -> Result<Slot, &'static str> {
        let mut table = self.table();
        if table.open.len() >= limits.max_connections {
            return Err("the proxy serves its maximum number of connections");
        }
        let mine = table.per_client.entry(ip).or_default();
        if *mine >= limits.max_per_client {
            return Err("this client address holds its maximum number of connections");
        }
        *mine += 1;
        let id = table.next;
        table.next += 1;
        table.open.insert(id, close);
        Ok(Slot {
            occupancy: Arc::clone(self),
            ip,
            id,
        })
    }

    /// Drains every open connection (see [`Closer::drain`]).
    fn drain_all(&self) {
        for close in self.table().open.values() {
            close.drain();
        }
    }

    /// Closes every open connection.
    fn close_all(&self) {
        for close in self.table().open.values() {
            close.close();
        }
    }

    /// Returns once no connection is open.
    async fn emptied(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            // Listening before looking: a last connection that goes in between
            // is not missed.
            emptied.as_mut().enable();
            if self.table().open.is_empty() {
                return;
            }
            emptied.await;
        }
    }
}

/// Gives a flood's room back once it has passed (amortised: only when three
/// quarters of the table are free).
fn shrink_after_flood<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        let keep = map.len() * 2;
        map.shrink_to(keep);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.occupancy.table();
        table.open.remove(&self.id);
        shrink_after_flood(&mut table.open);
        if table.open.is_empty() {
            self.occupancy.emptied.notify_waiters();
        }
        if let Some(n) = table.per_client.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                table.per_client.remove(&self.ip);
                shrink_after_flood(&mut table.per_client);
            }
        }
    }
}

/// The connection builder for `limits`: HTTP/1.1 and HTTP/2 on one listener.
fn builder(limits: &ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
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
        // Pings find peers that went away without closing (a laptop lid).
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// Which protocol a connection speaks, when known before hyper reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    H1,
    H2,
    Unknown,
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
struct Builders {
    auto: auto::Builder<TokioExecutor>,
    h1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(auto: auto::Builder<TokioExecutor>) -> Builders {
        Builders {
            h1: auto.clone().http1_only(),
            h2: auto.clone().http2_only(),
            auto,
        }
    }

    fn pick(&self, protocol: Protocol) -> &auto::Builder<TokioExecutor> {
        match protocol {
            Protocol::H1 => &self.h1,
            Protocol::H2 => &self.h2,
            Protocol::Unknown => &self.auto,
        }
    }
}

/// HTTP/2's connection preface (RFC 9113 §3.4), which an h2c client sends first.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection's first bytes, peeked.
struct First {
    bytes: [u8; 24],
    len: usize,
}

impl First {
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Peeks at a new connection's first bytes without consuming them: HTTP/2 when they
/// are the preface, HTTP/1 as soon as they differ from it, unknown when too few
/// have come to tell; `None` when the client closed without a byte.
async fn sniff(stream: &TcpStream) -> Option<(Protocol, First)> {
    let mut bytes = [0u8; 24];
    let len = stream.peek(&mut bytes).await.ok()?;
    let seen = &bytes[..len];
    let protocol = match len {
        0 => return None,
        _ if !H2_PREFACE.starts_with(seen) => Protocol::H1,
        24 => Protocol::H2,
        _ => Protocol::Unknown,
    };
    Some((protocol, First { bytes, len }))
}

/// Serves HTTP/1.1 and HTTP/2 (over TLS when `tls` is given) on `listener` with
/// `handler` until `shutdown` resolves, then stops accepting and waits up to `grace`
/// for open connections to finish. Connections run as tasks of `tracker`. The
/// handler gets each request with its [`Connection`]; `streams` names the event
/// streams written on the bare socket.
#[allow(clippy::too_many_arguments)]
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    streams: Option<Streams>,
    limits: ConnectionLimits,
    tls: Option<Arc<Tls>>,
    grace: Duration,
    tracker: TaskTracker,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>, Arc<Connection>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send + 'static,
{
    let occupancy = Arc::new(Occupancy::default());
    // The address as text ("-" if the socket cannot say), not an `Option`'s Debug.
    let local = listener
        .local_addr()
        .map_or_else(|_| "-".to_owned(), |a| a.to_string());
    let builders = Arc::new(Builders::new(builder(&limits)));
    let streams = streams.map(Arc::new);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Closed by the hub, or by the listener when the grace runs out, so no
        // connection task outlives the listener (the tracker waits for them).
        let close = Closer::new();
        let slot = match occupancy.admit(peer.ip(), &limits, close.clone()) {
            Ok(slot) => slot,
            Err(reason) => {
                refuse(stream, peer, reason, &occupancy, &tracker);
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let served = Served {
            connection: Arc::new(Connection {
                peer,
                close: close.clone(),
                outlet: None,
            }),
            handler: handler.clone(),
            streams: streams.clone(),
            builders: Arc::clone(&builders),
            limits,
        };
        let tls = tls.clone();
        tracker.spawn(async move {
            // Only what every connection needs is held here: each protocol's state
            // is boxed, so a stream on the bare socket is not the size of hyper's.
            let result = async {
                match tls {
                    None => served.plain(stream).await,
                    Some(tls) => Box::pin(served.tls(stream, &tls)).await,
                }
            };
            match close.guard(result).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "connection ended with an error"),
                Err(_) => tracing::debug!(%peer, "connection closed by the server"),
            }
            drop(slot);
        });
    }
    drop(listener);
    occupancy.drain_all();
    tokio::select! {
        () = occupancy.emptied() => tracing::info!(listener = %local, "all connections closed"),
        () = tokio::time::sleep(grace) => {
            tracing::warn!(listener = %local, grace_ms = grace.as_millis() as u64, "connections still open after the grace period; closing them");
            occupancy.close_all();
        }
    }
}

type ConnectionError = Box<dyn std::error::Error + Send + Sync>;

/// What serving one connection takes.
struct Served<H> {
    /// Shared by the connection's requests: handing it to one costs a reference
    /// count, not a cancellation token's clone (which takes its lock).
    connection: Arc<Connection>,
    handler: H,
    streams: Option<Arc<Streams>>,
    builders: Arc<Builders>,
    limits: ConnectionLimits,
}

impl<H, F> Served<H>
where
    H: Fn(Request<Incoming>, Arc<Connection>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send + 'static,
{
    /// A clear-text connection: its protocol is read from its first bytes; a
    /// stream request goes to the bare socket, the rest to hyper.
    async fn plain(self, mut stream: TcpStream) -> Result<(), ConnectionError> {
        // The first bytes get the header read timeout too: a client that connects
        // and says nothing frees its slot.
        let timeout = self.limits.header_read_timeout;
        let Ok(Some((protocol, first))) = tokio::time::timeout(timeout, sniff(&stream)).await
        else {
            return Ok(());
        };
        if protocol == Protocol::H1
            && let Some(streams) = &self.streams
            && sse::may_be(first.bytes(), &streams.path)
        {
            let taken = sse::take(
                &mut stream,
                &streams.path,
                self.limits.max_header_bytes,
                self.limits.max_headers,
            );
            match taken.await {
                Taken::Request(request) => {
                    // Ended by the hub at shutdown, not by the listener's drain.
                    self.connection.close.serving();
                    let socket = Arc::new(stream);
                    let outlet: Arc<dyn Outlet> = Arc::new(sse::Socket(Arc::clone(&socket)));
                    let connection = Arc::new(Connection {
                        outlet: Some(outlet),
                        ..Connection::clone(&self.connection)
                    });
                    drop(self.connection);
                    let response = (streams.handler)(*request, connection).await;
                    sse::write(socket, response).await;
                    return Ok(());
                }
                Taken::Gone => return Ok(()),
                Taken::Elsewhere => {}
            }
        }
        let builder = self.builders.pick(protocol);
        let service = self.service();
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        Box::pin(self.connection.close.draining(conn)).await
    }

    /// A connection over TLS: its protocol is the one ALPN chose.
    async fn tls(self, stream: TcpStream, tls: &Tls) -> Result<(), ConnectionError> {
        // The handshake gets the header read timeout: a client that opens and says
        // nothing frees its slot as one that sends no headers does.
        let peer = self.connection.peer;
        let accept = tls.acceptor().accept(stream);
        let stream = match tokio::time::timeout(self.limits.header_read_timeout, accept).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return Ok(());
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                return Ok(());
            }
        };
        let protocol = match stream.get_ref().1.alpn_protocol() {
            Some(b"h2") => Protocol::H2,
            Some(_) => Protocol::H1,
            None => Protocol::Unknown,
        };
        let service = self.service();
        let conn = self
            .builders
            .pick(protocol)
            .serve_connection(TokioIo::new(stream), service);
        self.connection.close.draining(conn).await
    }

    /// The hyper service: every request with this connection.
    fn service(
        &self,
    ) -> impl hyper::service::Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = std::convert::Infallible,
        Future = F,
    > + Clone
    + use<H, F> {
        let (handler, connection) = (self.handler.clone(), self.connection.clone());
        service_fn(move |req: Request<Incoming>| handler(req, Arc::clone(&connection)))
    }
}

/// Answers a connection past the limits with `503 overloaded` and closes it
/// (Envoy's overload manager and nginx's `limit_conn` answer; leaving it in the
/// kernel backlog would make every client wait, the legitimate ones too).
fn refuse(
    mut stream: TcpStream,
    peer: SocketAddr,
    reason: &'static str,
    occupancy: &Arc<Occupancy>,
    tracker: &TaskTracker,
) {
    if occupancy.refusing.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSALS_IN_FLIGHT {
        occupancy.refusing.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    tracing::debug!(%peer, reason, "connection refused");
    let occupancy = Arc::clone(occupancy);
    tracker.spawn(async move {
        let answer = async {
            let body = Error::Overloaded {
                reason: reason.to_owned(),
            }
            .envelope();
            let response = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\ncache-control: no-store\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(response.as_bytes()).await?;
            stream.write_all(&body).await?;
            sse::close_gently(&mut stream).await;
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(REFUSAL_TIMEOUT, answer).await;
        occupancy.refusing.fetch_sub(1, Ordering::Relaxed);
    });
}
