//! The running application: [`start`] builds the shared state, the hub and the edge,
//! binds the client and admin listeners, registers each subsystem's metrics, starts
//! the fleet's relays, the scheduler (and the start-up prewarm) and, on request,
//! the config watcher; [`App::shutdown`] stops all of it. It owns the one shutdown
//! token and the one `TaskTracker` every background task is spawned on.

mod relay;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::edge::ConnectionLimits;
use crate::edge::handler::Edge;
use crate::edge::server::{Listening, Streams};
use crate::edge::tls::{Tls, TlsError};
use crate::hub::QuoteHub;
use crate::mcp::Mcp;
use crate::ops::admin::Admin;
use crate::ops::metrics::Metrics;
use crate::ops::overview::Overview;
use crate::ops::reload::{Applied, Apply, Lookup, ReloadError};
use crate::ops::reload_log::ReloadLog;
use crate::ops::scheduler::{self, Scheduler, SchedulerError};
use crate::state::{AppState, StateError};
use crate::stats::Requests;
use crate::upstream::budget::RateClock;
use crate::workers::{StartError as WorkersError, Workers};
use mdproxy_api::catalog::STREAM_PATH;
use mdproxy_api::router::API_PREFIX;
use mdproxy_config::Config;
use mdproxy_market::Clock;

/// Connections the admin listener accepts at once: a scraper, a probe and an
/// operator's curl, with room to spare; a quarter of them per client address, so
/// a flood from one address leaves room for the probes.
const ADMIN_MAX_CONNECTIONS: usize = 64;

/// How long an admin client may take to send its headers (and stay idle): short,
/// so idle connections cannot keep a probe out for long.
const ADMIN_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the admin listener waits for its connections at shutdown.
const ADMIN_GRACE: Duration = Duration::from_secs(1);

