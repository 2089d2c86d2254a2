//! MCP for AI agents: the upstream MCP server's 28 tools over streamable HTTP
//! (rmcp's service, mounted by the edge at `/mcp`), every call answered by the
//! read-through as the REST request it stands for: one entry, one fill, one budget
//! with the dashboards. Knows nothing of keys and client limits (the edge's).

pub mod call;
mod direct;
mod fit;
mod memo;
mod metrics;
pub mod opened;
mod presence;
pub mod server;
mod sessions;
pub mod watch;

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Collected, Full};
use hyper::body::Incoming;
use prometheus_client::registry::Registry;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::hub::QuoteHub;
use crate::state::AppState;
use mdproxy_config::{McpConfig, Secret};
use mdproxy_fleet::agents::AgentSessions;
use presence::Presence;
use server::{Calls, Server};
use sessions::FleetSessions;

/// What the edge tells the MCP endpoint of a request, on its extensions: the
/// client (its key's identity here), the key itself (a session kept for the fleet
/// is bound to a digest of it) and the request's span, if traced.
#[derive(Clone, Debug)]
pub struct Caller {
    pub client: usize,
    pub key: Arc<Secret>,
    pub span: Option<tracing::Span>,
}

/// The paths it answers: the proxy's root, and under the API's prefix as the
/// upstream's `<base>/mcp`.
pub const PATHS: [&str; 2] = ["/mcp", "/api/v1/mcp"];

/// The largest message body read (rmcp's default is 4 MiB): a client's messages
/// are a few hundred bytes (a tool's arguments are codes, dates and names), and
/// every request that reads one holds it whole. A larger body is refused with
/// `413` as soon as it passes this, before the rest is read.
pub const MAX_MESSAGE: usize = 256 * 1024;

/// The MCP endpoint: rmcp's streamable HTTP service over [`Server`], with its
/// sessions (for the 2025 revisions, kept for the fleet when there is one; the
/// 2026-07-28 revision needs none).
pub struct Mcp {
    service: StreamableHttpService<Server, LocalSessionManager>,
    /// The server the stateless calls answered directly go to.
    server: Server,
    /// Whether those calls are answered directly (tests compare both ways).
    direct: AtomicBool,
    calls: Arc<Calls>,
    /// The sessions of the 2025 revisions (closed after rmcp's idle time).
    sessions: Arc<LocalSessionManager>,
    /// Who opened each of them, for their bounds.
    opened: opened::Opened,
    /// The fleet's store of sessions, when sessions are kept for the fleet.
    kept: Option<Arc<dyn AgentSessions>>,
    /// Whether each one's agent is still there, for its watches.
    presence: Arc<Presence>,
}

/// Whose a session presented with a request is.
enum Whose {
    /// The caller's (or, on a node alone, one this node did not count: rmcp
    /// answers it as it knows it).
    Opener,
    /// The caller's, as the fleet kept it: restored here for this client.
    Restored(usize),
    /// Another key's.
    Other,
}

impl fmt::Debug for Mcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mcp").finish_non_exhaustive()
    }
}

impl Mcp {
    /// The endpoint over `state` (and `hub` for quotes it polls) as `config` says,
    /// its sessions closed at `stop`.
    pub fn new(
        state: &AppState,
        hub: &QuoteHub,
        config: &McpConfig,
        stop: CancellationToken,
    ) -> Mcp {
        let calls = Arc::new(Calls::default());
        let offered = server::Offered::of(&config.tools);
        let idle = Duration::from_secs(config.session_idle_secs);
        let presence = Presence::new(idle);
        let server = Server {
            state: state.clone(),
            hub: hub.clone(),
            tools: server::listed(&config.tools),
            templates: server::templates(&offered),
            offered: Arc::new(offered),
            calls: Arc::clone(&calls),
            max_chars: config.max_result_chars,
            watches: Arc::default(),
            memo: Arc::default(),
            presence: Arc::clone(&presence),
        };
        // Any Host: the proxy is reached by names rmcp cannot know, and a key is
        // asked for every request (its loopback-only default guards servers that
        // ask for none). Origins: the ones named, else none at all.
        let http = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_cancellation_token(stop)
            .with_json_response(true)
            .with_max_request_body_bytes(MAX_MESSAGE);
        let mut http = if config.allowed_origins.is_empty() {
            http.enforce_origin_validation()
        } else {
            http.with_allowed_origins(config.allowed_origins.clone())
        };
        // In a fleet, a session opened on one node is answered by any.
        http.session_store = FleetSessions::over(state.fleet().agents());
        // A session idle this long is closed; its watches do not count as its
        // agent's activity (`presence`), though rmcp's timer sees them as such.
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(idle);
        let sessions = Arc::new(sessions);
        // A server for each session: its watches are its own.
        let base = server.clone();
        let service =
            StreamableHttpService::new(move || Ok(base.for_session()), Arc::clone(&sessions), http);
        Mcp {
            service,
            server,
            direct: AtomicBool::new(true),
            calls,
            sessions,
            opened: opened::Opened::default(),
            kept: Some(Arc::clone(state.fleet().agents())).filter(|k| k.is_shared()),
            presence,
        }
    }

