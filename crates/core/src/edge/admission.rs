//! Who gets a connection: the limits of a listener (in all and per client address),
//! the table of open connections that drains and closes them at shutdown, and the
//! refusal past the limits, answered `503 overloaded` at once in the protocol the
//! client speaks (over TLS, after the handshake) rather than left in the backlog.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::task::TaskTracker;

use crate::edge::body::Body;
use crate::edge::protocol::{self, Builders, ConnectionLimits, Protocol};
use crate::edge::response::IntoResponse;
use crate::edge::sniff;
use crate::edge::tls::Tls;
use crate::hub::Hangup;
use mdproxy_api::error::Error;

/// How long a refused connection is given to send its request and take the 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Refusals answered at once; past this many in flight a new connection is dropped
/// without an answer (a flood must not turn the answers into the next flood).
const MAX_REFUSALS_IN_FLIGHT: usize = 1_024;

/// Closes one connection by aborting its task, so that nothing is checked on the
/// connection's own polls: the hub closes a stalled or revoked HTTP/1.1 stream's
/// connection with it, the listener every connection still open when the grace
/// runs out.
#[derive(Debug, Default)]
pub struct Closer {
    /// The connection's task, known once it is spawned.
    task: OnceLock<AbortHandle>,
    closed: AtomicBool,
}

impl Closer {
    /// Ties this closer to the connection's task; a close asked before ends it now.
    pub(crate) fn attach(&self, task: AbortHandle) {
        if self.task.set(task).is_ok() && self.closed.load(Ordering::Acquire) {
            self.close();
        }
    }
}

impl Hangup for Closer {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// Open connections, in all and per client address, and the closers that end them
/// when the grace runs out; one lock, taken when a connection comes and when it goes.
#[derive(Default)]
pub(crate) struct Occupancy {
    table: Mutex<Table>,
    refusing: AtomicUsize,
    /// Told when the last open connection goes.
    emptied: Notify,
}

#[derive(Default)]
struct Table {
    /// Every open connection's closer, by its id (their number is the total).
    open: HashMap<u64, Arc<Closer>>,
    per_client: HashMap<IpAddr, usize>,
    next: u64,
}

/// One admitted connection; frees its slot when dropped.
pub(crate) struct Slot {
    occupancy: Arc<Occupancy>,
    ip: IpAddr,
    id: u64,
}

impl Occupancy {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().expect("occupancy lock is never poisoned")
    }

    /// A slot for a connection from `ip`, closed by `close`, or why not.
    pub(crate) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        limits: &ConnectionLimits,
        close: Arc<Closer>,
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

    /// Closes every open connection.
    pub(crate) fn close_all(&self) {
        for close in self.table().open.values() {
            close.close();
        }
    }

    /// Returns once no connection is open.
    pub(crate) async fn emptied(&self) {
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

/// Answers a connection past the limits with `503 overloaded` and closes it
/// (Envoy's overload manager and nginx's `limit_conn` answer; leaving it in the
/// kernel backlog would make every client wait, the legitimate ones too). The
/// answer is hyper's, in the protocol the connection speaks: HTTP/1.1 or h2 by its
/// first bytes, and over TLS after the handshake, by ALPN (a plain-text answer
/// before the handshake is garbage to a TLS client). At most
/// [`MAX_REFUSALS_IN_FLIGHT`] at once, each for at most [`REFUSAL_TIMEOUT`].
pub(crate) fn refuse(
    stream: TcpStream,
    peer: SocketAddr,
    reason: &'static str,
    refusal: Refusal,
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
        let service = service_fn(move |_: Request<Incoming>| {
            std::future::ready(Ok::<_, Infallible>(overloaded(reason)))
        });
        let answer = async {
            match refusal.tls {
                None => {
                    let protocol = sniff::sniff(&stream)
                        .await
                        .map_or(Protocol::Unknown, |(protocol, _)| protocol);
                    let connection = refusal.builders.pick(protocol);
                    let _ = connection
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Some(tls) => {
                    let Ok(stream) = tls.acceptor().accept(stream).await else {
                        return;
                    };
                    let protocol = protocol::by_alpn(stream.get_ref().1.alpn_protocol());
                    let connection = refusal.builders.pick(protocol);
                    let _ = connection
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        };
        let _ = tokio::time::timeout(REFUSAL_TIMEOUT, answer).await;
        occupancy.refusing.fetch_sub(1, Ordering::Relaxed);
    });
}

/// How a listener answers a refused connection: its builders, and its TLS if any.
#[derive(Clone)]
pub(crate) struct Refusal {
    pub builders: Arc<Builders>,
    pub tls: Option<Arc<Tls>>,
}

/// `503 overloaded` in the envelope, with `Retry-After: 1`, closing the connection.
fn overloaded(reason: &'static str) -> Response<Body> {
    let mut response = Error::Overloaded {
        reason: reason.to_owned(),
        upstream: false,
    }
    .to_response();
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
