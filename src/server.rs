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
use std::path::PathBuf;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::body::Body;
use crate::config::Config;
use crate::freshness::Clock;
use crate::proxy::AppState;
use crate::scheduler::Scheduler;

/// Cancelling it closes the connection that carried the request (request extension;
/// the hub uses it to disconnect a subscriber that stopped reading).
#[derive(Clone, Debug)]
pub struct ConnectionToken(pub CancellationToken);

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
        let close = CancellationToken::new();
        let request_close = close.clone();
        let service = service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut()
                .insert(ConnectionToken(request_close.clone()));
            handler(req)
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
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
        () = tokio::time::sleep(grace) => tracing::warn!(listener = ?local, grace_ms = grace.as_millis() as u64, "connections still open after the grace period; closing them"),
    }
}

/// A running proxy. Dropping it stops it.
pub struct ProxyHandle {
    /// The address the client listener is bound to.
    pub addr: SocketAddr,
    /// The admin listener's address, when `admin.listen` is set.
    pub admin_addr: Option<SocketAddr>,
    state: AppState,
    /// Cancels the listener, the reload watcher and the scheduler's work.
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    scheduler: Option<Scheduler>,
}

impl ProxyHandle {
    /// `http://ADDR/api/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/api/v1", self.addr)
    }

    /// The proxy's state (cache inspection, reloads).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Reloads `path` on SIGHUP and whenever its content changes (polled every
    /// `server.reload_poll_ms`), until the proxy stops.
    pub fn watch_config(&self, path: PathBuf, lookup: crate::reload::Lookup) {
        let poll = Duration::from_millis(self.state.snapshot().config.server.reload_poll_ms);
        crate::reload::spawn(self.state.clone(), path, lookup, poll, self.stop.clone());
    }

    /// Stops accepting, stops the scheduler, lets open connections finish, and waits.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.shutdown().await;
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Binds `config.server.listen` and starts the proxy (and its scheduler) in the
/// background.
///
/// # Errors
/// When the address cannot be bound, the upstream client cannot be built or the
/// scheduler cannot start.
pub async fn start(config: &Config, clock: Arc<dyn Clock>) -> Result<ProxyHandle, String> {
    let listener = TcpListener::bind(&config.server.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.server.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("listener has no address: {e}"))?;
    let stop = CancellationToken::new();
    let state = AppState::new(config.clone(), clock, stop.child_token())?;
    let calendar = state.snapshot().policy().calendar().clone();
    let year = chrono::Datelike::year(
        &state
            .clock()
            .now()
            .with_timezone(&chrono_tz::Asia::Shanghai),
    );
    if !calendar.covers(year) {
        tracing::warn!(
            year,
            "the holiday calendar does not cover this year: only weekends are known closed; set calendar.holidays"
        );
    }
    let handler_state = state.clone();
    let handler = move |req| crate::proxy::handle(handler_state.clone(), req);
    let stopped = stop.clone();
    let task = tokio::spawn(serve(
        listener,
        handler,
        config.server.max_connections,
        Duration::from_millis(config.server.shutdown_grace_ms),
        async move { stopped.cancelled().await },
    ));
    let admin_addr = if config.admin.listen.is_empty() {
        None
    } else {
        let admin = TcpListener::bind(&config.admin.listen).await.map_err(|e| {
            format!(
                "cannot listen on {} (admin.listen): {e}",
                config.admin.listen
            )
        })?;
        let admin_addr = admin
            .local_addr()
            .map_err(|e| format!("admin listener has no address: {e}"))?;
        let admin_state = state.clone();
        let stopped = stop.clone();
        tokio::spawn(serve(
            admin,
            move |req| crate::admin::handle(admin_state.clone(), req),
            64,
            Duration::from_secs(1),
            async move { stopped.cancelled().await },
        ));
        tracing::info!(addr = %admin_addr, "admin listening");
        Some(admin_addr)
    };
    let scheduler = if config.scheduler.enabled {
        let mut plans = crate::scheduler::builtin();
        plans.extend(crate::scheduler::configured(&config.scheduler.jobs));
        if config.scheduler.prewarm_on_start {
            let (state, plans, stop) = (state.clone(), plans.clone(), stop.clone());
            tokio::spawn(async move {
                for plan in &plans {
                    // At start-up only what is not already fresh is fetched.
                    let unforced = crate::scheduler::Plan {
                        force: false,
                        ..plan.clone()
                    };
                    tokio::select! {
                        () = crate::scheduler::run(&state, &unforced) => {}
                        () = stop.cancelled() => return,
                    }
                }
            });
        }
        Some(Scheduler::start(state.clone(), plans).await?)
    } else {
        None
    };
    tracing::info!(%addr, "proxy listening");
    Ok(ProxyHandle {
        addr,
        admin_addr,
        state,
        stop,
        task: Some(task),
        scheduler,
    })
}
