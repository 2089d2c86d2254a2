//! The direct path's kept connections: a request takes the newest idle HTTP/1.1
//! connection (or makes one), writes its head and reads the answer on its own task
//! (`exchange.rs`), and a connection that can carry another request goes back when
//! the answer is whole. hyper-util's pool runs each connection as a task of its own
//! and hands requests and answers across a channel, a task hop each way a miss
//! (docs/BENCHMARKS.md, "Instructions per miss").

use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, ReadBuf};
use tower_service::Service;

use super::exchange::{read_answer, write_head};
use super::{Connector, Received, WireError, wire_error};

type Io = TokioIo<<Connector as Service<Uri>>::Response>;

/// One HTTP/1.1 connection, its I/O polled only by the request using it.
pub(super) struct Conn {
    io: Io,
    /// What was read and no answer used yet: nothing between answers, from an
    /// upstream that answers what it is asked.
    buf: BytesMut,
    /// The peer ended the connection (or sent what no request asked for).
    ended: bool,
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

    /// Sends the request `head` to `url`'s host and reads its answer whole within
    /// `limit` bytes of body, on `kept` (a connection from the pool, as
    /// [`take`](Self::take) gives) or else on a new connection. When the kept one
    /// has ended before the request goes out, or the request could not be written
    /// whole on it, the request goes on a new one; once it went out it is not sent
    /// again, since the upstream may have counted it.
    pub(super) async fn send(
        &self,
        kept: Option<Box<Conn>>,
        url: &str,
        head: &[u8],
        limit: u64,
    ) -> Result<Received, WireError> {
        let (mut conn, kept) = match kept {
            Some(conn) if !conn.ended => (conn, true),
            _ => (self.connect(url).await?, false),
        };
        if let Err(failed) = write_head(&mut conn.io, head).await {
            if !kept {
                return Err(failed);
            }
            conn = self.connect(url).await?;
            write_head(&mut conn.io, head).await?;
        }
        let (received, reusable) = read_answer(&mut conn.io, &mut conn.buf, limit).await?;
        if reusable && conn.buf.is_empty() {
            self.put(conn);
        }
        Ok(received)
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

    /// A new connection to `url`'s host, TCP and TLS within the connector's bound.
    pub(super) async fn connect(&self, url: &str) -> Result<Box<Conn>, WireError> {
        let uri = Uri::try_from(url).map_err(|_| WireError::Unreachable)?;
        // Boxed: a connect's state (the TLS session, the handshake) is several KB,
        // which would otherwise be moved with every request's future.
        Box::pin(async {
            let mut connector = self.connector.clone();
            std::future::poll_fn(|cx| connector.poll_ready(cx))
                .await
                .map_err(|e| wire_error(&*e))?;
            let stream = connector.call(uri).await;
            let stream = stream.map_err(|e| wire_error(&*e))?;
            Ok(Box::new(Conn {
                io: TokioIo::new(stream),
                buf: BytesMut::new(),
                ended: false,
                idle_since: Instant::now(),
            }))
        })
        .await
    }

    /// Keeps `conn` when it can carry another request and there is room, dropping
    /// the oldest idle ones past their time first.
    fn put(&self, mut conn: Box<Conn>) {
        if !conn.still_open() {
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
    /// Reads the connection once, with no one to wake: an idle connection has
    /// nothing to read, so one that has something (its end, an error, bytes no
    /// request asked for) has ended.
    pub(super) fn still_open(&mut self) -> bool {
        if !self.ended {
            let mut byte = [0u8; 1];
            let mut read = ReadBuf::new(&mut byte);
            let mut cx = Context::from_waker(Waker::noop());
            self.ended = Pin::new(&mut self.io)
                .poll_read(&mut cx, &mut read)
                .is_ready();
        }
        !self.ended
    }
}
