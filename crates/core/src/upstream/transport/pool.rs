//! The direct path's kept connections, each driven by the request that uses it: a
//! request takes an idle HTTP/1.1 connection (or makes one), its own task polls the
//! connection while the request goes out and the answer comes in, and a connection
//! that can carry another request goes back when the answer is whole. hyper-util's
//! pool runs each connection as a task of its own and hands requests and answers
//! across a channel, a task hop each way a miss; this one takes a tenth off a 404
//! miss's instructions (docs/BENCHMARKS.md, "Instructions per miss").

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Mutex;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Uri;
use http_body_util::Empty;
use hyper::client::conn::http1;
use tower_service::Service;

use super::{Connector, WireError, wire_error};

type Io = <Connector as Service<Uri>>::Response;

/// A request toward the upstream.
pub(super) type Request = http::Request<Empty<Bytes>>;

/// One HTTP/1.1 connection: its request side and its I/O, which only the request
/// using it polls.
pub(super) struct Conn {
    send: http1::SendRequest<Empty<Bytes>>,
    /// `None` once the I/O ended (the peer closed, or an error): dropping it fails
    /// what it had not sent, handing the request back, and ends an answer cut off.
    io: Option<http1::Connection<Io, Empty<Bytes>>>,
    idle_since: Instant,
}

/// The idle connections toward one upstream instance, newest last.
pub struct Pool {
    connector: Connector,
    /// Boxed: a connection is moved in and out whole, and with every request's
    /// future while in use; a box moves a pointer.
    #[allow(clippy::vec_box, reason = "a kept connection moves as a pointer")]
    idle: Mutex<Vec<Box<Conn>>>,
    max_idle: usize,
    idle_for: Duration,
}

impl Pool {
    /// Keeps at most `max_idle` idle connections, each for at most `idle_for`.
    pub(super) fn new(connector: Connector, max_idle: usize, idle_for: Duration) -> Pool {
        Pool {
            connector,
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_for,
        }
    }

    /// Sends `request` to `uri`'s host and reads its answer with `read`, on `kept`
    /// (a connection from the pool, as [`take`](Self::take) gives) or else on a new
    /// connection. A request a kept connection took but never sent (it closed first)
    /// is sent again on a new connection; one that went out is not, since the
    /// upstream may have counted it.
    pub(super) async fn send<T, F, Fut>(
        &self,
        kept: Option<Box<Conn>>,
        uri: &Uri,
        request: Request,
        read: F,
    ) -> Result<T, WireError>
    where
        F: FnOnce(http::Response<hyper::body::Incoming>) -> Fut,
        Fut: Future<Output = Result<T, WireError>>,
    {
        let (mut conn, kept) = match kept {
            Some(conn) => (conn, true),
            None => (self.connect(uri).await?, false),
        };
        let sent = conn.send.try_send_request(request);
        let response = match conn.drive(sent).await {
            Ok(response) => response,
            Err(mut failed) => match failed.take_message() {
                Some(request) if kept => {
                    conn = self.connect(uri).await?;
                    let sent = conn.send.send_request(request);
                    conn.drive(sent).await.map_err(|e| wire_error(&e))?
                }
                _ => return Err(wire_error(failed.error())),
            },
        };
        let answer = conn.drive(read(response)).await;
        if answer.is_ok() {
            self.put(conn);
        }
        answer
    }

    /// The newest idle connection still open; older ones past their time, and
    /// closed ones, are dropped on the way.
    pub(super) fn take(&self) -> Option<Box<Conn>> {
        loop {
            let newest = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut conn = newest?;
            if conn.idle_since.elapsed() < self.idle_for && conn.still_open() {
                return Some(conn);
            }
        }
    }

    /// A new connection, TCP and TLS within the connector's bound.
    pub(super) async fn connect(&self, uri: &Uri) -> Result<Box<Conn>, WireError> {
        // Boxed: a connect's state (the TLS session, the handshake) is several KB,
        // which would otherwise be moved with every request's future.
        Box::pin(async {
            let mut connector = self.connector.clone();
            std::future::poll_fn(|cx| connector.poll_ready(cx))
                .await
                .map_err(|e| wire_error(&*e))?;
            let stream = connector.call(uri.clone()).await;
            let stream = stream.map_err(|e| wire_error(&*e))?;
            let (send, io) = http1::handshake(stream).await.map_err(|e| wire_error(&e))?;
            Ok(Box::new(Conn {
                send,
                io: Some(io),
                idle_since: Instant::now(),
            }))
        })
        .await
    }

    /// Keeps `conn` when it can carry another request and there is room, dropping
    /// the oldest idle ones past their time first.
    fn put(&self, mut conn: Box<Conn>) {
        if !conn.still_open() || !conn.send.is_ready() {
            return;
        }
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let expired = idle
            .iter()
            .take_while(|kept| kept.idle_since.elapsed() >= self.idle_for)
            .count();
        idle.drain(..expired);
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }

    /// How many connections are kept idle.
    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.idle.lock().unwrap().len()
    }

    /// How many idle connections are still open (the others stay, ended).
    #[cfg(test)]
    pub(super) fn open_idle(&self) -> usize {
        let mut idle = self.idle.lock().unwrap();
        idle.iter_mut()
            .map(|conn| conn.still_open())
            .filter(|open| *open)
            .count()
    }

    /// The same pool keeping a connection idle for `idle_for`.
    #[cfg(test)]
    pub(super) fn idle_for(self, idle_for: Duration) -> Pool {
        Pool { idle_for, ..self }
    }
}

impl Conn {
    /// Polls the I/O once, with no one to wake: an idle connection has nothing to
    /// do, so one that is ready has ended (the peer closed it, or sent what no
    /// request asked for).
    pub(super) fn still_open(&mut self) -> bool {
        poll_io(&mut self.io, &mut Context::from_waker(Waker::noop()));
        self.io.is_some()
    }

    /// Runs `work` while polling the I/O in the same task, until `work` is done
    /// (when the I/O ends first, it is dropped, which fails `work`'s answer or body).
    async fn drive<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = pin!(work);
        let io = &mut self.io;
        std::future::poll_fn(|cx| {
            poll_io(io, cx);
            work.as_mut().poll(cx)
        })
        .await
    }
}

/// Polls the I/O, dropping it once it has ended.
fn poll_io(io: &mut Option<http1::Connection<Io, Empty<Bytes>>>, cx: &mut Context<'_>) {
    if let Some(running) = io
        && Pin::new(running).poll(cx).is_ready()
    {
        *io = None;
    }
}
