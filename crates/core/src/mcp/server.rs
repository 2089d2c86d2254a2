//! The MCP server an agent talks to (rmcp's `ServerHandler`): the tools (with the
//! catalogue's schemas) and the catalogue's resource templates, listed with a
//! cache hint; each call or read answered by [`super::call`] and counted by tool
//! and outcome; quote resources watched through [`super::watch`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    JsonObject, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ResourceTemplate, ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{Instrument, Span};

use super::Caller;
use super::call::{self, Outcome, Read};
use super::memo::Memo;
use super::presence::Presence;
use super::watch;
use crate::hub::QuoteHub;
use crate::state::AppState;
use mdproxy_api::tools::{RESOURCE_ROOT, TOOLS, resource_target, resource_templates};

/// How long a client may keep the tool list: it changes only with a new build.
const TOOLS_TTL_MS: u64 = 3_600_000;

/// The name resource reads are counted under, beside the tools'.
pub const READS: &str = "resources/read";

/// Tool calls by tool (in [`TOOLS`]' order, then resource reads) and outcome.
#[derive(Debug)]
pub struct Calls {
    by_tool: Vec<[AtomicU64; Outcome::ALL.len()]>,
    /// Stateless calls answered without rmcp's service (by the endpoint itself).
    direct: AtomicU64,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls {
            by_tool: (0..=TOOLS.len()).map(|_| Default::default()).collect(),
            direct: AtomicU64::new(0),
        }
    }
}

impl Calls {
    pub(super) fn count_direct(&self) {
        self.direct.fetch_add(1, Ordering::Relaxed);
    }

    /// Stateless calls answered without rmcp's service.
    pub fn direct(&self) -> u64 {
        self.direct.load(Ordering::Relaxed)
    }

    fn count(&self, tool: usize, outcome: Outcome) {
        self.by_tool[tool][outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Every (tool, outcome, calls) with at least one call; resource reads as
    /// [`READS`].
    pub fn counted(&self) -> Vec<(&'static str, Outcome, u64)> {
        let mut out = Vec::new();
        let names = TOOLS.iter().map(|t| t.name).chain([READS]);
        for (tool, counts) in names.zip(&self.by_tool) {
            for outcome in Outcome::ALL {
                let n = counts[outcome.index()].load(Ordering::Relaxed);
                if n > 0 {
                    out.push((tool, outcome, n));
                }
            }
        }
        out
    }
}

/// One agent's server: the shared state, the tools it may call, the counters.
#[derive(Clone)]
pub struct Server {
    pub(super) state: AppState,
    pub(super) hub: QuoteHub,
    pub(super) tools: Arc<[Tool]>,
    pub(super) templates: Arc<[ResourceTemplate]>,
    /// The endpoints whose answers are resources here.
    pub(super) offered: Arc<Offered>,
    pub(super) calls: Arc<Calls>,
    pub(super) max_chars: usize,
    /// Results rendered once per cache entry, shared by every session.
    pub(super) memo: Arc<Memo>,
    /// The session's watched quote resources (2025 revisions), by URI: each
    /// relay stops when its guard is dropped (unsubscribed, or the session gone).
    pub(super) watches: Arc<Mutex<HashMap<String, DropGuard>>>,
    /// Whether each session's agent is still there: a watch ends once its
    /// agent is away.
    pub(super) presence: Arc<Presence>,
}

impl Server {
    /// The same server for a new session: its watches its own.
    pub(super) fn for_session(&self) -> Server {
        Server {
            watches: Arc::default(),
            ..self.clone()
        }
    }

    fn watches(&self) -> std::sync::MutexGuard<'_, HashMap<String, DropGuard>> {
        self.watches
            .lock()
            .expect("the watches lock is never poisoned")
    }

    /// Calls the tool `name` with `arguments`, counted by tool and outcome, its
    /// span under `request`'s.
    ///
    /// # Errors
    /// Invalid params for a tool the profile does not offer.
    pub(super) async fn call(
        &self,
        name: &str,
        arguments: &JsonObject,
        request: Option<&Span>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self
            .read_call(name, arguments, request)
            .await?
            .tool_result())
    }

