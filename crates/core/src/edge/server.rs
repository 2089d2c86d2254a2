//! The accept loop: admits each connection (or refuses it, `admission`), hands it
//! to the next serving thread when there are some (`workers`), serves it with
//! hyper-util's builder for its protocol (`sniff`), over TLS when configured,
//! or hands a quote stream's request to the bare socket (`sse`); at shutdown stops
//! accepting, drains (hyper-util's graceful shutdown for what hyper serves; what is
//! not serving yet closes at once), and closes what is still open when the grace
//! runs out. What a request means is the handler's business.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::edge::admission::{self, Closer, Occupancy, Refusal};
use crate::edge::bare::{self, Ended};
use crate::edge::body::Body;
use crate::edge::protocol::{self, Builders, ConnectionLimits, Protocol};
use crate::edge::sniff;
use crate::edge::sse::{self, Taken};
use crate::edge::streams::{Coalesced, ConnExecutor};
use crate::edge::tls::Tls;
use crate::hub::Outlet;
use crate::workers::Workers;

/// What one listener serves with, besides its handler.
pub struct Listening {
    pub listener: TcpListener,
    pub limits: ConnectionLimits,
    /// TLS, when the listener speaks it.
    pub tls: Option<Arc<Tls>>,
    /// The event streams written on the bare socket, if any.
    pub streams: Option<Streams>,
    /// How long shutdown waits for open connections before closing them.
    pub grace: Duration,
    /// Every connection runs as one of its tasks.
    pub tracker: TaskTracker,
    /// The serving threads connections are spread over; `None`: the runtime the
    /// listener runs on.
    pub workers: Option<Workers>,
}

/// The connection a request came on: the client's address (for the access log)
/// and what closes it (the hub, to disconnect a subscriber that stopped reading).
#[derive(Clone, Debug)]
pub struct Connection {
    pub peer: SocketAddr,
    pub close: Arc<Closer>,
    /// The bare socket of a stream request, which the hub may write to itself.
    pub outlet: Option<Arc<dyn Outlet>>,
}

/// Answers a request whose response is written on the bare socket.
pub type StreamHandler =
    Arc<dyn Fn(Request<()>, Arc<Connection>) -> BoxFuture<'static, Response<Body>> + Send + Sync>;

/// What clear-text HTTP/1.1 is served with on the bare socket, without hyper:
/// long-lived event streams (see [`sse`]), plain `GET`s of `path`; and every other
/// plain `GET` but those of `leave` on a kept-alive connection (see [`bare`]). Both
/// are answered by `handler` (the same handler as every request).
#[derive(Clone)]
pub struct Streams {
    pub path: String,
    /// Paths whose `GET`s hyper serves (another handler answers them).
    pub leave: Vec<&'static str>,
    pub handler: StreamHandler,
}

impl Streams {
    /// Whether a plain `GET` of `path` is served by the bare socket's keep-alive loop.
    fn takes(&self, path: &str) -> bool {
        path != self.path && !self.leave.contains(&path)
    }
}