    /// Answers one request to [`PATHS`] (its key checked by the edge): a plain
    /// stateless tool call directly ([`direct`]), everything else by rmcp.
    pub async fn serve(&self, request: Request<Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        let direct = self.direct.load(Ordering::Relaxed);
        if !direct || !direct::eligible(request.method(), request.headers()) {
            return self.by_rmcp(request).await;
        }
        let (parts, body) = request.into_parts();
        // Bounded: an eligible request says its length, at most direct::MAX_BODY.
        let bytes = body
            .collect()
            .await
            .map(Collected::to_bytes)
            .unwrap_or_default();
        if let Some(call) = direct::parse(&parts.headers, &bytes) {
            let traced = parts
                .extensions
                .get::<Caller>()
                .and_then(|c| c.span.clone());
            if let Some(answer) = direct::answer(&self.server, call, traced.as_ref()).await {
                self.calls.count_direct();
                return answer.map(|b| Full::new(b).boxed());
            }
        }
        let request = Request::from_parts(parts, Full::new(bytes));
        self.service.handle(request).await
    }

    /// Answers `request` with rmcp's service; one that may open a session (any
    /// POST without a session) only within the bounds of [`opened`], and the
    /// session it opens counted. A request of a session is its agent's sign of
    /// life, and so is each stream it holds open.
    async fn by_rmcp(&self, request: Request<Incoming>) -> Response<BoxBody<Bytes, Infallible>> {
        let headers = request.headers();
        // A session ID is visible ASCII; one that is not names no session here,
        // and rmcp would take it for none and open one outside the bounds.
        let session = match headers.get("mcp-session-id").map(|v| v.to_str()) {
            None => None,
            Some(Ok(id)) => Some(id.to_owned()),
            Some(Err(_)) => return opened::not_found().map(|b| Full::new(b).boxed()),
        };
        // Whether rmcp opens a session is its body's to say (an `initialize`,
        // whatever `Mcp-Method` claims before the 2026 revision): every POST
        // without one is read ([`Mcp::maybe_open`]).
        let opening = request.method() == http::Method::POST && session.is_none();
        let caller = request.extensions().get::<Caller>().cloned();
        // A session is its opener's: another key presenting its ID (a leaked
        // one) is told it does not exist, as rmcp tells of an unknown one.
        let mut restoring = false;
        if let Some(id) = &session {
            match self.whose(id, caller.as_ref()).await {
                Whose::Opener => {}
                Whose::Restored(client) => {
                    // Counted, and checked, as opened here before rmcp restores
                    // it: another key's request meanwhile meets its opener.
                    self.opened.note(id, client);
                    restoring = true;
                }
                Whose::Other => return opened::not_found().map(|b| Full::new(b).boxed()),
            }
        }
        let response = match caller.filter(|_| opening) {
            Some(caller) => self.maybe_open(request, &caller).await,
            None => self.service.handle(request).await,
        };
        if let Some(id) = session.as_deref().filter(|_| restoring)
            && response.status() == http::StatusCode::NOT_FOUND
            && !self.sessions.sessions.read().await.contains_key(id)
        {
            // Nothing was restored (a 404 for another reason leaves it counted).
            self.opened.forget(id);
        }
        // Only a session rmcp knows is noted: an unknown ID is its 404, and
        // noting it would let any key fill the table.
        let session = session.filter(|_| response.status() != http::StatusCode::NOT_FOUND);
        if let Some(id) = &session {
            self.presence.seen(id);
        }
        match session {
            Some(id) if is_stream(&response) => {
                let held = self.presence.streaming(&id);
                response.map(|body| {
                    body.map_frame(move |frame| {
                        let _agent_there = &held;
                        frame
                    })
                    .boxed()
                })
            }
            _ => response,
        }
    }

    /// Whether `caller` may use the session `id`: the key that opened it here, or
    /// (in a fleet, a session this node neither opened nor restored) the key whose
    /// digest the fleet kept beside it. Redis away, no digest kept, or no caller
    /// is another key's: the session is then unknown here, as it is without Redis.
    async fn whose(&self, id: &str, caller: Option<&Caller>) -> Whose {
        if let Some(owner) = self.opened.owner(id) {
            return match caller {
                Some(caller) if caller.client != owner => Whose::Other,
                _ => Whose::Opener,
            };
        }
        let Some(kept) = &self.kept else {
            return Whose::Opener;
        };
        let Some(caller) = caller else {
            return Whose::Other;
        };
        match kept.owner(id).await {
            Ok(Some(digest)) if digest == opened::digest(id, &caller.key) => {
                Whose::Restored(caller.client)
            }
            _ => Whose::Other,
        }
    }