    /// [`call`](Self::call)'s answer as it was rendered (once per cache entry).
    ///
    /// # Errors
    /// Invalid params for a tool the profile does not offer.
    pub(super) async fn read_call(
        &self,
        name: &str,
        arguments: &JsonObject,
        request: Option<&Span>,
    ) -> Result<Read, ErrorData> {
        let offered = self.tools.iter().any(|t| t.name == name);
        let Some(index) = TOOLS
            .iter()
            .position(|t| t.name == name)
            .filter(|_| offered)
        else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name}"),
                None,
            ));
        };
        let tool = &TOOLS[index];
        let span = crate::telemetry::mcp_span(request, "tools/call", tool.name);
        let read = call::call(
            &self.state,
            &self.hub,
            &self.memo,
            tool,
            arguments,
            self.max_chars,
        )
        .instrument(span.clone())
        .await;
        span.record("mdproxy.outcome", read.outcome.as_str());
        self.calls.count(index, read.outcome);
        Ok(read)
    }
}

/// What the edge said of the request, as it put it on the request.
fn caller(context: &RequestContext<RoleServer>) -> Option<&Caller> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
}

/// The session a request belongs to (none in the stateless revision).
fn session_id(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    let id = parts.headers.get("mcp-session-id")?.to_str().ok()?;
    Some(id.to_owned())
}

/// The client a request came from (its key's index).
fn client(context: &RequestContext<RoleServer>) -> Option<usize> {
    caller(context).map(|c| c.client)
}

/// The span of an MCP operation, a child of its request's.
fn span_of(context: &RequestContext<RoleServer>, method: &'static str, name: &str) -> Span {
    let request = caller(context).and_then(|c| c.span.as_ref());
    crate::telemetry::mcp_span(request, method, name)
}

/// The catalogue's endpoints as resource templates.
pub fn templates(offered: &Offered) -> Arc<[ResourceTemplate]> {
    resource_templates()
        .into_iter()
        .filter(|(_, endpoint)| offered.has(endpoint.id))
        .map(|(uri, endpoint)| {
            let mut template = ResourceTemplate::new(uri, endpoint.path.clone());
            template.description = Some(endpoint.summary.clone());
            template.mime_type = Some("application/json".into());
            template
        })
        .collect()
}

/// The endpoints whose answers are resources: every one of the catalogue, or, when
/// `mcp.tools` names some tools, those that the tools named answer (an operator
/// who offers a few tools to hold down what agents cost offers no more by reading
/// resources).
#[derive(Debug)]
pub struct Offered(Option<HashSet<usize>>);

impl Offered {
    /// What `allowed` (`mcp.tools`) offers.
    pub fn of(allowed: &[String]) -> Offered {
        if allowed.is_empty() {
            return Offered(None);
        }
        let ids = TOOLS
            .iter()
            .filter(|tool| allowed.iter().any(|a| a == tool.name))
            .flat_map(|tool| tool.endpoints().map(|(_, endpoint)| endpoint.id))
            .collect();
        Offered(Some(ids))
    }

    fn has(&self, endpoint: usize) -> bool {
        self.0.as_ref().is_none_or(|ids| ids.contains(&endpoint))
    }

    /// Whether the resource at `uri` is offered (one that is none at all is, for
    /// its own error to say so).
    fn offers(&self, uri: &str) -> bool {
        let Some(target) = resource_target(uri) else {
            return true;
        };
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        mdproxy_api::router()
            .route(path)
            .is_none_or(|route| self.has(route.endpoint.id))
    }

    /// The refusal of `uri`, not offered.
    fn refusal(uri: &str) -> ErrorData {
        ErrorData::resource_not_found(
            format!(
                "{uri} is not offered here: mcp.tools limits this server to its tools' endpoints"
            ),
            None,
        )
    }
}