/// Serves HTTP/1.1 and HTTP/2 as `listening` says with `handler` until `shutdown`
/// resolves, then stops accepting and waits up to its grace for open connections to
/// finish. The handler gets each request with its [`Connection`].
pub async fn serve<H, F>(listening: Listening, handler: H, shutdown: impl Future<Output = ()>)
where
    H: Fn(Request<Incoming>, Arc<Connection>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send + 'static,
{
    let Listening {
        listener,
        limits,
        tls,
        streams,
        grace,
        tracker,
        workers,
    } = listening;
    let occupancy = Arc::new(Occupancy::default());
    // The address as text ("-" if the socket cannot say), not an `Option`'s Debug.
    let local = listener
        .local_addr()
        .map_or_else(|_| "-".to_owned(), |a| a.to_string());
    let builders = Arc::new(Builders::new(&limits));
    let refusal = Refusal {
        builders: Arc::clone(&builders),
        tls: tls.clone(),
    };
    let streams = streams.map(Arc::new);
    // Drains what hyper serves; `draining` closes what does not serve yet.
    let graceful = GracefulShutdown::new();
    let draining = CancellationToken::new();
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
        let close = Arc::new(Closer::default());
        let slot = match occupancy.admit(peer.ip(), &limits, Arc::clone(&close)) {
            Ok(slot) => slot,
            Err(reason) => {
                admission::refuse(stream, peer, reason, refusal.clone(), &occupancy, &tracker);
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let served = Served {
            connection: Arc::new(Connection {
                peer,
                close: Arc::clone(&close),
                outlet: None,
            }),
            handler: handler.clone(),
            streams: streams.clone(),
            builders: Arc::clone(&builders),
            // Taken now, before any drain: a watcher taken after it would miss it.
            watcher: graceful.watcher(),
            draining: draining.clone(),
        };
        let tls = tls.clone();
        let task = match &workers {
            None => tracker.spawn(connection(served, Accepted::Here(stream), tls, slot)),
            Some(workers) => {
                // Registered again with the serving thread's own reactor.
                let Ok(stream) = stream.into_std() else {
                    continue;
                };
                let task = connection(served, Accepted::Moved(stream), tls, slot);
                workers.spawn(tracker.track_future(task))
            }
        };
        close.attach(task.abort_handle());
    }
    drop(listener);
    draining.cancel();
    let drained = async {
        graceful.shutdown().await;
        occupancy.emptied().await;
    };
    tokio::select! {
        () = drained => tracing::info!(listener = %local, "all connections closed"),
        () = tokio::time::sleep(grace) => {
            tracing::warn!(listener = %local, grace_ms = grace.as_millis() as u64, "connections still open after the grace period; closing them");
            occupancy.close_all();
        }
    }
}

/// An accepted connection: registered with the listener's runtime, or moved out of
/// it for a serving thread's.
enum Accepted {
    Here(TcpStream),
    Moved(std::net::TcpStream),
}

/// One connection's task, from its first byte to its end. Only what every
/// connection needs is held here: each protocol's state is boxed, so a stream on
/// the bare socket is not the size of hyper's. (One future: an async block around
/// it would hold its arguments twice, and weigh on every quote subscriber.)
async fn connection<H, F>(
    served: Served<H>,
    accepted: Accepted,
    tls: Option<Arc<Tls>>,
    slot: admission::Slot,
) where
    H: Fn(Request<Incoming>, Arc<Connection>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send + 'static,
{
    let peer = served.connection.peer;
    let stream = match accepted {
        Accepted::Here(stream) => stream,
        Accepted::Moved(stream) => match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "cannot register a connection");
                return;
            }
        },
    };
    let result = match tls {
        None => served.plain(stream).await,
        Some(tls) => Box::pin(served.tls(stream, &tls)).await,
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
    drop(slot);
}

type ConnectionError = Box<dyn std::error::Error + Send + Sync>;

/// Runs an HTTP/2 connection (`drive`) until it ends, or until it has had no stream
/// open for a whole `idle` (then between one and two of them), when it is closed:
/// hyper keeps an HTTP/2 connection without streams for ever (its header read
/// timeout is HTTP/1's, which also ends idle keep-alives), so a client could hold
/// its slot with the preface alone. A quote stream counts as open for its life.
async fn closed_when_idle(
    drive: impl Future<Output = Result<(), ConnectionError>>,
    executor: &ConnExecutor,
    idle: Duration,
) -> Result<(), ConnectionError> {
    let mut drive = std::pin::pin!(drive);
    let mut seen = executor.streams().1;
    loop {
        tokio::select! {
            ended = &mut drive => return ended,
            () = tokio::time::sleep(idle) => {}
        }
        let (open, started) = executor.streams();
        if open == 0 && started == seen {
            tracing::debug!("an idle HTTP/2 connection closed");
            return Ok(());
        }
        seen = started;
    }
}

/// What serving one connection takes.
struct Served<H> {
    /// Shared by the connection's requests: handing it to one costs a reference
    /// count, not a cancellation token's clone (which takes its lock).
    connection: Arc<Connection>,
    handler: H,
    streams: Option<Arc<Streams>>,
    /// The connection builders, and the limits they were made with (read
    /// through them: a copy here would weigh on every connection's task).
    builders: Arc<Builders>,
    /// Starts hyper's graceful shutdown of this connection when the listener drains.
    watcher: Watcher,
    /// Cancelled when the listener drains: a connection not serving yet closes.
    draining: CancellationToken,
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
        let timeout = self.builders.limits().header_read_timeout;
        let sniffed = tokio::select! {
            sniffed = tokio::time::timeout(timeout, sniff::sniff(&stream)) => sniffed,
            () = self.draining.cancelled() => return Ok(()),
        };
        let Ok(Some((protocol, first))) = sniffed else {
            return Ok(());
        };
        if protocol == Protocol::H1
            && let Some(streams) = &self.streams
            && sse::may_be(first.bytes(), &streams.path)
        {
            let taken = sse::take(
                &mut stream,
                &streams.path,
                self.builders.limits().max_header_bytes,
                self.builders.limits().max_headers,
            );
            match taken.await {
                Taken::Request(request) => {
                    // Ended by the hub at shutdown, not by the listener's drain.
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
        if self.draining.is_cancelled() {
            return Ok(());
        }
        if protocol == Protocol::H1
            && self.builders.limits().bare_http1
            && let Some(streams) = self.streams.clone()
        {
            // Boxed, as hyper's state is: a stream on the bare socket is not its size.
            return Box::pin(self.bare(stream, &streams)).await;
        }
        // Boxed: a stream on the bare socket is not the size of hyper's state.
        Box::pin(self.hyper(stream, protocol)).await
    }

    /// Clear-text HTTP/1.1: plain `GET`s on the bare socket's keep-alive loop, from
    /// the first request it leaves on, hyper with the bytes read so far.
    async fn bare(self, mut stream: TcpStream, streams: &Streams) -> Result<(), ConnectionError> {
        let limits = self.builders.limits();
        let rules = bare::Rules {
            header_read_timeout: limits.header_read_timeout,
            send_timeout: limits.send_timeout,
            max_head: limits.max_header_bytes,
            max_headers: limits.max_headers,
            keep_alive: limits.keep_alive,
        };
        let connection = &self.connection;
        let answer = |request| (streams.handler)(request, Arc::clone(connection));
        let served = bare::serve(
            &mut stream,
            rules,
            |path| streams.takes(path),
            answer,
            &self.draining,
        );
        match served.await {
            Ended::Done => Ok(()),
            Ended::Hyper(read) => {
                let (reader, writer) = stream.into_split();
                let socket = tokio::io::join(std::io::Cursor::new(read).chain(reader), writer);
                self.hyper(socket, Protocol::H1).await
            }
        }
    }

    /// A connection over TLS: its protocol is the one ALPN chose.
    async fn tls(self, stream: TcpStream, tls: &Tls) -> Result<(), ConnectionError> {
        // The handshake gets the header read timeout: a client that opens and says
        // nothing frees its slot as one that sends no headers does.
        let peer = self.connection.peer;
        let accept = tls.acceptor().accept(stream);
        let handshake = tokio::select! {
            handshake = tokio::time::timeout(self.builders.limits().header_read_timeout, accept) => handshake,
            () = self.draining.cancelled() => return Ok(()),
        };
        let stream = match handshake {
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
        let protocol = protocol::by_alpn(stream.get_ref().1.alpn_protocol());
        self.hyper(stream, protocol).await
    }

    /// Serves `socket` with hyper: an HTTP/2 connection with its streams in its own
    /// task and its writes made once a turn (see [`streams`](super::streams)),
    /// anything else as hyper-util does.
    async fn hyper<S>(self, socket: S, protocol: Protocol) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // A client that stops reading holds a write (and its slot) for ever: past
        // the send timeout without progress the write fails and hyper closes the
        // connection (nginx's `send_timeout`).
        let mut socket = tokio_io_timeout::TimeoutWriter::new(socket);
        socket.set_timeout(Some(self.builders.limits().send_timeout));
        let socket = Box::pin(socket);
        let service = self.service();
        if protocol == Protocol::H2 {
            let executor = ConnExecutor::default();
            let (socket, turn) = Coalesced::new(socket);
            let builder = self.builders.for_h2(executor.clone());
            let conn = builder.serve_connection(TokioIo::new(socket), service);
            let drive = executor.drive(self.watcher.watch(conn), turn);
            return closed_when_idle(drive, &executor, self.builders.limits().header_read_timeout)
                .await;
        }
        let conn = self
            .builders
            .pick(protocol)
            .serve_connection(TokioIo::new(socket), service);
        self.watcher.watch(conn).await
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