    /// A POST without a session, read whole (within rmcp's own bound): one that
    /// may open a session ([`opens_a_session`]) is answered within the bounds of
    /// [`opened`], anything else by rmcp as it is, so a stateless call costs no
    /// look at the sessions and is never refused for them.
    async fn maybe_open(
        &self,
        request: Request<Incoming>,
        caller: &Caller,
    ) -> Response<BoxBody<Bytes, Infallible>> {
        let (parts, body) = request.into_parts();
        let bytes = match http_body_util::Limited::new(body, MAX_MESSAGE)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            // As rmcp says either (its own words, its statuses).
            Err(e) => {
                let (status, said) = if e.is::<http_body_util::LengthLimitError>() {
                    let said =
                        format!("Payload Too Large: request body exceeds {MAX_MESSAGE} bytes");
                    (http::StatusCode::PAYLOAD_TOO_LARGE, said)
                } else {
                    let said = format!("Failed to read request body: {e}");
                    (http::StatusCode::BAD_REQUEST, said)
                };
                let mut refused = Response::new(Full::new(Bytes::from(said)));
                *refused.status_mut() = status;
                return refused.map(BodyExt::boxed);
            }
        };
        let opens = opens_a_session(&bytes);
        let request = Request::from_parts(parts, Full::new(bytes));
        if opens {
            self.open_session(request, caller).await
        } else {
            self.service.handle(request).await
        }
    }

    /// Opens a session for `caller` within the bounds of [`opened`]; in a fleet,
    /// a digest of its key is kept beside it.
    async fn open_session(
        &self,
        request: Request<Full<Bytes>>,
        caller: &Caller,
    ) -> Response<BoxBody<Bytes, Infallible>> {
        let client = caller.client;
        let refused = {
            let live = self.sessions.sessions.read().await;
            let is_live = |id: &str| live.contains_key(id);
            self.presence.forget_closed(is_live);
            self.opened.may_open(client, is_live)
        };
        if let Err(full) = refused {
            return full.response().map(|b| Full::new(b).boxed());
        }
        let response = self.service.handle(request).await;
        if let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.opened.note(id, client);
            self.presence.seen(id);
            if let Some(kept) = &self.kept
                && kept
                    .keep_owner(id, opened::digest(id, &caller.key))
                    .await
                    .is_err()
            {
                tracing::warn!(
                    "Redis is away: a session opened now is answered by this node alone"
                );
            }
        }
        response
    }

    /// Closes the sessions opened here by `revoked` keys (a reload took them
    /// away): their streams and watches end with them. Returns how many.
    pub fn close_sessions_of(&self, revoked: &[usize]) -> usize {
        let ids = self.opened.of(revoked);
        let closing = ids.len();
        // A reload runs on the runtime (the watcher, the admin endpoint); outside
        // one there is no session to close either.
        if let (true, Ok(runtime)) = (closing > 0, tokio::runtime::Handle::try_current()) {
            let sessions = Arc::clone(&self.sessions);
            runtime.spawn(async move {
                for id in ids {
                    // Already gone (closed or idle meanwhile) is as good as closed.
                    let _ = sessions.close_session(&id.into()).await;
                }
            });
        }
        closing
    }

    /// Whether plain stateless tool calls are answered without rmcp's service
    /// (on unless a test compares both ways).
    pub fn answer_directly(&self, on: bool) {
        self.direct.store(on, Ordering::Relaxed);
    }

    /// Registers its counters in `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(metrics::McpMetrics {
            calls: Arc::clone(&self.calls),
            sessions: Arc::clone(&self.sessions),
        }));
    }

    /// The open sessions, unless one is opening or closing this instant.
    pub fn sessions(&self) -> Option<usize> {
        self.sessions.sessions.try_read().ok().map(|s| s.len())
    }

    /// Tool calls so far, by tool and outcome.
    pub fn calls(&self) -> &Calls {
        &self.calls
    }
}

/// Whether `response` is a stream of events (an SSE answer or a `GET` stream).
fn is_stream<B>(response: &Response<B>) -> bool {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// Whether rmcp may open a session for a POST of `body` without one: an
/// `initialize` (what rmcp opens one for, whatever the headers say), or a body
/// that is not one JSON-RPC object naming another method (rmcp refuses it; read
/// as opening, it stays within the bounds).
fn opens_a_session(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    // serde would read a struct from an array too.
    if body.trim_ascii_start().first() != Some(&b'{') {
        return true;
    }
    match serde_json::from_slice::<Message<'_>>(body) {
        Ok(message) => message.method.as_deref() == Some("initialize"),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::opens_a_session;

    #[test]
    fn an_initialize_opens_a_session_whatever_else_comes() {
        let opens = |body: &str| opens_a_session(body.as_bytes());
        assert!(opens(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#
        ));
        assert!(opens(r#"{"method":"init\u0069alize"}"#), "escaped");
        assert!(!opens(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
        assert!(
            !opens(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            "a response"
        );
        assert!(opens("[]"), "not one object");
        assert!(opens("{not json"));
    }
}