/// The tools of the profile that `allowed` names (all when it is empty), as MCP
/// lists them: their input and output schemas from the catalogue.
pub fn listed(allowed: &[String]) -> Arc<[Tool]> {
    TOOLS
        .iter()
        .filter(|tool| allowed.is_empty() || allowed.iter().any(|a| a == tool.name))
        .map(|tool| {
            let mut output = tool.output_schema();
            if tool.name == watch::QUOTE_TOOL {
                call::widen_for_board(&mut output);
            }
            Tool::new(tool.name, tool.description, tool.input_schema())
                .with_raw_output_schema(Arc::new(output))
                .annotate(
                    ToolAnnotations::new()
                        .read_only(true)
                        .destructive(false)
                        .idempotent(true)
                        .open_world(true),
                )
        })
        .collect()
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("mdproxy", crate::build::VERSION))
        .with_instructions(
            "Chinese market data (A-shares, funds, macro, news) from a caching proxy. \
                 Each result carries `asOf` (when the upstream answered) and `cache` \
                 (hit, stale or miss). Codes are accepted as people type them \
                 (600519, 600519.SH, sh600519). Every endpoint of the REST API is also a \
                 resource: mdproxy://api/v1/<path>?<query>; quotes \
                 (mdproxy://api/v1/stock/indicator/realtime/<code>) can be subscribed to, \
                 and are updated at each poll of the quote hub.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec())
            .with_ttl_ms(TOOLS_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(
            ListResourceTemplatesResult::with_all_items(self.templates.to_vec())
                .with_ttl_ms(TOOLS_TTL_MS)
                .with_cache_scope(CacheScope::Public),
        )
    }

    /// A resource is the REST answer of its URI's target, from the same cache;
    /// its faults are JSON-RPC errors, with the tool result's JSON as their data.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let span = span_of(&context, READS, "");
        if !self.offered.offers(&request.uri) {
            return Err(Offered::refusal(&request.uri));
        }
        let Some(target) = resource_target(&request.uri) else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "{} is no resource: they are under {RESOURCE_ROOT}/",
                    request.uri
                ),
                None,
            ));
        };
        let read = match call::from_board(&self.hub, target) {
            Some(read) => read,
            None => {
                call::read(&self.state, &self.memo, target, self.max_chars)
                    .instrument(span.clone())
                    .await
            }
        };
        span.record("mdproxy.outcome", read.outcome.as_str());
        self.calls.count(TOOLS.len(), read.outcome);
        let out = read.out();
        let message = out["message"].as_str().unwrap_or_default().to_owned();
        match read.outcome {
            Outcome::BadArgument => Err(ErrorData::invalid_params(message, Some(out.clone()))),
            Outcome::NotFound => Err(ErrorData::resource_not_found(message, Some(out.clone()))),
            Outcome::Failed => Err(ErrorData::internal_error(message, Some(out.clone()))),
            Outcome::Cached(_) => {
                let contents = ResourceContents::text(out.to_string(), request.uri)
                    .with_mime_type("application/json");
                // The revision's cache hint: as long as the entry stays fresh,
                // for anyone (the answer is the same for every client).
                let result = ReadResourceResult::new(vec![contents])
                    .with_ttl_ms(read.fresh_ms)
                    .with_cache_scope(CacheScope::Public);
                Ok(result.into())
            }
        }
    }

    /// A quote resource watched for this session: a hub stream of its code whose
    /// quote events become `notifications/resources/updated`, until its agent is
    /// away (no request and no stream of the session open for its idle time).
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if !self.offered.offers(&request.uri) {
            return Err(Offered::refusal(&request.uri));
        }
        let code = watch::quote_code(&request.uri)?;
        let events = watch::open(&self.hub, client(&context), &code)?;
        let stop = CancellationToken::new();
        // A second subscription to one URI replaces the first (whose guard stops it).
        self.watches()
            .insert(request.uri.clone(), stop.clone().drop_guard());
        let session = session_id(&context);
        let (peer, uri, presence) = (context.peer, request.uri, Arc::clone(&self.presence));
        self.state
            .tracker()
            .spawn(watch::relay(vec![events], stop, move |_| {
                let there = session
                    .as_deref()
                    .is_none_or(|id| presence.present(id, Instant::now()));
                let (peer, uri) = (peer.clone(), uri.clone());
                async move {
                    let updated = ResourceUpdatedNotificationParam::new(uri);
                    there && peer.notify_resource_updated(updated).await.is_ok()
                }
            }));
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.watches().remove(&request.uri);
        Ok(())
    }

    /// The 2026-07-28 revision's `subscriptions/listen`: the quote resources among
    /// those asked for.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let quotes = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| self.offered.offers(uri) && watch::quote_code(uri).is_ok())
            .cloned();
        let mut accepted = SubscriptionFilter::new();
        accepted.resource_subscriptions = Some(quotes.collect());
        Some(accepted)
    }

    /// One `subscriptions/listen`: a hub stream for each quote accepted, until
    /// the client cancels it.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let who = client(context.request_context());
        let mut streams = Vec::with_capacity(uris.len());
        for uri in &uris {
            streams.push(watch::open(&self.hub, who, &watch::quote_code(uri)?)?);
        }
        let stop = CancellationToken::new();
        let sink = context.sink().clone();
        let relayed = watch::relay(streams, stop.clone(), |i| {
            let (sink, uri) = (sink.clone(), uris[i].clone());
            async move { sink.notify_resource_updated(uri).await.is_ok() }
        });
        tokio::select! {
            () = relayed => {}
            () = context.cancelled() => stop.cancel(),
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let traced = caller(&context).and_then(|c| c.span.as_ref());
        let arguments = request.arguments.unwrap_or_default();
        let result = self.call(&request.name, &arguments, traced).await?;
        Ok(result.into())
    }
}