/// Why the application did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({key}): {source}")]
    Bind {
        key: &'static str,
        addr: String,
        source: std::io::Error,
    },
    /// `[cluster]` cannot be connected to, or an upstream client not built.
    #[error(transparent)]
    State(#[from] StateError),
    /// The scheduler could not start.
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// The TLS certificate or key did not load.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] mdproxy_config::Problems),
    /// The serving threads did not start.
    #[error(transparent)]
    Workers(#[from] WorkersError),
}

/// A running proxy. Dropping it cancels everything; [`App::shutdown`] also waits.
pub struct App {
    /// The address the client listener is bound to.
    pub addr: SocketAddr,
    /// The admin listener's address, when `admin.listen` is set.
    pub admin_addr: Option<SocketAddr>,
    state: AppState,
    hub: QuoteHub,
    edge: Arc<Edge>,
    stop: CancellationToken,
    tracker: TaskTracker,
    scheduler: Option<Scheduler>,
    /// The client listener's TLS, when `server.tls_cert` is set.
    tls: Option<Arc<Tls>>,
    /// Every reload attempt (the watcher writes it, `/status` reads it).
    reloads: Arc<ReloadLog>,
    /// The MCP endpoint, when `[mcp]` is on.
    mcp: Option<Arc<Mcp>>,
    /// `server.shutdown_grace_ms` as it was at start: the listener drains with
    /// it, so the rest of a stop does too (a restart-only key).
    grace: Duration,
}

async fn bind(key: &'static str, addr: &str) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind {
        key,
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// Starts the proxy for `config` with market time from `clock`, and client and
/// upstream rate limits on tokio's clock.
///
/// # Errors
/// When an address cannot be bound, the upstream client cannot be built or the
/// scheduler cannot start.
pub async fn start(config: &Config, clock: Arc<dyn Clock>) -> Result<App, StartError> {
    start_with(config, clock, RateClock::tokio()).await
}

/// The disk tier of `cache.disk_path`, opened before the first request (so a
/// restart serves what it holds from the start), or none: not configured, or the
/// disk cannot be used (one warning; the proxy runs from memory).
async fn open_disk(
    config: &Config,
    tracker: &TaskTracker,
    stop: &CancellationToken,
) -> Option<crate::cache::disk::Disk> {
    if config.cache.disk_path.is_empty() || config.cache.disk_bytes == 0 {
        return None;
    }
    let path = Path::new(&config.cache.disk_path);
    // Records as large as the largest answer memory keeps and a little over, up to
    // the disk's cap (4 MiB: the API's largest answers are about 1 MB).
    let largest = config.cache.max_bytes / crate::cache::store::MAX_ENTRY_SHARE;
    match crate::cache::disk::Disk::open(
        path,
        config.cache.disk_bytes,
        largest,
        tracker,
        stop.child_token(),
    )
    .await
    {
        Ok(disk) => Some(disk),
        Err(e) => {
            tracing::warn!(error = %e, "disk tier off: serving from memory only");
            None
        }
    }
}

/// [`start`] with an explicit rate-limit clock (tests inject governor's fake one).
///
/// # Errors
/// As [`start`].
pub async fn start_with(
    config: &Config,
    clock: Arc<dyn Clock>,
    rate_clock: RateClock,
) -> Result<App, StartError> {
    let (listener, addr) = bind("server.listen", &config.server.listen).await?;
    let admin = if config.admin.listen.is_empty() {
        None
    } else {
        Some(bind("admin.listen", &config.admin.listen).await?)
    };
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    let disk = open_disk(config, &tracker, &stop).await;
    let state = AppState::new(
        config.clone(),
        clock,
        rate_clock.clone(),
        tracker.clone(),
        stop.child_token(),
        disk,
    )?;
    if state.cluster().is_some() {
        relay::spawn(&state, state.stop());
    }
    warn_if_calendar_is_short(&state);
    let hub = QuoteHub::new(state.clone());
    let edge = Arc::new(Edge::new(state.clone(), hub.clone(), rate_clock));
    let tls = load_tls(config, &stop, &tracker)?;
    let mcp = config
        .mcp
        .enabled
        .then(|| Arc::new(Mcp::new(&state, &hub, &config.mcp, stop.child_token())));
    serve_clients(
        listener,
        config,
        &edge,
        mcp.clone(),
        tls.clone(),
        &stop,
        &tracker,
    )?;
    let jobs = scheduler::Jobs::default();
    let reloads = Arc::new(ReloadLog::default());
    let admin_addr = admin.map(|(listener, admin_addr)| {
        let overview = Overview {
            state: state.clone(),
            hub: hub.clone(),
            jobs: jobs.clone(),
            history: crate::ops::history::History::start(&state),
            reloads: Arc::clone(&reloads),
            started: chrono::Utc::now(),
            mcp: mcp.clone(),
        };
        let metrics = metrics(&state, &hub, &reloads, mcp.as_deref());
        let admin = Admin::new(state.clone(), metrics, overview);
        serve_admin(listener, admin, &stop, &tracker);
        tracing::info!(addr = %admin_addr, "admin listening");
        admin_addr
    });
    let scheduler = start_scheduler(config, &state, &jobs).await?;
    tracing::info!(%addr, "proxy listening");
    crate::ops::probe::spawn(&state);
    state.cache().store().keep_tidy(state.stop().clone());
    Ok(App {
        addr,
        admin_addr,
        state,
        hub,
        edge,
        stop,
        tracker,
        scheduler,
        tls,
        reloads,
        mcp,
        grace: Duration::from_millis(config.server.shutdown_grace_ms),
    })
}

/// The client listener's TLS (`server.tls_cert`), watched for renewed files, or
/// none.
fn load_tls(
    config: &Config,
    stop: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<Option<Arc<Tls>>, TlsError> {
    if config.server.tls_cert.is_empty() {
        return Ok(None);
    }
    let tls = Tls::load(
        Path::new(&config.server.tls_cert),
        Path::new(&config.server.tls_key),
    )?;
    let tls = Arc::new(tls);
    let every = Duration::from_millis(config.server.reload_poll_ms.max(1_000));
    tls.watch(every, stop.child_token(), tracker);
    Ok(Some(tls))
}

/// Serves clients on `listener` until `stop`: the edge, with quote streams on the
/// bare socket.
///
/// # Errors
/// When the serving threads cannot start.
fn serve_clients(
    listener: TcpListener,
    config: &Config,
    edge: &Arc<Edge>,
    mcp: Option<Arc<Mcp>>,
    tls: Option<Arc<Tls>>,
    stop: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<(), WorkersError> {
    // The connections on the shared runtime (`server.work_stealing`), or on
    // single-threaded runtimes of their own, one a core.
    let workers = if config.server.work_stealing {
        None
    } else {
        Some(Workers::start(config.server.threads)?)
    };
    let handler_edge = Arc::clone(edge);
    let stream_edge = Arc::clone(edge);
    let streams = Streams {
        path: format!("{API_PREFIX}{STREAM_PATH}"),
        // The MCP endpoint's own handler reads bodies: hyper serves it.
        leave: crate::mcp::PATHS.to_vec(),
        handler: Arc::new(move |req, connection| {
            let handled = stream_edge.handle(req, connection);
            Box::pin(async move {
                let Ok(response) = handled.await;
                response
            })
        }),
    };
    let stopped = stop.clone();
    let listening = Listening {
        listener,
        limits: ConnectionLimits::from(&config.server),
        tls,
        streams: Some(streams),
        grace: Duration::from_millis(config.server.shutdown_grace_ms),
        tracker: tracker.clone(),
        workers,
    };
    tracker.spawn(crate::edge::server::serve(
        listening,
        move |req: hyper::Request<hyper::body::Incoming>, connection| match &mcp {
            Some(mcp) if crate::mcp::PATHS.contains(&req.uri().path()) => {
                Either::Right(handler_edge.agent(mcp, req, connection))
            }
            _ => Either::Left(handler_edge.handle(req, connection)),
        },
        async move { stopped.cancelled().await },
    ));
    Ok(())
}

/// Serves `admin` on `listener` until `stop`, with the admin listener's own limits.
fn serve_admin(
    listener: TcpListener,
    admin: Admin,
    stop: &CancellationToken,
    tracker: &TaskTracker,
) {
    let admin = Arc::new(admin);
    let stopped = stop.clone();
    let listening = Listening {
        listener,
        limits: ConnectionLimits::internal(
            ADMIN_MAX_CONNECTIONS,
            ADMIN_MAX_CONNECTIONS / 4,
            ADMIN_HEADER_READ_TIMEOUT,
        ),
        tls: None,
        streams: None,
        grace: ADMIN_GRACE,
        tracker: tracker.clone(),
        workers: None,
    };
    tracker.spawn(crate::edge::server::serve(
        listening,
        move |req, _connection| {
            let admin = Arc::clone(&admin);
            async move { admin.handle(req).await }
        },
        async move { stopped.cancelled().await },
    ));
}

/// The `/metrics` registry: each subsystem registers its own collectors under
/// `mdproxy_`; none knows the others'.
fn metrics(
    state: &AppState,
    hub: &QuoteHub,
    reloads: &Arc<ReloadLog>,
    mcp: Option<&Mcp>,
) -> Metrics {
    let mut registry = Registry::default();
    let ours = registry.sub_registry_with_prefix("mdproxy");
    Requests::register_metrics(state.requests(), ours);
    crate::upstream::metrics::register(state.upstream(), ours);
    crate::cache::metrics::register(state.cache(), ours);
    crate::hub::metrics::register(hub, ours);
    ReloadLog::register_metrics(reloads, ours);
    if let Some(cluster) = state.cluster() {
        mdproxy_fleet::metrics::register(cluster, ours);
    }
    if let Some(mcp) = mcp {
        mcp.register_metrics(ours);
    }
    crate::ops::metrics::register_node(state, ours);
    Metrics::new(registry)
}

/// The scheduler of `config` with its built-in and configured jobs (and the
/// start-up prewarm), or none when it is off.
async fn start_scheduler(
    config: &Config,
    state: &AppState,
    jobs: &scheduler::Jobs,
) -> Result<Option<Scheduler>, SchedulerError> {
    if !config.scheduler.enabled {
        return Ok(None);
    }
    let mut plans = scheduler::builtin();
    plans.extend(scheduler::configured(&config.scheduler.jobs));
    let plans = jobs.register_all(plans);
    if config.scheduler.prewarm_on_start {
        scheduler::prewarm_on_start(state, &plans, jobs);
    }
    Scheduler::start(state.clone(), plans, jobs).await.map(Some)
}

fn warn_if_calendar_is_short(state: &AppState) {
    let snap = state.snapshot();
    let year = chrono::Datelike::year(
        &state
            .clock()
            .now()
            .with_timezone(&chrono_tz::Asia::Shanghai),
    );
    if !snap.policy.calendar().covers(year) {
        tracing::warn!(
            year,
            "the holiday calendar does not cover this year: only weekends are known closed; set calendar.holidays"
        );
    }
}

impl App {
    /// `http://ADDR/api/v1`, or `https://` when the listener has a certificate.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/api/v1", self.addr)
    }

    /// The shared state (cache inspection, counters).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The client-facing service (benches drive it in-process).
    pub fn edge(&self) -> &Arc<Edge> {
        &self.edge
    }

    /// The quote hub.
    pub fn hub(&self) -> &QuoteHub {
        &self.hub
    }

    /// The MCP endpoint, when `[mcp]` is on.
    pub fn mcp(&self) -> Option<&Mcp> {
        self.mcp.as_deref()
    }

    /// How long a stop may take (`server.shutdown_grace_ms` at start).
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Every reload attempt so far (the config watcher's).
    pub fn reloads(&self) -> &Arc<ReloadLog> {
        &self.reloads
    }

    /// Applies a new, already validated configuration without touching connections,
    /// the cache, the counters or the rate buckets of unchanged limits. Returns the
    /// keys that only a restart can change.
    ///
    /// # Errors
    /// When the new upstream client cannot be built; the old config stays.
    pub fn reload(&self, config: Config) -> Result<Vec<&'static str>, ReloadError> {
        let parts = Parts {
            state: &self.state,
            edge: &self.edge,
            tls: self.tls.as_deref(),
            mcp: self.mcp.as_deref(),
        };
        apply(&parts, config).map(|a| a.needs_restart)
    }

    /// Reloads `path` on SIGHUP and whenever its content changes (polled every
    /// `server.reload_poll_ms`), until the proxy stops.
    pub fn watch_config(&self, path: PathBuf, lookup: Lookup) {
        let poll = Duration::from_millis(self.state.snapshot().config.server.reload_poll_ms);
        let (state, edge, tls) = (self.state.clone(), Arc::clone(&self.edge), self.tls.clone());
        let mcp = self.mcp.clone();
        let apply: Apply = Arc::new(move |config| {
            let parts = Parts {
                state: &state,
                edge: &edge,
                tls: tls.as_deref(),
                mcp: mcp.as_deref(),
            };
            apply(&parts, config)
        });
        crate::ops::reload::spawn(
            path,
            lookup,
            apply,
            Arc::clone(&self.reloads),
            poll,
            self.stop.clone(),
            &self.tracker,
        );
    }

    /// Stops accepting, stops the scheduler, lets open connections finish (within
    /// `server.shutdown_grace_ms`), and waits for every background task; fills still
    /// waiting on the upstream after the grace are ended.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.shutdown().await;
        }
        self.tracker.close();
        let grace = self.grace;
        if tokio::time::timeout(grace + ADMIN_GRACE, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                tasks = self.tracker.len(),
                "background work still running after the grace period; ending it"
            );
            self.state.upstream().halt();
            self.tracker.wait().await;
        }
        tracing::info!("stopped cleanly");
    }
}

