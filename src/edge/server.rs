//! Listeners and connections: the accept loop, hyper's HTTP/1 builder (keep-alive,
//! `TCP_NODELAY`, header read timeout), a connection limit, and graceful shutdown.
//! What a request means is the handler's business.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::edge::body::Body;

/// How long a client may take to send a request's headers; bounds slow-loris
/// connections that would otherwise hold a connection slot forever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves HTTP/1 on `listener` with `handler` until `shutdown` resolves, then stops
/// accepting and waits up to `grace` for open connections to finish. Connections run
/// as tasks of `tracker`. The handler gets each request with its connection's close
/// token (cancelling it closes that connection).
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    max_connections: usize,
    grace: Duration,
    tracker: TaskTracker,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>, CancellationToken) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    // Parent of every connection's close token: cancelled when the grace runs out,
    // so no connection task outlives the listener (the tracker waits for them).
    let all = CancellationToken::new();
    let slots = Arc::new(Semaphore::new(max_connections));
    let local = listener.local_addr().ok();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
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
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let handler = handler.clone();
        let close = all.child_token();
        let request_close = close.clone();
        let service = service_fn(move |req: Request<Incoming>| handler(req, request_close.clone()));
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tracker.spawn(async move {
            tokio::select! {
                result = conn => if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                },
                () = close.cancelled() => tracing::debug!(%peer, "connection closed by the server"),
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!(listener = ?local, "all connections closed"),
        () = tokio::time::sleep(grace) => {
            tracing::warn!(listener = ?local, grace_ms = grace.as_millis() as u64, "connections still open after the grace period; closing them");
            all.cancel();
        }
    }
}
