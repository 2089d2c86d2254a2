//! Listeners and connections: the accept loop, hyper's HTTP/1 builder (keep-alive,
//! `TCP_NODELAY`, header read timeout), a connection limit, and graceful shutdown.
//! What a request means is `proxy`'s business.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;

use crate::body::Body;
use crate::config::Config;
use crate::freshness::Clock;
use crate::proxy::AppState;

/// How long a client may take to send a request's headers; bounds slow-loris
/// connections that would otherwise hold a connection slot forever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves HTTP/1 on `listener` with `handler` until `shutdown` resolves, then stops
/// accepting and waits up to `grace` for open connections to finish.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    max_connections: usize,
    grace: Duration,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, std::convert::Infallible>> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(max_connections));
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
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service_fn(handler));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(grace) => tracing::warn!(grace_ms = grace.as_millis() as u64, "connections still open after the grace period; closing them"),
    }
}

/// A running proxy. Dropping it stops it.
pub struct ProxyHandle {
    /// The address the client listener is bound to.
    pub addr: SocketAddr,
    state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ProxyHandle {
    /// `http://ADDR/api/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/api/v1", self.addr)
    }

    /// The proxy's state (cache inspection in tests).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Stops accepting, lets open connections finish, and waits for that.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `config.server.listen` and starts the proxy in the background.
///
/// # Errors
/// When the address cannot be bound or the upstream client cannot be built.
pub async fn start(config: &Config, clock: Arc<dyn Clock>) -> Result<ProxyHandle, String> {
    let listener = TcpListener::bind(&config.server.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.server.listen))?;
    start_on(listener, config, clock)
}

/// Starts the proxy on an already bound listener.
///
/// # Errors
/// When the upstream client cannot be built.
pub fn start_on(
    listener: TcpListener,
    config: &Config,
    clock: Arc<dyn Clock>,
) -> Result<ProxyHandle, String> {
    let addr = listener
        .local_addr()
        .map_err(|e| format!("listener has no address: {e}"))?;
    let state = AppState::new(config, clock)?;
    let (stop, stopped) = oneshot::channel::<()>();
    let handler_state = state.clone();
    let handler = move |req| crate::proxy::handle(handler_state.clone(), req);
    let task = tokio::spawn(serve(
        listener,
        handler,
        config.server.max_connections,
        Duration::from_millis(config.server.shutdown_grace_ms),
        async move {
            let _ = stopped.await;
        },
    ));
    tracing::info!(%addr, "proxy listening");
    Ok(ProxyHandle {
        addr,
        state,
        stop: Some(stop),
        task: Some(task),
    })
}