/// The parts of a running proxy a reload reaches.
struct Parts<'a> {
    state: &'a AppState,
    edge: &'a Edge,
    tls: Option<&'a Tls>,
    mcp: Option<&'a Mcp>,
}

/// One reload, applied to every part that holds configuration.
fn apply(parts: &Parts<'_>, config: Config) -> Result<Applied, ReloadError> {
    let Parts {
        state,
        edge,
        tls,
        mcp,
    } = *parts;
    // TLS files first: a pair that does not load refuses the whole reload. It is
    // put in use only once the state took the reload, which may refuse it too.
    let tls_pair = match tls {
        Some(tls) if !config.server.tls_cert.is_empty() => tls
            .prepare(
                Path::new(&config.server.tls_cert),
                Path::new(&config.server.tls_key),
            )?
            .map(|pair| (tls, pair)),
        _ => None,
    };
    let upstream_changed = state.snapshot().config.upstream != config.upstream;
    // The state next: the other part that can refuse (a new upstream client).
    let needs_restart = state.reload(config.clone())?;
    if let Some((tls, pair)) = tls_pair {
        tls.install(pair);
        tracing::info!(cert = %config.server.tls_cert, "TLS certificate reloaded");
    }
    let revoked = edge.reconfigure(&config);
    if let Some(mcp) = mcp
        && !revoked.is_empty()
    {
        let closed = mcp.close_sessions_of(&revoked);
        tracing::info!(sessions = closed, "their agents' sessions are closed too");
    }
    if upstream_changed {
        crate::ops::probe::spawn(state);
    }
    Ok(Applied {
        generation: state.snapshot().generation,
        needs_restart,
    })
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
